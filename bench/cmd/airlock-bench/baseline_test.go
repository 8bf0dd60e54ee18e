//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestBaselineVerdict(t *testing.T) {
	for _, tt := range []struct {
		ratio   float64
		verdict string
		change  string
	}{
		{1, "within 5 %", "0.0 %"},
		{0.9, "within 5 %", "−10.0 %"}, // faster is within too
		{1.02, "within 5 %", "+2.0 %"},
		{1.05, "within 5 %", "+5.0 %"},
		// Judged as printed: 1.0504 shows as +5.0 %, so it is within.
		{1.0504, "within 5 %", "+5.0 %"},
		{1.0551, "slower by 5.5 %", "+5.5 %"},
		{1.073, "slower by 7.3 %", "+7.3 %"},
		{2, "slower by 100.0 %", "+100.0 %"},
		{0, "not measured", "–"},
		{-1, "not measured", "–"},
		{math.NaN(), "not measured", "–"},
		{math.Inf(1), "not measured", "–"},
	} {
		if got := baselineVerdict(tt.ratio); got != tt.verdict {
			t.Errorf("baselineVerdict(%v) = %q, want %q", tt.ratio, got, tt.verdict)
		}
		if got := fmtChange(tt.ratio); got != tt.change {
			t.Errorf("fmtChange(%v) = %q, want %q", tt.ratio, got, tt.change)
		}
	}
}

func TestPairOrder(t *testing.T) {
	var seq []int
	for i := -3; i < 4; i++ {
		o := pairOrder(i)
		if o[0] == o[1] {
			t.Fatalf("pairOrder(%d) = %v: one side twice", i, o)
		}
		seq = append(seq, o[:]...)
	}
	// -3 is odd: after first. Then the first side alternates pair by pair.
	want := []int{1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0}
	if !slices.Equal(seq, want) {
		t.Errorf("order of pairs -3..3 = %v, want %v", seq, want)
	}
}

// sides returns two functions for alternate that log every call, as
// "b" or "a" with the call's number, and return that number.
func sides(log *[]string) [2]func(context.Context) (int, error) {
	n := 0
	var f [2]func(context.Context) (int, error)
	for s, name := range [2]string{"b", "a"} {
		f[s] = func(context.Context) (int, error) {
			n++
			*log = append(*log, name)
			return n, nil
		}
	}
	return f
}

func TestAlternate(t *testing.T) {
	var log []string
	out, err := alternate(t.Context(), 3, 4, [2]string{"before", "after"}, sides(&log))
	if err != nil {
		t.Fatal(err)
	}
	// 3 untimed pairs, then 4 timed ones; the order flips every pair
	// ("b" is the revision, "a" the build under test).
	if got, want := strings.Join(log, ""), "ab"+"ba"+"ab"+"ba"+"ab"+"ba"+"ab"; got != want {
		t.Errorf("calls %s, want %s", got, want)
	}
	// Only the timed pairs are kept, each side's result of pair i at
	// index i: calls 7..14 are the timed ones, and pair 0 runs the
	// revision ("b") first.
	if want := []int{7, 10, 11, 14}; !slices.Equal(out[sideBefore], want) {
		t.Errorf("before results %v, want %v", out[sideBefore], want)
	}
	if want := []int{8, 9, 12, 13}; !slices.Equal(out[sideAfter], want) {
		t.Errorf("after results %v, want %v", out[sideAfter], want)
	}
	for i := range out[sideBefore] {
		if d := out[sideBefore][i] - out[sideAfter][i]; d != 1 && d != -1 {
			t.Errorf("pair %d: results %d and %d were not measured next to each other", i, out[sideBefore][i], out[sideAfter][i])
		}
	}

	// No warm-up: the first timed pair runs the revision first.
	log = nil
	out, err = alternate(t.Context(), 0, 2, [2]string{"before", "after"}, sides(&log))
	if err != nil || strings.Join(log, "") != "baab" || len(out[0]) != 2 || len(out[1]) != 2 {
		t.Errorf("no warm-up: calls %v, results %v, %v", log, out, err)
	}
}

