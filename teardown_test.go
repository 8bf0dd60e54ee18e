package airlock_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/cgroup"
)

// runDirEntries lists $AIRLOCK_HOME/run.
func runDirEntries(t *testing.T) []string {
	t.Helper()
	names, err := readDirNames(filepath.Join(homeDir, "run"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	slices.Sort(names)
	return names
}

// mountsUnder returns the mount points of this mount namespace under dir.
func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && (fields[4] == dir || strings.HasPrefix(fields[4], dir+"/")) {
			out = append(out, fields[4])
		}
	}
	return out
}

// v1CgroupDirs lists the sandbox groups under the v1 memory hierarchy.
func v1CgroupDirs() []string {
	names, _ := readDirNames("/sys/fs/cgroup/memory/airlock")
	return names
}

// TestTeardownNoLeftovers is not parallel: it counts processes, mounts
// and groups that any running sandbox would add.
func TestTeardownNoLeftovers(t *testing.T) {
	ctx := testCtx(t, 180*time.Second)
	const cycles = 100
	ids := make([]string, 0, cycles)
	agents := make([]int, 0, cycles)
	for i := range cycles {
		sb, err := airlock.Create(ctx, airlock.Config{Resources: airlock.Resources{MemoryMB: 256}, PidsLimit: 128})
		if err != nil {
			t.Fatalf("cycle %d: create: %v", i, err)
		}
		ids = append(ids, sb.ID())
		agents = append(agents, sb.PID())
		res, err := sb.Run(ctx, airlock.Command{Argv: []string{"true"}})
		if err != nil || res.ExitCode != 0 {
			sb.Close()
			t.Fatalf("cycle %d: true: %v %+v", i, err, res)
		}
		if isRoot() && !cgroup.Exists(sb.ID()) {
			t.Errorf("cycle %d: sandbox %s has no cgroup while it runs", i, sb.ID())
		}
		if err := sb.Close(); err != nil {
			t.Errorf("cycle %d: close: %v", i, err)
		}
	}

	if left := agentProcs(t); len(left) > 0 {
		t.Errorf("agent processes remain: %v", left)
	}
	for _, pid := range agents {
		if alive(pid) {
			t.Errorf("agent pid %d remains", pid)
		}
	}
	for pid, cmd := range hostProcs(t) {
		if ppidOf(pid) == os.Getpid() && strings.Contains(cmd, "airlock-guest") {
			t.Errorf("child process %d %q remains", pid, cmd)
		}
	}
	if m := mountsUnder(t, filepath.Join(homeDir, "run")); len(m) > 0 {
		t.Errorf("mounts remain under %s/run: %v", homeDir, m)
	}
	if e := runDirEntries(t); len(e) > 0 {
		t.Errorf("%s/run is not empty: %v", homeDir, e)
	}
	if isRoot() {
		for _, id := range ids {
			if cgroup.Exists(id) {
				t.Errorf("cgroup of %s remains", id)
			}
		}
		for _, d := range v1CgroupDirs() {
			if slices.Contains(ids, d) {
				t.Errorf("/sys/fs/cgroup/memory/airlock/%s remains", d)
			}
		}
	}
}

// ppidOf returns the parent pid of a host process, or 0.
func ppidOf(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

// TestSupervisorKillKillsSandbox is not parallel: it sweeps cgroups.
func TestSupervisorKillKillsSandbox(t *testing.T) {
	ctx := testCtx(t, 90*time.Second)
	marker := sleepMarker(1000)
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envSupervisorChild+"="+marker)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })

	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "READY ") {
				lines <- sc.Text()
				return
			}
		}
		close(lines)
	}()
	var line string
	select {
	case l, ok := <-lines:
		if !ok {
			t.Fatal("the supervisor exited without creating a sandbox")
		}
		line = l
	case <-time.After(60 * time.Second):
		t.Fatal("the supervisor did not report a sandbox")
	}
	f := strings.Fields(line)
	if len(f) != 3 {
		t.Fatalf("bad report %q", line)
	}
	agent, _ := strconv.Atoi(f[1])
	id := f[2]
	if !alive(agent) {
		t.Fatalf("agent %d is not running", agent)
	}
	if !waitFor(10*time.Second, func() bool { return len(procsWithArg(t, marker)) > 0 }) {
		t.Fatalf("sleep %s is not running", marker)
	}
	if isRoot() && !cgroup.Exists(id) {
		t.Errorf("sandbox %s has no cgroup", id)
	}

	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if !waitFor(10*time.Second, func() bool { return len(procsWithArg(t, marker)) == 0 && !alive(agent) }) {
		t.Fatalf("10 s after the supervisor was killed: agent alive %v, marked processes %v", alive(agent), procsWithArg(t, marker))
	}

	if isRoot() {
		// The supervisor could not remove its cgroups; a sweep must.
		t.Logf("after the supervisor died: cgroup of %s exists: %v", id, cgroup.Exists(id))
		if cgroup.Exists(id) {
			// Killed tasks leave their cgroup asynchronously; until they
			// have, the group is busy and a sweep rightly leaves it.
			var swept []string
			waitFor(10*time.Second, func() bool {
				ids, err := cgroup.Sweep(0)
				if err != nil {
					t.Errorf("cgroup.Sweep: %v", err)
				}
				swept = append(swept, ids...)
				return !cgroup.Exists(id)
			})
			if !slices.Contains(swept, id) {
				t.Errorf("cgroup.Sweep(0) removed %v, not %s", swept, id)
			}
		}
		if cgroup.Exists(id) {
			t.Errorf("the cgroup of %s remains after a sweep", id)
		}
	}
	// Starting another sandbox cleans the dead one's scratch directory.
	sb := newSandbox(t, airlock.Config{})
	mustRun(t, ctx, sb, "true")
	if !waitFor(10*time.Second, func() bool {
		return !slices.ContainsFunc(runDirEntries(t), func(e string) bool { return strings.HasPrefix(e, id) })
	}) {
		t.Errorf("the killed supervisor's files remain in %s/run: %v", homeDir, runDirEntries(t))
	}
}
