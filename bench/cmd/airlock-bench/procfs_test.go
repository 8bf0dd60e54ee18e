//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseStatPPID(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int
	}{
		{"123 (airlock-guest) S 45 123 123 0 -1 4194560", 45},
		// The command name may hold spaces and parentheses.
		{"7 (a) b (c) R 1 7 7 0 -1", 1},
	} {
		got, err := parseStatPPID([]byte(tt.in))
		if err != nil || got != tt.want {
			t.Errorf("parseStatPPID(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
	if _, err := parseStatPPID([]byte("garbage")); err == nil {
		t.Error("parseStatPPID accepted a line without a command name")
	}
}

func TestKBField(t *testing.T) {
	rollup := []byte("55d0c0a00000-7ffd3b5fe000 ---p 00000000 00:00 0 [rollup]\nRss:                4400 kB\nPss:                1234 kB\nPss_Anon:            800 kB\n")
	if v, ok := kbField(rollup, "Pss:"); !ok || v != 1234*1024 {
		t.Errorf("Pss = %d, %v", v, ok)
	}
	if _, ok := kbField(rollup, "Swap:"); ok {
		t.Error("found a field that is not there")
	}
	if v, ok := kbField([]byte("Threads:\t7\n"), "Threads:"); !ok || v != 7 {
		t.Errorf("unitless field = %d, %v", v, ok)
	}
}

func TestDescendants(t *testing.T) {
	children := map[int][]int{1: {10, 20}, 10: {11}, 11: {12}, 20: {21}, 99: {100}}
	got := descendants(10, children)
	if !slices.Equal(got, []int{10, 11, 12}) {
		t.Errorf("descendants(10) = %v", got)
	}
	if got := descendants(5, children); !slices.Equal(got, []int{5}) {
		t.Errorf("descendants of a leaf = %v", got)
	}
}

func TestProcessTreeSelf(t *testing.T) {
	pids := processTree(os.Getpid())
	if len(pids) == 0 || pids[0] != os.Getpid() {
		t.Fatalf("processTree(self) = %v", pids)
	}
	m, err := readProcMem(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if m.RSS <= 0 || m.Charged <= 0 || (m.Source != "pss" && m.Source != "rss") {
		t.Errorf("readProcMem(self) = %+v", m)
	}
}

func TestReportTargets(t *testing.T) {
	r := &report{TTI: &ttiResult{}, Exec: &execResult{}}
	r.TTI.TTI.P50 = 20
	r.Exec.RTT.P50 = 0.5
	r.evaluate()
	want := map[string]string{
		"time to interactive":          "FAIL",
		"exec round trip":              "PASS",
		"idle host memory per sandbox": "not measured",
		"rpc overhead":                 "not measured",
		"rpc write_file throughput":    "not measured",
		"rpc read_file throughput":     "not measured",
		"egress bulk https":            "not measured",
		"egress bulk http":             "not measured",
		"egress keep-alive https":      "not measured",
		"egress keep-alive http":       "not measured",
		"egress leaf mints":            "not measured",
	}
	checkVerdicts(t, r, want)
	var b bytes.Buffer
	r.writeTable(&b)
	if !strings.Contains(b.String(), "| time to interactive") || !strings.Contains(b.String(), "FAIL") {
		t.Errorf("table lacks the targets:\n%s", b.String())
	}
	if strings.Contains(b.String(), "against the embed API") {
		t.Errorf("table has an rpc breakdown without rpc results:\n%s", b.String())
	}
}

func TestReportRPCTargets(t *testing.T) {
	r := &report{RPC: &rpcResult{FileBytes: rpcFileBytes, FileRounds: rpcFileRounds}}
	r.RPC.Embed.P50, r.RPC.RPC.P50 = 1, 1.2
	r.RPC.Ratio = 1.2
	// Throughput passes at or above its limit, unlike the other targets.
	r.RPC.RPCWrite = newThroughput(rpcFileBytes, []time.Duration{400 * time.Millisecond, 300 * time.Millisecond, 200 * time.Millisecond})
	r.RPC.RPCRead = newThroughput(rpcFileBytes, []time.Duration{time.Second, time.Second, time.Second})
	if got := r.RPC.RPCWrite.MBps; math.Abs(got-rpcFileBytes/1e6/0.3) > 1e-9 {
		t.Errorf("write throughput %v MB/s, want that of the median round", got)
	}
	r.evaluate()
	checkVerdicts(t, r, map[string]string{
		"time to interactive":          "not measured",
		"exec round trip":              "not measured",
		"idle host memory per sandbox": "not measured",
		"rpc overhead":                 "PASS",
		"rpc write_file throughput":    "PASS",
		"rpc read_file throughput":     "FAIL",
		"egress bulk https":            "not measured",
		"egress bulk http":             "not measured",
		"egress keep-alive https":      "not measured",
		"egress keep-alive http":       "not measured",
		"egress leaf mints":            "not measured",
	})
	for _, tg := range r.Targets {
		if hib := strings.HasSuffix(tg.Name, "throughput") || strings.HasPrefix(tg.Name, "egress bulk"); tg.HigherIsBetter != hib {
			t.Errorf("%s: HigherIsBetter %v", tg.Name, tg.HigherIsBetter)
		}
	}
	r.RPC.Ratio = 1.31
	r.evaluate()
	if got := verdict(r.Targets[3]); r.Targets[3].Name != "rpc overhead" || got != "FAIL" {
		t.Errorf("%s at 1.31x: %s, want FAIL", r.Targets[3].Name, got)
	}

	var b bytes.Buffer
	r.writeTable(&b)
	for _, s := range []string{"`airlock rpc` overhead", "1.31x", "224 MB/s", "67 MB/s", "≥ 200 MB/s", "against the embed API", "through the embed API (informational)"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, b.String())
		}
	}

	// The new fields leave the JSON of the old targets as it was.
	j, err := json.Marshal(target{Name: "exec round trip", Limit: 1})
	if err != nil || strings.Contains(string(j), "higher_is_better") || strings.Contains(string(j), "equal") {
		t.Errorf("target JSON %s, %v", j, err)
	}
}

func checkVerdicts(t *testing.T, r *report, want map[string]string) {
	t.Helper()
	if len(r.Targets) != len(want) {
		t.Errorf("%d targets, want %d", len(r.Targets), len(want))
	}
	for _, tg := range r.Targets {
		if got := verdict(tg); got != want[tg.Name] {
			t.Errorf("%s: verdict %s, want %s", tg.Name, got, want[tg.Name])
		}
	}
}
