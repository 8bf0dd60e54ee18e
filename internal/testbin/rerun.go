package testbin

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// UnprivilegedUser is the user that suites re-run as, to check what
// airlock does for a caller without root: created when missing.
const UnprivilegedUser = "airlock-test"

// Result is the outcome of one top-level test of a re-run.
type Result struct {
	Status   string        // PASS, FAIL or SKIP
	Log      string        // what it printed
	Duration time.Duration // how long it took, as go test said
}

// RerunUnprivileged runs the tests that pattern selects again, as
// UnprivilegedUser, with a clean environment plus env, within timeout:
// see Rerun. It skips t when the caller is not root or setpriv is
// missing.
func RerunUnprivileged(t *testing.T, pattern string, timeout time.Duration, env ...string) map[string]Result {
	t.Helper()
	return Rerun(t, RerunOptions{Unprivileged: true, Pattern: pattern, Timeout: timeout, Env: env})
}

// RerunOptions says how Rerun runs a package's tests again.
type RerunOptions struct {
	// Unprivileged runs them as UnprivilegedUser with a clean
	// environment; otherwise they run as the caller, with its
	// environment.
	Unprivileged bool
	Pattern      string        // -test.run
	Timeout      time.Duration // -test.timeout
	Env          []string      // added to the environment
}

// Rerun builds the test binary of the package in the current directory
// and runs the tests that o.Pattern selects. Each of the child's
// top-level tests becomes a subtest of t with the child's verdict. It
// returns the results by test name.
func Rerun(t *testing.T, o RerunOptions) map[string]Result {
	t.Helper()
	var u *user.User
	if o.Unprivileged {
		if os.Geteuid() != 0 {
			t.Skip("needs root to switch to an unprivileged user")
		}
		var err error
		if u, err = unprivilegedUser(); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.Timeout+2*time.Minute)
	defer cancel()
	dir, err := Dir("airlock-rerun-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := filepath.Join(dir, "airlock.test")
	build := exec.CommandContext(ctx, "go", "test", "-c", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the test binary: %v\n%s", err, out)
	}
	args := []string{bin, "-test.run", o.Pattern, "-test.v", "-test.count=1", "-test.timeout=" + o.Timeout.String()}
	var cmd *exec.Cmd
	if u != nil {
		setpriv, err := exec.LookPath("setpriv")
		if err != nil {
			t.Skip("setpriv is not installed")
		}
		home := u.HomeDir
		if home == "" {
			home = "/home/" + UnprivilegedUser
		}
		pre := []string{"--reuid=" + UnprivilegedUser, "--regid=" + UnprivilegedUser, "--clear-groups", "--inh-caps=-all",
			"env", "-i", "HOME=" + home, "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "TMPDIR=/tmp"}
		cmd = exec.CommandContext(ctx, setpriv, append(append(pre, o.Env...), args...)...)
	} else {
		cmd = exec.CommandContext(ctx, args[0], args[1:]...)
		cmd.Env = append(os.Environ(), o.Env...)
	}
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	runErr := cmd.Run()

	who := "the re-run"
	if u != nil {
		who = "user " + UnprivilegedUser
	}
	results := parseTestOutput(out.String())
	if len(results) == 0 {
		t.Fatalf("%s reported no tests (%v):\n%s", who, runErr, tail(out.String(), 4000))
	}
	failed := false
	for _, name := range slices.Sorted(maps.Keys(results)) {
		r := results[name]
		failed = failed || r.Status == "FAIL"
		t.Run(name, func(t *testing.T) {
			// Seen with -v: where a re-run's time goes.
			t.Logf("took %s in %s", r.Duration.Round(10*time.Millisecond), who)
			switch r.Status {
			case "FAIL":
				t.Errorf("failed in %s:\n%s", who, r.Log)
			case "SKIP":
				t.Skipf("skipped in %s:\n%s", who, r.Log)
			}
		})
	}
	if runErr != nil && !failed {
		t.Errorf("%s failed (%v) without a failing test; the tests that ended, and why it stopped:\n%s\n%s", who, runErr, ended(out.String()), stuck(out.String(), 4000))
	}
	return results
}

// unprivilegedUser looks up UnprivilegedUser, creating it when missing.
func unprivilegedUser() (*user.User, error) {
	if u, err := user.Lookup(UnprivilegedUser); err == nil {
		return u, nil
	}
	if out, err := exec.Command("useradd", "-m", "-s", "/bin/sh", UnprivilegedUser).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("useradd %s: %v\n%s", UnprivilegedUser, err, out)
	}
	return user.Lookup(UnprivilegedUser)
}

var (
	resultLine = regexp.MustCompile(`^--- (PASS|FAIL|SKIP): (\S+) \(([0-9.]+)s\)`)
	headerLine = regexp.MustCompile(`^=== (?:RUN|CONT|NAME|PAUSE)\s+(\S+)`)
)

// parseTestOutput reads `go test -v` output into top-level test results,
// each with the log lines printed while it was the current test.
func parseTestOutput(s string) map[string]Result {
	out := map[string]Result{}
	logs := map[string]*strings.Builder{}
	var cur string
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if m := headerLine.FindStringSubmatch(l); m != nil {
			cur, _, _ = strings.Cut(m[1], "/")
			continue
		}
		if m := resultLine.FindStringSubmatch(l); m != nil {
			cur = m[2]
			secs, _ := strconv.ParseFloat(m[3], 64)
			out[cur] = Result{Status: m[1], Duration: time.Duration(secs * float64(time.Second))}
			continue
		}
		if strings.HasPrefix(l, "    ") && cur != "" {
			if logs[cur] == nil {
				logs[cur] = &strings.Builder{}
			}
			logs[cur].WriteString(l + "\n")
		}
	}
	for name, r := range out {
		if b := logs[name]; b != nil {
			r.Log = b.String()
			out[name] = r
		}
	}
	return out
}

// ended lists the top-level tests of output s that ended, with their
// times, and the header of a timeout's panic (which tests were still
// running, for how long), if any.
func ended(s string) string {
	var b strings.Builder
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		switch {
		case strings.HasPrefix(l, "--- "):
			b.WriteString(l + "\n")
		case strings.HasPrefix(l, "panic: test timed out"):
			for _, h := range lines[i:min(i+20, len(lines))] {
				if strings.HasPrefix(h, "goroutine ") {
					break
				}
				b.WriteString(h + "\n")
			}
		}
	}
	return b.String()
}

// stuck is, when output s ends in a timeout's panic, the goroutines of
// its dump that were in this module's code (where a hang is), up to 48
// KiB; otherwise its last n bytes.
func stuck(s string, n int) string {
	_, dump, ok := strings.Cut(s, "panic: test timed out")
	if !ok {
		return tail(s, n)
	}
	var b strings.Builder
	for g := range strings.SplitSeq(dump, "\n\n") {
		g = strings.TrimSpace(g)
		if !strings.HasPrefix(g, "goroutine ") || !strings.Contains(g, "github.com/airlock-sandbox/airlock") {
			continue
		}
		if b.Len()+len(g) > 48<<10 {
			b.WriteString("(more goroutines left out)\n")
			break
		}
		b.WriteString(g + "\n\n")
	}
	return b.String()
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "...\n" + s[len(s)-n:]
}
