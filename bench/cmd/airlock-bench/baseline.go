//go:build linux

package main

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/bench/internal/stats"
	"github.com/airlock-sandbox/airlock/client"
)

const (
	// baselineTolerance is how much a median may grow from the baseline
	// to the build under test and still count as no change a user would
	// notice.
	baselineTolerance = 0.05
	// baselineLevel is the confidence level of each ratio's interval;
	// baselineResamples bootstrap resamples, drawn from a generator seeded
	// with baselineSeed, give it, so that the same samples always give the
	// same interval.
	baselineLevel     = 0.95
	baselineResamples = 2000
	baselineSeed      = 1
)

// The two sides of a comparison, as indices of the arrays below.
const (
	sideBefore = 0
	sideAfter  = 1
)

// baselineResult compares the build under test with the airlock of an
// earlier revision, both driven through `airlock rpc` by the same client
// in the same run.
type baselineResult struct {
	// Rev is the -baseline argument, Commit the commit it named, and
	// Describe and Subject say which one that is.
	Rev      string `json:"rev"`
	Commit   string `json:"commit"`
	Describe string `json:"describe,omitempty"`
	Subject  string `json:"subject,omitempty"`
	// BuildMs is the export and build of the revision's two binaries.
	BuildMs float64 `json:"build_ms"`
	// Before is the revision's build, After the one under test.
	Before baselineBuild `json:"before"`
	After  baselineBuild `json:"after"`
	// Warmup untimed pairs come before each series of TTIRuns or
	// ExecRuns pairs.
	Warmup    int     `json:"warmup"`
	TTIRuns   int     `json:"tti_runs"`
	ExecRuns  int     `json:"exec_runs"`
	Tolerance float64 `json:"tolerance"`
	// TTI is "create" with the default parameters up to the result of
	// "exec" of `true` in the new sandbox; Create is the first part of
	// it, and Close, the "close" that follows, is not in it.
	TTI    baselineSeries `json:"tti"`
	Create baselineSeries `json:"create"`
	Close  baselineSeries `json:"close"`
	// Exec is "exec" of `true` in a sandbox that is already running.
	Exec baselineSeries `json:"exec"`
}

// baselineBuild is one side of the comparison.
type baselineBuild struct {
	// Revision says which code it is.
	Revision string `json:"revision"`
	Airlock  string `json:"airlock"`
	Agent    string `json:"agent"`
	// GoVersion is the toolchain that built the airlock binary, from its
	// build information: two builds are only comparable when it is the
	// same.
	GoVersion string `json:"go_version,omitempty"`
	// Isolation and Notes are what "create" answered for the sandbox of
	// the exec series.
	Isolation string   `json:"isolation,omitempty"`
	Notes     []string `json:"notes,omitempty"`
}

// baselineSeries is one measurement, before and after, in milliseconds.
type baselineSeries struct {
	Before stats.Summary `json:"before_ms"`
	After  stats.Summary `json:"after_ms"`
	// Ratio is After.P50 / Before.P50, and RatioLow to RatioHigh its
	// paired bootstrap interval at baselineLevel; 0 when not measured.
	Ratio     float64 `json:"p50_ratio"`
	RatioLow  float64 `json:"p50_ratio_low"`
	RatioHigh float64 `json:"p50_ratio_high"`
	// Verdict is baselineVerdict(Ratio), for the series that are judged.
	Verdict string `json:"verdict,omitempty"`
}

