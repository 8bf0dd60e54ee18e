package pjdfs_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
)

// knownFailuresFile lists the checks that fail in a sandbox and pass on
// the host's tmpfs, by test file, with the reason in its header. The
// test asserts exactly this list: a new failure is a regression, and a
// check that starts to pass must leave the list (and the README's
// account of it).
const knownFailuresFile = "testdata/known-failures.txt"

// knownFailures reads knownFailuresFile: test file -> failing checks.
func knownFailures(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(knownFailuresFile)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		file, checks, ok := strings.Cut(l, "\t")
		if !ok {
			t.Fatalf("%s: line %q is not FILE<tab>CHECKS", knownFailuresFile, l)
		}
		out[file] = expand(checks)
	}
	return out
}

// What a run covers. The whole suite is 8,798 checks, each starting
// a few processes, which on the 2-core machines this project is built
// on costs about 320 s of CPU per run, host and sandbox each: more than
// a CI run can spend on it. So the normal run leaves out rename/ (half
// of the checks, nearly all in the exhaustive matrices of rename/09.t
// and rename/10.t), -short runs the parts about owners, modes and ids
// only, and AIRLOCK_PJDFSTEST=all runs everything.
var (
	shortDirs  = []string{"chown", "chmod", "mkfifo", "open"}
	normalDirs = []string{"chflags", "chmod", "chown", "ftruncate", "granular", "link", "mkdir", "mkfifo",
		"mknod", "open", "posix_fallocate", "rmdir", "symlink", "truncate", "unlink", "utimensat"}
)

// runDirs are the parts of the suite this run covers ("" is all).
func runDirs() []string {
	switch {
	case os.Getenv("AIRLOCK_PJDFSTEST") == "all":
		return []string{""}
	case testing.Short():
		return shortDirs
	}
	return normalDirs
}

// jobs is how many test files each run (the host's, a sandbox's) has
// prove run at once. A file's checks run one after the other, each
// starting a few processes, and many wait a second for a clock to
// move: more files at once than cores keep the cores busy.
const jobs = 4

// TestPjdfstest runs pjdfstest on a tmpfs of the host and inside a
// sandbox of each isolation level, on the sandbox's own root, and
// compares: every check passes on the host, and in the sandbox every
// check passes but those of knownFailuresFile.
func TestPjdfstest(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("pjdfstest checks what root may do, and the host's reference run mounts a tmpfs: it needs root")
	}
	known := knownFailures(t)
	build := buildSuite(t, suiteSource(t))
	dirs := runDirs()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	// The host's run and the sandboxes' go on at once: much of the
	// suite's time is each test file's checks one after the other, so
	// two runs share the cores better than one after the other.
	type hostRun struct {
		r    proveResult
		out  string
		err  error
		took time.Duration
	}
	mnt := hostTmpfs(t)
	done := make(chan hostRun, 1)
	go func() {
		start := time.Now()
		r, out, err := runHost(ctx, mnt, build, jobs, dirs)
		done <- hostRun{r, out, err, time.Since(start)}
	}()
	var host hostRun
	var once sync.Once
	hostResult := func(t *testing.T) proveResult {
		t.Helper()
		once.Do(func() {
			host = <-done
			if host.err == nil {
				t.Logf("host tmpfs: %d files, %d checks, %d files with failures, in %s", host.r.Files, host.r.Tests, len(host.r.Failed), host.took.Round(time.Second))
			}
		})
		switch {
		case host.err != nil:
			t.Fatalf("%v\n%s", host.err, tail(host.out, 4000))
		case len(host.r.Failed) > 0 || !host.r.Passed:
			t.Fatalf("the reference run on the host's tmpfs fails (%v); the suite or this machine is broken:\n%s", host.r.Failed, tail(host.out, 8000))
		}
		return host.r
	}
	defer hostResult(t)

	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		start := time.Now()
		got, out := runSandbox(ctx, t, lv, build, dirs)
		n := 0
		for _, c := range got.Failed {
			n += len(c)
		}
		t.Logf("sandbox (%s): %d files, %d checks, %d failed in %d files, in %s", lv, got.Files, got.Tests, n, len(got.Failed), time.Since(start).Round(time.Second))
		host := hostResult(t)
		if got.Files != host.Files || got.Tests != host.Tests {
			t.Errorf("the sandbox ran %d files and %d checks, the host %d and %d", got.Files, got.Tests, host.Files, host.Tests)
		}
		want := map[string][]string{}
		for file, checks := range known {
			if selected(file, dirs) {
				want[file] = checks
			}
		}
		for _, file := range slices.Sorted(maps.Keys(got.Failed)) {
			if w, ok := want[file]; !ok || !slices.Equal(w, got.Failed[file]) {
				t.Errorf("%s: checks %v fail in the sandbox, want %v (%s)", file, got.Failed[file], w, knownFailuresFile)
			}
		}
		for _, file := range slices.Sorted(maps.Keys(want)) {
			if _, ok := got.Failed[file]; !ok {
				t.Errorf("%s: every check passes in the sandbox, but %v are listed as failing: take it off %s and the README", file, want[file], knownFailuresFile)
			}
		}
		if t.Failed() {
			t.Logf("prove in the sandbox:\n%s", tail(out, 16000))
		}
	})
}

