package airlock_test

import (
	"bufio"
	"bytes"
	"context"
	"maps"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

const unprivUser = "airlock-test"

// unprivTests selects the tests the unprivileged run repeats: all of them
// but this one.
const unprivTests = "^Test(Isolation|Exec|Files|Limits|Teardown|Supervisor|RootFS)"

// TestUnprivilegedSuite runs this package's tests again as an unprivileged
// user, where cgroups are unavailable and every limit that needs them must
// be reported in Notes instead. Each of the child's tests is reported as a
// subtest here.
func TestUnprivilegedSuite(t *testing.T) {
	if os.Getenv(envUnprivChild) != "" {
		t.Skip("already the unprivileged run")
	}
	if !isRoot() {
		t.Skip("needs root to switch to an unprivileged user")
	}
	t.Parallel()
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("setpriv is not installed")
	}
	u, err := user.Lookup(unprivUser)
	if err != nil {
		if out, err := exec.Command("useradd", "-m", "-s", "/bin/sh", unprivUser).CombinedOutput(); err != nil {
			t.Fatalf("useradd %s: %v\n%s", unprivUser, err, out)
		}
		if u, err = user.Lookup(unprivUser); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	dir, err := os.MkdirTemp("", "airlock-unpriv-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "airlock.test")
	build := exec.CommandContext(ctx, "go", "test", "-c", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the test binary: %v\n%s", err, out)
	}
	// The agent built by TestMain sits in a world-readable directory.
	if fi, err := os.Stat(agentPath); err != nil || fi.Mode().Perm()&0o005 != 0o005 {
		t.Fatalf("agent %s is not executable by others: %v", agentPath, err)
	}

	home := u.HomeDir
	if home == "" {
		home = "/home/" + unprivUser
	}
	cmd := exec.CommandContext(ctx, setpriv, "--reuid="+unprivUser, "--regid="+unprivUser, "--clear-groups", "--inh-caps=-all",
		"env", "-i",
		"HOME="+home,
		"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
		"TMPDIR=/tmp",
		envUnprivChild+"=1",
		"AIRLOCK_AGENT="+agentPath,
		bin, "-test.run", unprivTests, "-test.v", "-test.count=1", "-test.timeout=4m")
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	runErr := cmd.Run()

	results := parseTestOutput(out.String())
	if len(results) == 0 {
		t.Fatalf("the unprivileged run reported no tests (%v):\n%s", runErr, tail(out.String(), 4000))
	}
	for _, name := range slices.Sorted(maps.Keys(results)) {
		r := results[name]
		t.Run(name, func(t *testing.T) {
			switch r.status {
			case "FAIL":
				t.Errorf("failed as user %s:\n%s", unprivUser, r.log)
			case "SKIP":
				t.Skipf("skipped as user %s:\n%s", unprivUser, r.log)
			}
		})
	}
	if runErr != nil && !slicesContainsStatus(results, "FAIL") {
		t.Errorf("the unprivileged run failed (%v) without a failing test:\n%s", runErr, tail(out.String(), 4000))
	}
	// It really ran unprivileged and degraded explicitly.
	for _, name := range []string{"TestLimitsMemoryOOM", "TestLimitsForkBomb", "TestIsolationCapabilities", "TestExecTTY", "TestFilesRoundTrip"} {
		if _, ok := results[name]; !ok {
			t.Errorf("the unprivileged run did not run %s", name)
		}
	}
	if r := results["TestLimitsMemoryOOM"]; r.status != "SKIP" {
		t.Errorf("TestLimitsMemoryOOM as %s: %s, want SKIP (memory limit not enforced, and Notes says so)", unprivUser, r.status)
	}
}

type testResult struct {
	status string
	log    string
}

var (
	resultLine = regexp.MustCompile(`^--- (PASS|FAIL|SKIP): (\S+) \(`)
	headerLine = regexp.MustCompile(`^=== (?:RUN|CONT|NAME|PAUSE)\s+(\S+)`)
)

// parseTestOutput reads `go test -v` output into top-level test results,
// each with the log lines printed while it was the current test.
func parseTestOutput(s string) map[string]testResult {
	out := map[string]testResult{}
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
			out[cur] = testResult{status: m[1]}
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
			r.log = b.String()
			out[name] = r
		}
	}
	return out
}

func slicesContainsStatus(m map[string]testResult, status string) bool {
	for _, r := range m {
		if r.status == status {
			return true
		}
	}
	return false
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "...\n" + s[len(s)-n:]
}
