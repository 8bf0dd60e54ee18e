package airlock_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/boundary/process"
	"github.com/airlock-sandbox/airlock/internal/testbin"
)

// Environment switches of the test binary.
const (
	// envUnprivChild marks a run of this binary, as an unprivileged user,
	// started by TestUnprivilegedSuite. It reuses the parent's agent.
	envUnprivChild = "AIRLOCK_UNPRIV_CHILD"
	// envSupervisorChild turns this binary into a sandbox supervisor for
	// TestSupervisorKillKillsSandbox; its value is the argv marker.
	envSupervisorChild = "AIRLOCK_TEST_SUPERVISOR_MARKER"
)

var (
	// agentPath is the airlock-guest binary every sandbox in this test
	// binary runs.
	agentPath string
	// homeDir is $AIRLOCK_HOME for this test binary.
	homeDir string
)

func TestMain(m *testing.M) {
	if marker := os.Getenv(envSupervisorChild); marker != "" {
		os.Exit(supervisorChild(marker))
	}
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	var cleanup []func()
	defer func() {
		for i := len(cleanup) - 1; i >= 0; i-- {
			cleanup[i]()
		}
	}()
	if p := os.Getenv("AIRLOCK_AGENT"); os.Getenv(envUnprivChild) != "" && p != "" {
		// The parent built the agent and left it where we can run it.
		agentPath = p
	} else {
		dir, err := testbin.Dir("airlock-test-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "TestMain:", err)
			return 2
		}
		cleanup = append(cleanup, func() { os.RemoveAll(dir) })
		bins, err := testbin.Build(dir, "airlock-guest")
		if err != nil {
			fmt.Fprintln(os.Stderr, "TestMain:", err)
			return 2
		}
		agentPath = bins[0]
		os.Setenv("AIRLOCK_AGENT", agentPath)
	}
	home, err := testbin.Dir("airlock-test-home-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "TestMain:", err)
		return 2
	}
	cleanup = append(cleanup, func() { os.RemoveAll(home) })
	homeDir = home
	os.Setenv("AIRLOCK_HOME", home)
	return m.Run()
}

// isRoot reports whether the tests run with root privileges (and so with
// cgroups).
func isRoot() bool { return os.Geteuid() == 0 }

// testCtx returns a context that ends at the test's deadline, at most d
// from now, so that no test can hang.
func testCtx(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// newSandbox creates a sandbox that is closed when the test ends.
func newSandbox(t *testing.T, cfg airlock.Config) *airlock.Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb, err := airlock.Create(ctx, cfg)
	if err != nil {
		t.Fatalf("create sandbox: %v", err)
	}
	t.Cleanup(func() {
		if err := sb.Close(); err != nil {
			t.Errorf("close sandbox %s: %v", sb.ID(), err)
		}
	})
	return sb
}

// run runs a shell command line and fails the test if it cannot be run
// at all. The result may have any exit code.
func run(t *testing.T, ctx context.Context, sb *airlock.Sandbox, command string) *airlock.ExecResult {
	t.Helper()
	res, err := sb.Exec(ctx, command)
	if err != nil {
		t.Fatalf("exec %q: %v", command, err)
	}
	return res
}

// mustRun runs a shell command line and fails the test unless it exits 0.
// It returns stdout.
func mustRun(t *testing.T, ctx context.Context, sb *airlock.Sandbox, command string) string {
	t.Helper()
	res := run(t, ctx, sb, command)
	if res.ExitCode != 0 {
		t.Fatalf("exec %q: exit %d (killed by %q)\nstdout: %s\nstderr: %s", command, res.ExitCode, res.KilledBy, res.Stdout, res.Stderr)
	}
	return string(res.Stdout)
}

// mustFail runs a shell command line that must exit non-zero and returns
// its combined output.
func mustFail(t *testing.T, ctx context.Context, sb *airlock.Sandbox, command string) string {
	t.Helper()
	res := run(t, ctx, sb, command)
	if res.ExitCode == 0 {
		t.Fatalf("exec %q succeeded, want failure\nstdout: %s\nstderr: %s", command, res.Stdout, res.Stderr)
	}
	return string(res.Stdout) + string(res.Stderr)
}