// selected says whether test file (below tests/) is in one of dirs ("" is
// every one).
func selected(file string, dirs []string) bool {
	for _, d := range dirs {
		if d == "" || strings.HasPrefix(file, d+"/") {
			return true
		}
	}
	return false
}

// runSandbox copies the build into a new sandbox, under /root on its
// own writable root, and runs prove there.
func runSandbox(ctx context.Context, t *testing.T, lv airlock.Isolation, build string, dirs []string) (proveResult, string) {
	t.Helper()
	sb, err := airlock.Create(ctx, airlock.Config{Isolation: lv})
	if err != nil {
		t.Fatalf("create a %s sandbox: %v", lv, err)
	}
	t.Cleanup(func() { sb.Close() })
	const dest = "/root/pjdfstest"
	files, err := suiteFiles(build)
	if err != nil {
		t.Fatal(err)
	}
	made := map[string]bool{}
	for _, f := range files {
		p := path.Join(dest, filepath.ToSlash(f))
		if dir := path.Dir(p); !made[dir] {
			if err := sb.Mkdir(ctx, dir, 0o755, true); err != nil && !errors.Is(err, os.ErrExist) {
				t.Fatal(err)
			}
			made[dir] = true
		}
		data, err := os.ReadFile(filepath.Join(build, f))
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(filepath.Join(build, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := sb.WriteFile(ctx, p, data, fi.Mode().Perm()); err != nil {
			t.Fatalf("copy %s into the sandbox: %v", f, err)
		}
	}
	argv := []string{"prove", fmt.Sprintf("-j%d", jobs), "-r"}
	for _, d := range dirs {
		argv = append(argv, path.Join("tests", d))
	}
	res, err := sb.Run(ctx, airlock.Command{Argv: argv, Dir: dest})
	if err != nil {
		t.Fatalf("prove in the sandbox: %v", err)
	}
	out := string(res.Stdout) + string(res.Stderr)
	r, err := parseProve(out)
	if err != nil {
		t.Fatalf("prove in the sandbox (exit %d, killed by %q): %v\n%s", res.ExitCode, res.KilledBy, err, tail(out, 4000))
	}
	return r, out
}

// levels are the isolation levels the suite runs over, strongest last.
var levels = []airlock.Isolation{airlock.IsolationProcess, airlock.IsolationGVisor, airlock.IsolationVM}

// eachLevel runs f as a subtest for every isolation level that works
// here; a level that does not is skipped with airlock's reason.
func eachLevel(t *testing.T, f func(t *testing.T, lv airlock.Isolation)) {
	t.Helper()
	for _, lv := range levels {
		t.Run(string(lv), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			sb, err := airlock.Create(ctx, airlock.Config{Isolation: lv})
			switch {
			case errors.Is(err, airlock.ErrUnavailable):
				t.Skip(err)
			case err != nil:
				t.Fatalf("create a %s sandbox: %v", lv, err)
			}
			sb.Close()
			f(t, lv)
		})
	}
}

// TestParseProve reads prove's summary as it prints it, wrapped lists
// and broken plans included.
func TestParseProve(t *testing.T) {
	out := `tests/a/00.t .. ok
tests/b/01.t .. Failed 9/40 subtests

Test Summary Report
-------------------
/x/tests/b/01.t (Wstat: 0 Tests: 40 Failed: 9)
  Failed tests:  1-3, 7, 9-10
                12, 30
tests/c/02.t    (Wstat: 256 (exited 1) Tests: 5 Failed: 0)
  Non-zero exit status: 1
  Parse errors: Bad plan.  You planned 10 tests but ran 5.
Files=3, Tests=55,  1 wallclock secs ( 0.01 usr  0.01 sys +  0.10 cusr  0.20 csys =  0.32 CPU)
Result: FAIL
`
	r, err := parseProve(out)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{"b/01.t": {"1", "2", "3", "7", "9", "10", "12", "30"}, "c/02.t": {"exit", "plan"}}
	if r.Files != 3 || r.Tests != 55 || r.Passed || !maps.EqualFunc(r.Failed, want, slices.Equal) {
		t.Errorf("parsed %+v, want 3 files, 55 tests, failures %v", r, want)
	}
	if _, err := parseProve("tests/a/00.t .. ok\n"); err == nil {
		t.Error("output without totals parsed")
	}
}

// TestKnownFailuresFile reads the list the suite is held to: every line
// names a test file and at least one check.
func TestKnownFailuresFile(t *testing.T) {
	known := knownFailures(t)
	if len(known) == 0 {
		t.Fatalf("%s lists nothing", knownFailuresFile)
	}
	for file, checks := range known {
		if !strings.HasSuffix(file, ".t") || len(checks) == 0 {
			t.Errorf("%s: %q: %v", knownFailuresFile, file, checks)
		}
		for _, c := range checks {
			if c == "" || strings.Trim(c, "0123456789") != "" {
				t.Errorf("%s: %s: check %q is not a number", knownFailuresFile, file, c)
			}
		}
	}
}