func TestAlternateErrors(t *testing.T) {
	boom := errors.New("boom")
	names := [2]string{"before (ca5b440)", "after (main)"}
	failAt := func(side, call int) [2]func(context.Context) (int, error) {
		calls := 0
		var f [2]func(context.Context) (int, error)
		for s := range f {
			f[s] = func(context.Context) (int, error) {
				calls++
				if s == side && calls == call {
					return 0, boom
				}
				return calls, nil
			}
		}
		return f
	}
	// Call 2 is the after side of warm-up pair 1 (of 2).
	_, err := alternate(t.Context(), 2, 5, names, failAt(sideAfter, 2))
	if !errors.Is(err, boom) || err.Error() != "after (main), warm-up pair 1: boom" {
		t.Errorf("warm-up failure: %v", err)
	}
	// Call 6 is the before side of timed pair 2, which runs after first.
	_, err = alternate(t.Context(), 2, 5, names, failAt(sideBefore, 8))
	if !errors.Is(err, boom) || err.Error() != "before (ca5b440), pair 2: boom" {
		t.Errorf("timed failure: %v", err)
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	var log []string
	if _, err := alternate(ctx, 1, 3, names, sides(&log)); !errors.Is(err, context.Canceled) || len(log) != 0 {
		t.Errorf("cancelled context: %v after %d calls", err, len(log))
	}
}

func TestCompareSeries(t *testing.T) {
	var before, after []float64
	for i := range 100 {
		load := float64(i % 7) // shared by both halves of a pair
		before = append(before, 10+load)
		after = append(after, 11+load)
	}
	s := compareSeries(before, after, true)
	if s.Before.N != 100 || s.After.N != 100 || s.Before.P50 != 13 || s.After.P50 != 14 {
		t.Fatalf("summaries %+v, %+v", s.Before, s.After)
	}
	if math.Abs(s.Ratio-14.0/13) > 1e-12 || s.Verdict != "slower by 7.7 %" {
		t.Errorf("ratio %v, verdict %q", s.Ratio, s.Verdict)
	}
	if !(s.RatioLow <= s.Ratio && s.Ratio <= s.RatioHigh && s.RatioLow > 1) {
		t.Errorf("interval %v – %v does not hold %v above 1", s.RatioLow, s.RatioHigh, s.Ratio)
	}
	if c := s.caveat(); c != "" {
		t.Errorf("a clear slowdown got a caveat: %q", c)
	}
	if s := compareSeries(before, after, false); s.Verdict != "" {
		t.Errorf("unjudged series got the verdict %q", s.Verdict)
	}

	// Nothing measured: no ratio, and nothing JSON cannot hold.
	z := compareSeries(nil, nil, true)
	if z.Ratio != 0 || z.RatioLow != 0 || z.RatioHigh != 0 || z.Verdict != "not measured" {
		t.Errorf("empty series %+v", z)
	}
	if _, err := json.Marshal(&report{Baseline: &baselineResult{TTI: z, Exec: compareSeries([]float64{0}, []float64{1}, true)}}); err != nil {
		t.Errorf("JSON of an unmeasured comparison: %v", err)
	}
}

func TestBaselineCaveat(t *testing.T) {
	for _, tt := range []struct {
		ratio, lo, hi float64
		want          string // a word of the caveat, or "" for none
	}{
		{1.01, 0.99, 1.03, ""},
		{1.01, 0.95, 1.09, "does not rule out more than 5 %"},
		{1.10, 1.07, 1.13, ""},
		{1.10, 1.02, 1.18, "could explain it"},
		{1.10, 0, 0, ""}, // no interval
	} {
		s := baselineSeries{Ratio: tt.ratio, RatioLow: tt.lo, RatioHigh: tt.hi, Verdict: baselineVerdict(tt.ratio)}
		got := s.caveat()
		if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
			t.Errorf("caveat of %v in %v – %v = %q, want %q", tt.ratio, tt.lo, tt.hi, got, tt.want)
		}
	}
}