// notesMention reports whether some note contains every one of words
// (case-insensitive).
func notesMention(notes []string, words ...string) bool {
	for _, n := range notes {
		l := strings.ToLower(n)
		all := true
		for _, w := range words {
			if !strings.Contains(l, strings.ToLower(w)) {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}

// requireEnforced checks the explicit contract about cgroup limits: as
// root they are enforced and Notes is empty; otherwise Notes must say that
// they are not enforced. It returns whether enforcement can be asserted.
func requireEnforced(t *testing.T, sb *airlock.Sandbox) bool {
	t.Helper()
	notes := sb.Notes()
	if isRoot() {
		if len(notes) != 0 {
			t.Fatalf("as root every limit should hold, but Notes() = %q", notes)
		}
		return true
	}
	if !notesMention(notes, "not enforced") {
		t.Fatalf("unprivileged: Notes() = %q, want a note that cgroup limits are not enforced", notes)
	}
	return false
}

// hostProcs lists the host's processes as pid -> NUL-separated cmdline.
func hostProcs(t *testing.T) map[int]string {
	t.Helper()
	out, err := testbin.HostProcs()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// procsWithArg returns the host pids whose command line contains s.
func procsWithArg(t *testing.T, s string) []int {
	t.Helper()
	var pids []int
	for pid, cmd := range hostProcs(t) {
		if strings.Contains(cmd, s) && pid != os.Getpid() {
			if state(pid) == "Z" {
				continue
			}
			pids = append(pids, pid)
		}
	}
	return pids
}

// state returns the one-letter state of a host process, or "" if gone.
func state(pid int) string { return testbin.ProcState(pid) }

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool { return testbin.Alive(pid) }

// agentProcs returns the live host processes of this user running this
// test binary's agent executable (the agents and their spawners).
func agentProcs(t *testing.T) []int {
	t.Helper()
	var want syscall.Stat_t
	if err := syscall.Stat(agentPath, &want); err != nil {
		t.Fatal(err)
	}
	var pids []int
	for pid, cmd := range hostProcs(t) {
		if !strings.Contains(cmd, "airlock-guest") || !alive(pid) {
			continue
		}
		var owner syscall.Stat_t
		if err := syscall.Stat(fmt.Sprintf("/proc/%d", pid), &owner); err != nil || !ownedByUs(owner.Uid) {
			// Gone, or another user's (a concurrent run of this suite).
			continue
		}
		var st syscall.Stat_t
		if err := syscall.Stat(fmt.Sprintf("/proc/%d/exe", pid), &st); err != nil {
			// Not ours to inspect (another user's process) or gone.
			continue
		}
		if st.Dev == want.Dev && st.Ino == want.Ino {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitFor polls cond until it holds or d passes.
func waitFor(d time.Duration, cond func() bool) bool { return testbin.WaitFor(d, cond) }

// vmRSS returns the test process's resident set size in bytes.
func vmRSS(t *testing.T) int64 {
	t.Helper()
	v := vmRSSNoFail()
	if v <= 0 {
		t.Fatal("cannot read VmRSS from /proc/self/status")
	}
	return v
}

// vmRSSNoFail is vmRSS for goroutines: it returns 0 on failure.
func vmRSSNoFail() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

// exec1 runs a host command and returns its error.
func exec1(name string, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return exec.CommandContext(ctx, name, args...).Run()
}

func readDirNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}

func readFileString(p string) (string, error) {
	b, err := os.ReadFile(p)
	return string(b), err
}

// supervisorChild is the body of the re-executed test binary for
// TestSupervisorKillKillsSandbox: it creates a sandbox, starts a marked
// sleep in it, reports the agent's pid and blocks until killed.
func supervisorChild(marker string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := airlock.Create(ctx, airlock.Config{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "create:", err)
		return 1
	}
	p, err := sb.Start(ctx, airlock.Command{Argv: []string{"sleep", "1000", marker}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start:", err)
		return 1
	}
	_ = p
	fmt.Printf("READY %d %s\n", sb.PID(), sb.ID())
	<-ctx.Done()
	return 0
}

// Unused helpers keep the imports in one place for all test files.
var (
	_ = bytes.Contains
	_ = errors.Is
	_ = runtime.GOOS
)

// ownedByUs reports whether a process owned by host uid u belongs to this
// test run: our own uid, or (as root) the unprivileged uids that root
// inside sandboxes maps to.
func ownedByUs(u uint32) bool {
	if u == uint32(os.Geteuid()) {
		return true
	}
	return os.Geteuid() == 0 && u >= process.SandboxUIDBase && u < process.SandboxUIDBase+process.SandboxUIDRange
}

// sleepMarker returns a unique argument for sleep(1) (a fractional number
// of seconds), so that one process can be told apart from every other by
// its command line.
func sleepMarker(secs int) string {
	var n [6]byte
	_, _ = rand.Read(n[:])
	v := uint64(0)
	for _, b := range n {
		v = v<<8 | uint64(b)
	}
	return fmt.Sprintf("%d.%015d", secs, v%1e15)
}