// compareSeries summarises the two sides of one measurement, whose
// samples before[i] and after[i] are pair i.
func compareSeries(before, after []float64, judged bool) baselineSeries {
	s := baselineSeries{Before: stats.Summarize(before), After: stats.Summarize(after)}
	if s.Before.N > 0 && s.After.N > 0 && s.Before.P50 > 0 {
		s.Ratio = s.After.P50 / s.Before.P50
		lo, hi := stats.MedianRatioInterval(before, after, baselineLevel, baselineResamples, baselineSeed)
		// JSON has no NaN; the interval is NaN only when the ratio
		// cannot be made either.
		if finite(lo) && finite(hi) {
			s.RatioLow, s.RatioHigh = lo, hi
		}
	}
	if judged {
		s.Verdict = baselineVerdict(s.Ratio)
	}
	return s
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// caveat says when the interval of a judged series reaches across the
// tolerance, so that the run's noise could have given the other verdict;
// "" when it does not.
func (s baselineSeries) caveat() string {
	if s.Verdict == "" || !(s.Ratio > 0) || !(s.RatioHigh > 0) {
		return ""
	}
	limit := 1 + baselineTolerance
	within := changePercent(s.Ratio) <= 100*baselineTolerance
	switch {
	case within && s.RatioHigh > limit:
		return fmt.Sprintf("but the noise of this run does not rule out more than %g %% (the interval reaches %.3f): run it again on a quieter machine, or with more runs", 100*baselineTolerance, s.RatioHigh)
	case !within && s.RatioLow <= limit:
		return fmt.Sprintf("but the noise of this run could explain it (the interval reaches down to %.3f): run it again on a quieter machine, or with more runs", s.RatioLow)
	}
	return ""
}

// changePercent is a ratio of after to before as a change in percent,
// rounded to the tenth that the report shows, so that the verdict agrees
// with the number printed next to it.
func changePercent(ratio float64) float64 {
	return math.Round(1000*(ratio-1)) / 10
}

// baselineVerdict says whether a ratio of medians, after ÷ before, is
// within baselineTolerance: "within 5 %", or "slower by 7.3 %". A build
// that got faster is within it too.
func baselineVerdict(ratio float64) string {
	if !(ratio > 0) || !finite(ratio) {
		return "not measured"
	}
	pct, tol := changePercent(ratio), 100*baselineTolerance
	if pct <= tol {
		return fmt.Sprintf("within %g %%", tol)
	}
	return fmt.Sprintf("slower by %.1f %%", pct)
}

// fmtChange is a ratio as a signed change: "+2.0 %", "−1.5 %".
func fmtChange(ratio float64) string {
	if !(ratio > 0) || !finite(ratio) {
		return "–"
	}
	switch pct := changePercent(ratio); {
	case pct < 0:
		return fmt.Sprintf("−%.1f %%", -pct)
	case pct > 0:
		return fmt.Sprintf("+%.1f %%", pct)
	default:
		return "0.0 %"
	}
}

// pairOrder is the order in which pair i runs the two sides: the
// revision's first in even pairs, the build under test first in odd ones.
// Either order alone would give one side whatever the other leaves behind
// (a sandbox's teardown still finishing in the kernel, caches it warmed);
// alternating the order spreads that over both.
func pairOrder(i int) [2]int {
	if i&1 == 0 {
		return [2]int{sideBefore, sideAfter}
	}
	return [2]int{sideAfter, sideBefore}
}

// alternate calls each side's f once per pair, in pairOrder: warmup
// untimed pairs (numbered -warmup to -1), then runs pairs whose results it
// returns, one slice per side, so that out[sideBefore][i] and
// out[sideAfter][i] come from pair i. Whatever else the machine does then
// falls on both sides alike. names label the sides in errors.
func alternate[T any](ctx context.Context, warmup, runs int, names [2]string, f [2]func(context.Context) (T, error)) ([2][]T, error) {
	var out [2][]T
	for i := -warmup; i < runs; i++ {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		for _, s := range pairOrder(i) {
			v, err := f[s](ctx)
			if err != nil {
				if i < 0 {
					return out, fmt.Errorf("%s, warm-up pair %d: %w", names[s], warmup+i+1, err)
				}
				return out, fmt.Errorf("%s, pair %d: %w", names[s], i+1, err)
			}
			if i >= 0 {
				out[s] = append(out[s], v)
			}
		}
	}
	return out, nil
}

// resolveRevision returns the commit that rev names in the repository at
// mod.
func resolveRevision(ctx context.Context, mod, rev string) (string, error) {
	if mod == "" {
		return "", errors.New("-baseline: the current directory is not in the airlock repository, whose history the baseline is built from: run the benchmark from the repository")
	}
	// A revision never starts with "-"; an argument that does would be
	// read by git as an option.
	if rev == "" || strings.HasPrefix(rev, "-") || strings.ContainsAny(rev, " \t\n") {
		return "", fmt.Errorf("-baseline %q: not a git revision; give a commit, tag or branch, such as ca5b440 or HEAD~20", rev)
	}
	cmd := exec.CommandContext(ctx, "git", "rev-parse", "--verify", "--quiet", rev+"^{commit}")
	cmd.Dir = mod
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("-baseline %q: no such commit in the repository at %s (git rev-parse: %v); fetch it, or name another", rev, mod, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// newBaseline builds the airlock and airlock-guest of commit, next to each
// other in a directory under tmp, and describes the revision.
func newBaseline(ctx context.Context, mod, rev, commit, tmp string) (*baselineResult, error) {
	b := &baselineResult{
		Rev: rev, Commit: commit, Tolerance: baselineTolerance,
		Describe: gitOut(ctx, mod, "describe", "--always", "--tags", commit),
		Subject:  gitOut(ctx, mod, "log", "-1", "--format=%s", commit),
	}
	start := time.Now()
	src, err := os.MkdirTemp(tmp, "baseline-src-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(src)
	if err := exportRevision(ctx, mod, commit, src); err != nil {
		return nil, err
	}
	dir := filepath.Join(tmp, "baseline")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, err
	}
	what := "the airlock command of " + b.Describe
	if b.Before.Airlock, _, err = buildBinary(ctx, src, dir, "./cmd/airlock", what, "-baseline"); err != nil {
		return nil, err
	}
	what = "the agent of " + b.Describe
	if b.Before.Agent, _, err = buildBinary(ctx, src, dir, "./cmd/airlock-guest", what, "-baseline"); err != nil {
		return nil, err
	}
	b.BuildMs = ms(time.Since(start))
	b.Before.Revision = b.Describe
	b.Before.GoVersion = goVersion(b.Before.Airlock)
	return b, nil
}

// exportRevision writes the tree of commit into dir. git archive, unlike
// a worktree, leaves the repository as it was: nothing to prune if the
// benchmark is killed, and nothing that another user of the repository
// sees meanwhile.
func exportRevision(ctx context.Context, mod, commit, dir string) error {
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	var archErr, tarErr bytes.Buffer
	archive := exec.CommandContext(ctx, "git", "archive", "--format=tar", commit)
	archive.Dir, archive.Stdout, archive.Stderr = mod, pw, &archErr
	untar := exec.CommandContext(ctx, "tar", "-x", "-C", dir)
	untar.Stdin, untar.Stderr = pr, &tarErr
	err = archive.Start()
	if err == nil {
		if err = untar.Start(); err != nil {
			archive.Process.Kill()
			archive.Wait()
		}
	}
	// The children hold their own ends now; with the parent's closed, tar
	// sees the end of the archive when git exits.
	pw.Close()
	pr.Close()
	if err != nil {
		return fmt.Errorf("export %s: %w", commit, err)
	}
	aerr, terr := archive.Wait(), untar.Wait()
	if aerr != nil {
		return fmt.Errorf("export %s: git archive: %v: %s", commit, aerr, strings.TrimSpace(archErr.String()))
	}
	if terr != nil {
		return fmt.Errorf("export %s: tar: %v: %s", commit, terr, strings.TrimSpace(tarErr.String()))
	}
	return nil
}

// goVersion is the Go toolchain that built the binary at path, or "".
func goVersion(path string) string {
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return ""
	}
	return bi.GoVersion
}

// ttiSample is one sandbox of the TTI series.
type ttiSample struct{ tti, create, close time.Duration }

// rpcTTI creates a sandbox with the default parameters, which every
// revision's "create" takes, runs `true` in it and closes it.
func rpcTTI(ctx context.Context, c *client.Client) (ttiSample, error) {
	t0 := time.Now()
	sb, err := c.Create(ctx, api.CreateParams{})
	if err != nil {
		return ttiSample{}, fmt.Errorf("create: %w", err)
	}
	t1 := time.Now()
	err = rpcTrue(ctx, sb)
	t2 := time.Now()
	if err != nil {
		sb.Close(ctx)
		return ttiSample{}, fmt.Errorf("first command: %w", err)
	}
	if err := sb.Close(ctx); err != nil {
		return ttiSample{}, fmt.Errorf("close: %w", err)
	}
	return ttiSample{tti: t2.Sub(t0), create: t1.Sub(t0), close: time.Since(t2)}, nil
}

// measureBaseline runs the "baseline" section: b.Before, the revision's
// build, and b.After, the build under test, each behind an `airlock rpc`
// of its own with an AIRLOCK_HOME of its own under tmp, alternated pair by
// pair: time to interactive, then the exec round trip.
func measureBaseline(ctx context.Context, b *baselineResult, tmp string, warmup, ttiRuns, execRuns int) (err error) {
	b.Warmup, b.TTIRuns, b.ExecRuns = warmup, ttiRuns, execRuns
	b.After.GoVersion = goVersion(b.After.Airlock)
	builds := [2]*baselineBuild{sideBefore: &b.Before, sideAfter: &b.After}
	names := [2]string{sideBefore: "before (" + b.Before.Revision + ")", sideAfter: "after (" + b.After.Revision + ")"}

	var clients [2]*client.Client
	defer func() {
		for s, c := range clients {
			if c == nil {
				continue
			}
			if cerr := c.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("%s: close airlock rpc: %w", names[s], cerr)
			}
		}
	}()
	homes := [2]string{sideBefore: "home-before", sideAfter: "home-after"}
	for s, bd := range builds {
		home := filepath.Join(tmp, homes[s])
		if err := os.Mkdir(home, 0o700); err != nil {
			return err
		}
		clients[s], err = client.Start(ctx, client.Options{
			Binary: bd.Airlock,
			// The AIRLOCK_AGENT given last wins over one from the
			// environment, which would give both builds one agent.
			Env: append(os.Environ(), "AIRLOCK_AGENT="+bd.Agent, "AIRLOCK_HOME="+home),
		})
		if err != nil {
			return fmt.Errorf("%s: start airlock rpc: %w", names[s], err)
		}
	}

	if ttiRuns > 0 {
		var f [2]func(context.Context) (ttiSample, error)
		for s, c := range clients {
			f[s] = func(ctx context.Context) (ttiSample, error) { return rpcTTI(ctx, c) }
		}
		out, err := alternate(ctx, warmup, ttiRuns, names, f)
		if err != nil {
			return fmt.Errorf("time to interactive: %w", err)
		}
		millis := func(s int, pick func(ttiSample) time.Duration) []float64 {
			ds := make([]time.Duration, len(out[s]))
			for i, x := range out[s] {
				ds[i] = pick(x)
			}
			return stats.Millis(ds)
		}
		series := func(pick func(ttiSample) time.Duration, judged bool) baselineSeries {
			return compareSeries(millis(sideBefore, pick), millis(sideAfter, pick), judged)
		}
		b.TTI = series(func(x ttiSample) time.Duration { return x.tti }, true)
		b.Create = series(func(x ttiSample) time.Duration { return x.create }, false)
		b.Close = series(func(x ttiSample) time.Duration { return x.close }, false)
	} else {
		b.TTI.Verdict = baselineVerdict(0)
	}

	if execRuns > 0 {
		var f [2]func(context.Context) (time.Duration, error)
		for s, c := range clients {
			sb, err := c.Create(ctx, api.CreateParams{})
			if err != nil {
				return fmt.Errorf("exec round trip: %s: create: %w", names[s], err)
			}
			builds[s].Isolation, builds[s].Notes = sb.Isolation(), sb.Notes()
			// Closing the client at the end closes this sandbox too.
			f[s] = func(ctx context.Context) (time.Duration, error) {
				t0 := time.Now()
				err := rpcTrue(ctx, sb)
				return time.Since(t0), err
			}
		}
		out, err := alternate(ctx, warmup, execRuns, names, f)
		if err != nil {
			return fmt.Errorf("exec round trip: %w", err)
		}
		b.Exec = compareSeries(stats.Millis(out[sideBefore]), stats.Millis(out[sideAfter]), true)
	} else {
		b.Exec.Verdict = baselineVerdict(0)
	}
	return nil
}

// writeBaseline prints the baseline section's table.
func writeBaseline(w io.Writer, b *baselineResult) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	subject := ""
	if b.Subject != "" {
		subject = fmt.Sprintf(" (%q)", b.Subject)
	}
	p("### Before and after: %s%s against %s\n\n", b.Before.Revision, subject, b.After.Revision)
	p("Both through `airlock rpc`, driven by the same client, each with an `AIRLOCK_HOME` of its own; pair by pair, alternated (the earlier revision first in even pairs, second in odd ones), after %d untimed pairs. ", b.Warmup)
	p("The ratio is after ÷ before of the medians, with its %g %% paired bootstrap interval; within %g %% counts as no change.\n\n", 100*baselineLevel, 100*b.Tolerance)
	p("| measurement | before p50 / p90 | after p50 / p90 | after ÷ before, p50 | %g %% interval | verdict |\n|---|--:|--:|--:|--:|---|\n", 100*baselineLevel)
	row := func(name string, s baselineSeries) {
		if s.Before.N == 0 && s.After.N == 0 {
			p("| %s | – | – | – | – | not measured |\n", name)
			return
		}
		interval := "–"
		if s.RatioHigh > 0 {
			interval = fmt.Sprintf("%.3f – %.3f", s.RatioLow, s.RatioHigh)
		}
		p("| %s | %s / %s | %s / %s | %.3f (%s) | %s | %s |\n", name,
			fmtMs(s.Before.P50), fmtMs(s.Before.P90), fmtMs(s.After.P50), fmtMs(s.After.P90),
			s.Ratio, fmtChange(s.Ratio), interval, s.Verdict)
	}
	row(fmt.Sprintf("time to interactive: `create` → result of `exec` of `true` (%d each)", b.TTIRuns), b.TTI)
	if b.TTI.Before.N > 0 {
		row("… of which `create`", b.Create)
		row("`close` of that sandbox (not in TTI)", b.Close)
	}
	row(fmt.Sprintf("exec round trip: `exec` of `true` in a running sandbox (%d each)", b.ExecRuns), b.Exec)
	p("\n")

	var lines []string
	for _, x := range []struct {
		name string
		s    baselineSeries
	}{{"Time to interactive", b.TTI}, {"Exec round trip", b.Exec}} {
		if x.s.Before.N == 0 {
			continue
		}
		line := fmt.Sprintf("%s: %s (p50 %s → %s, %s)", x.name, x.s.Verdict, fmtMs(x.s.Before.P50), fmtMs(x.s.After.P50), fmtChange(x.s.Ratio))
		if c := x.s.caveat(); c != "" {
			line += "; " + c
		}
		lines = append(lines, line)
	}
	writeList(w, "Verdict", lines)

	about := []string{
		fmt.Sprintf("before: %s (%s), built from `git archive` of it with `CGO_ENABLED=0` by %s; isolation %s", b.Before.Revision, b.Commit, orDash(b.Before.GoVersion), orDash(b.Before.Isolation)),
		fmt.Sprintf("after: %s, built by %s; isolation %s", b.After.Revision, orDash(b.After.GoVersion), orDash(b.After.Isolation)),
	}
	if b.Before.GoVersion != b.After.GoVersion {
		about = append(about, "the two were built by different Go toolchains, so the compiler's changes are in the difference too")
	}
	writeList(w, "Builds", about)
	writeList(w, "Degraded confinement before ("+b.Before.Revision+")", b.Before.Notes)
	writeList(w, "Degraded confinement after ("+b.After.Revision+")", b.After.Notes)
}

func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}
