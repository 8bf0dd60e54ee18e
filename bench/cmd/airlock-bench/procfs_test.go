//go:build linux

package main

import (
	"bytes"
	"os"
	"slices"
	"strings"
	"testing"
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
	want := map[string]string{"time to interactive": "FAIL", "exec round trip": "PASS", "idle host memory per sandbox": "not measured"}
	for _, tg := range r.Targets {
		if got := verdict(tg); got != want[tg.Name] {
			t.Errorf("%s: verdict %s, want %s", tg.Name, got, want[tg.Name])
		}
	}
	var b bytes.Buffer
	r.writeTable(&b)
	if !strings.Contains(b.String(), "| time to interactive") || !strings.Contains(b.String(), "FAIL") {
		t.Errorf("table lacks the targets:\n%s", b.String())
	}
}