func TestWriteBaseline(t *testing.T) {
	var before, after []float64
	for i := range 40 {
		before = append(before, 10+float64(i%5))
		after = append(after, 10.1+float64(i%5))
	}
	b := &baselineResult{
		Rev: "HEAD~1", Commit: "ca5b4406fff60b1394dc4c13d0ce1adb8c1497dd", Describe: "ca5b440", Subject: "a change",
		Before: baselineBuild{Revision: "ca5b440", GoVersion: "go1.26.8", Isolation: "process", Notes: []string{"no cgroups"}},
		After:  baselineBuild{Revision: "329ffc2-dirty", GoVersion: "go1.26.9", Isolation: "process"},
		Warmup: 10, TTIRuns: 40, ExecRuns: 40, Tolerance: baselineTolerance,
		TTI:    compareSeries(before, after, true),
		Create: compareSeries(before, after, false),
		Close:  compareSeries(before, after, false),
		Exec:   compareSeries(after, before, true),
	}
	var buf bytes.Buffer
	writeBaseline(&buf, b)
	out := buf.String()
	for _, want := range []string{
		"### Before and after: ca5b440 (\"a change\") against 329ffc2-dirty",
		"| time to interactive: `create` → result of `exec` of `true` (40 each) | 12.00 ms / 14.00 ms | 12.10 ms / 14.10 ms | 1.008 (+0.8 %) |",
		"| … of which `create` |",
		"| `close` of that sandbox (not in TTI) |",
		"| exec round trip: `exec` of `true` in a running sandbox (40 each) | 12.10 ms / 14.10 ms | 12.00 ms / 14.00 ms | 0.992 (−0.8 %) |",
		"- Time to interactive: within 5 % (p50 12.00 ms → 12.10 ms, +0.8 %)\n",
		"- Exec round trip: within 5 % (p50 12.10 ms → 12.00 ms, −0.8 %)\n",
		"before: ca5b440 (ca5b4406fff60b1394dc4c13d0ce1adb8c1497dd)",
		"different Go toolchains",
		"Degraded confinement before (ca5b440):\n\n- no cgroups\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "Degraded confinement after") {
		t.Errorf("table lists notes the build under test did not have:\n%s", out)
	}

	// A run without the TTI series says so, and has no rows for its parts.
	b.TTIRuns, b.TTI, b.Create, b.Close = 0, compareSeries(nil, nil, true), baselineSeries{}, baselineSeries{}
	buf.Reset()
	writeBaseline(&buf, b)
	out = buf.String()
	if !strings.Contains(out, "(0 each) | – | – | – | – | not measured |") || strings.Contains(out, "of which `create`") || strings.Contains(out, "Time to interactive:") {
		t.Errorf("table without TTI:\n%s", out)
	}
}

func TestParseSkip(t *testing.T) {
	got, err := parseSkip(" refs,phases, tti,exec,memory,rpc,egress,")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 7 || got["baseline"] {
		t.Errorf("parseSkip = %v", got)
	}
	if got, err := parseSkip("baseline"); err != nil || !got["baseline"] {
		t.Errorf("parseSkip(baseline) = %v, %v", got, err)
	}
	if _, err := parseSkip("rpc,baselines"); err == nil || !strings.Contains(err.Error(), `"baselines"`) {
		t.Errorf("an unknown section: %v", err)
	}
}

func TestResolveRevision(t *testing.T) {
	mod := moduleRoot(t.Context())
	if mod == "" {
		t.Skip("not in the airlock module")
	}
	head := gitOut(t.Context(), mod, "rev-parse", "HEAD")
	if head == "" {
		t.Skip("the module is not a git repository")
	}
	for _, rev := range []string{"HEAD", head[:7], head, "HEAD^{commit}"} {
		if got, err := resolveRevision(t.Context(), mod, rev); err != nil || got != head {
			t.Errorf("resolveRevision(%q) = %q, %v; want %s", rev, got, err, head)
		}
	}
	// The tree of a commit is not a commit.
	if got, err := resolveRevision(t.Context(), mod, "HEAD^{tree}"); err == nil {
		t.Errorf("resolveRevision(HEAD^{tree}) = %s", got)
	}
	for _, rev := range []string{"", "-h", "--output=/tmp/x", "HEAD~1 HEAD", "no-such-revision-of-airlock", "HEAD..HEAD~1"} {
		if got, err := resolveRevision(t.Context(), mod, rev); err == nil || !strings.Contains(err.Error(), "-baseline") {
			t.Errorf("resolveRevision(%q) = %q, %v; want an error about -baseline", rev, got, err)
		}
	}
	if _, err := resolveRevision(t.Context(), "", "HEAD"); err == nil || !strings.Contains(err.Error(), "run the benchmark from the repository") {
		t.Errorf("outside the repository: %v", err)
	}
}

func TestExportRevision(t *testing.T) {
	mod := moduleRoot(t.Context())
	if mod == "" {
		t.Skip("not in the airlock module")
	}
	head := gitOut(t.Context(), mod, "rev-parse", "HEAD")
	if head == "" {
		t.Skip("the module is not a git repository")
	}
	dir := t.TempDir()
	if err := exportRevision(t.Context(), mod, head, dir); err != nil {
		t.Fatal(err)
	}
	// The committed tree, byte for byte, without the repository.
	for _, f := range []string{"go.mod", "cmd/airlock/main.go", "cmd/airlock-guest/main.go"} {
		got, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		want, err := exec.Command("git", "-C", mod, "show", head+":"+f).Output()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from the commit's", f)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, ".git")); !os.IsNotExist(err) {
		t.Errorf(".git in the export: %v", err)
	}
	if err := exportRevision(t.Context(), mod, strings.Repeat("0", 40), t.TempDir()); err == nil || !strings.Contains(err.Error(), "git archive") {
		t.Errorf("export of a missing commit: %v", err)
	}
}
