//go:build linux

package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func egressReport() *report {
	lat := func(direct, airlock float64) *egressLatency {
		l := &egressLatency{}
		for i := 0; i < egressRounds; i++ {
			l.Direct.add([]float64{direct, direct}, 2, 2*direct, true)
			l.Airlock.add([]float64{airlock, airlock}, 2, 2*airlock, true)
		}
		l.finish()
		return l
	}
	bulk := func(direct, airlock time.Duration) *egressBulk {
		b := &egressBulk{
			Direct:  newThroughput(256*mib, []time.Duration{direct, direct, direct}),
			Airlock: newThroughput(256*mib, []time.Duration{airlock, airlock, airlock}),
		}
		b.Ratio = 100 * b.Airlock.MBps / b.Direct.MBps
		s := newThroughput(256*mib, []time.Duration{2 * direct, 2 * direct, 2 * direct})
		b.Slirp, b.SlirpRatio = &s, 100*s.MBps/b.Direct.MBps
		return b
	}
	r := &report{Egress: &egressResult{
		Rounds: egressRounds, Requests: 8, Conns: 8, Names: 4, BulkBytes: 256 * mib, BulkRounds: egressBulkRounds,
		HTTPKeepAlive:  lat(0.2, 1.5),
		HTTPSKeepAlive: lat(0.2, 0.6),
		NewConn:        lat(2, 4),
		NewName:        lat(2, 4.5),
		BulkHTTPS:      bulk(100*time.Millisecond, 125*time.Millisecond),
		BulkHTTP:       bulk(100*time.Millisecond, 200*time.Millisecond),
		Leaves:         egressLeaves{MintsBefore: 1, MintsAfter: 6, MintsMeasured: true, Names: 5, TLSConnections: 40, LeavesSeen: 5},
	}}
	r.Params.EgressBulkBytes = 256 * mib
	return r
}

func TestReportEgressTargets(t *testing.T) {
	r := egressReport()
	r.evaluate()
	checkVerdicts(t, r, map[string]string{
		"time to interactive":          "not measured",
		"exec round trip":              "not measured",
		"idle host memory per sandbox": "not measured",
		"rpc overhead":                 "not measured",
		"rpc write_file throughput":    "not measured",
		"rpc read_file throughput":     "not measured",
		"egress bulk https":            "PASS", // 80 %
		"egress bulk http":             "FAIL", // 50 %
		"egress keep-alive https":      "PASS", // +0.4 ms
		"egress keep-alive http":       "FAIL", // +1.3 ms
		"egress leaf mints":            "PASS", // 5 for 5 names
	})
	var b bytes.Buffer
	r.writeTable(&b)
	for _, s := range []string{"### Egress", "| 80 %", "| 50 %", "+0.400 ms", "+1.30 ms", "minted 5 (1 before", "= 5, one per name", "Round by round", "through slirp4netns instead, which forwards without inspecting (MTU 65520) | 2684 MB/s | 1342 MB/s | 50 % of direct"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, b.String())
		}
	}

	// A leaf per connection, or none at all, is no pass.
	r.Egress.Leaves.MintsAfter = 41
	r.evaluate()
	if got := verdict(r.Targets[10]); r.Targets[10].Name != "egress leaf mints" || got != "FAIL" {
		t.Errorf("%s with 40 mints for 5 names: %s, want FAIL", r.Targets[10].Name, got)
	}
	r.Egress.Leaves.MintsAfter = 1
	r.evaluate()
	if got := verdict(r.Targets[10]); got != "FAIL" {
		t.Errorf("no mint for 5 names: %s, want FAIL", got)
	}
	r.Egress.Leaves.MintsMeasured = false
	r.evaluate()
	if got := verdict(r.Targets[10]); got != "not measured" {
		t.Errorf("mints not read: %s, want not measured", got)
	}
}

func TestReportEgressSkipped(t *testing.T) {
	r := &report{Egress: &egressResult{Skipped: "no namespace"}}
	r.evaluate()
	for _, tg := range r.Targets {
		if strings.HasPrefix(tg.Name, "egress") && tg.Measured {
			t.Errorf("%s measured in a skipped section", tg.Name)
		}
	}
	var b bytes.Buffer
	r.writeTable(&b)
	if !strings.Contains(b.String(), "Skipped: no namespace") {
		t.Errorf("table lacks the reason:\n%s", b.String())
	}
}

func TestReportEgressSlirpSkipped(t *testing.T) {
	r := egressReport()
	r.Egress.BulkHTTPS.Slirp, r.Egress.BulkHTTP.Slirp = nil, nil
	r.Egress.SlirpSkipped = "slirp4netns not on PATH"
	var b bytes.Buffer
	r.writeTable(&b)
	if strings.Contains(b.String(), "through slirp4netns instead") {
		t.Errorf("table has a slirp4netns row that was not measured:\n%s", b.String())
	}
	if !strings.Contains(b.String(), "not also measured through slirp4netns: slirp4netns not on PATH.") {
		t.Errorf("table lacks why slirp4netns was left out:\n%s", b.String())
	}
}

func TestPrefixWriter(t *testing.T) {
	var lines []string
	w := &prefixWriter{logf: func(format string, a ...any) {
		lines = append(lines, strings.TrimPrefix(format, "  egress: %s")+string(a[0].([]byte)))
	}}
	w.Write([]byte("one\ntw"))
	w.Write([]byte("o\n"))
	if strings.Join(lines, "|") != "one|two" {
		t.Errorf("lines %q", lines)
	}
}
