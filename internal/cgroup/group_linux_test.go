//go:build linux

package cgroup

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/cgroups/v3"
)

// These tests work on the real cgroup filesystem and need root.

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create cgroups")
	}
}

// newTestGroup creates a group with a unique id that is deleted when the
// test ends, and checks that nothing is left behind.
func newTestGroup(t *testing.T, l Limits) *Group {
	t.Helper()
	requireRoot(t)
	name := regexp.MustCompile(`[^a-zA-Z0-9]`).ReplaceAllString(t.Name(), "")
	id := fmt.Sprintf("test-%.30s-%08x", name, rand.Uint32())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	g, err := New(ctx, id, l)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := g.Delete(); err != nil {
			t.Errorf("Delete: %v", err)
		}
		if Exists(id) {
			t.Errorf("groups of %s left behind", id)
		}
	})
	return g
}

// ctrlFile returns the path of a controller file of the user group (user
// true) or of the group holding the agent.
func ctrlFile(t *testing.T, g *Group, controller, file string, user bool) string {
	t.Helper()
	switch b := g.impl.(type) {
	case *v2Group:
		if user {
			return filepath.Join(b.dir, "user", file)
		}
		return filepath.Join(b.dir, file)
	case *v1Group:
		for _, m := range b.mounts {
			if m.controller == controller {
				if user {
					return filepath.Join(m.dir, b.rel, "user", file)
				}
				return filepath.Join(m.dir, b.rel, file)
			}
		}
	}
	t.Fatalf("no %s hierarchy in use", controller)
	return ""
}

func readTrim(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// userShell starts sh running script inside g's user group. The shell joins
// by writing "0" to the files of UserProcsFiles, closes them, prints
// "joined" and runs script. It returns once the shell has joined; the shell
// is killed when the test ends.
func userShell(t *testing.T, g *Group, script string) (*exec.Cmd, *bufio.Reader) {
	t.Helper()
	files, err := g.UserProcsFiles()
	if err != nil {
		t.Fatalf("UserProcsFiles: %v", err)
	}
	var join, closeFDs []string
	for i := range files {
		join = append(join, fmt.Sprintf("echo 0 >&%d", 3+i))
		closeFDs = append(closeFDs, fmt.Sprintf("%d>&-", 3+i))
	}
	full := strings.Join(join, " && ") + " || exit 97\nexec " + strings.Join(closeFDs, " ") + "\necho joined\n" + script
	cmd := exec.Command("sh", "-c", full)
	cmd.ExtraFiles = files
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	err = cmd.Start()
	for _, f := range files {
		f.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	out := bufio.NewReader(stdout)
	if line, err := out.ReadString('\n'); line != "joined\n" {
		t.Fatalf("shell did not join the user group: %q, %v", line, err)
	}
	return cmd, out
}

// startAgent starts a sleeping process and adds it to g as the agent.
func startAgent(t *testing.T, g *Group) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	if err := g.AddAgent(cmd.Process.Pid); err != nil {
		t.Fatalf("AddAgent: %v", err)
	}
	return cmd
}

// assertCgroup checks through /proc/<pid>/cgroup that pid is in the group
// named by suffix ("/airlock/<id>" or "/airlock/<id>/user") in every
// hierarchy airlock limits.
func assertCgroup(t *testing.T, g *Group, pid int, suffix string) {
	t.Helper()
	v1, unified, err := cgroups.ParseCgroupFileUnified(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	if g.Version() == V2 {
		if !strings.HasSuffix(unified, suffix) {
			t.Errorf("pid %d is in %q, want ...%s", pid, unified, suffix)
		}
		return
	}
	for _, c := range append(slices.Clone(needed), "cpuacct") {
		if got := v1[c]; !strings.HasSuffix(got, suffix) {
			t.Errorf("pid %d is in %s:%q, want ...%s", pid, c, got, suffix)
		}
	}
}

func waitCtx(t *testing.T, cmd *exec.Cmd, d time.Duration) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatalf("%v did not exit within %v", cmd.Args, d)
		return nil
	}
}

func TestDetectRoot(t *testing.T) {
	requireRoot(t)
	info := Detect()
	t.Logf("%+v", info)
	if !info.Writable || info.Reason != "" {
		t.Fatalf("Detect() = %+v, want writable without a reason", info)
	}
	if !slices.Equal(withoutFreezer(info.Controllers), needed) {
		t.Errorf("controllers = %v, want %v", info.Controllers, needed)
	}
	if _, err := os.Stat("/sys/fs/cgroup/freezer/cgroup.procs"); (err == nil || info.Version == V2) != slices.Contains(info.Controllers, "freezer") {
		t.Errorf("controllers = %v, with the freezer hierarchy mounted: %v", info.Controllers, err == nil)
	}
	// On a hybrid machine whose v2 hierarchy has no controllers (like the
	// one this was written on), v1 must be chosen.
	if b, err := os.ReadFile("/sys/fs/cgroup/unified/cgroup.controllers"); err == nil && !strings.Contains(string(b), "memory") {
		if info.Version != V1 || !strings.Contains(info.Base, "/sys/fs/cgroup/memory") {
			t.Errorf("Detect() = %+v, want V1 with base /sys/fs/cgroup/memory", info)
		}
	}
}

func TestNewRejectsBadInput(t *testing.T) {
	ctx := context.Background()
	if _, err := New(ctx, "../etc", Limits{}); !errors.Is(err, ErrInvalidID) {
		t.Errorf("New(../etc) = %v, want ErrInvalidID", err)
	}
	if _, err := New(ctx, "ok", Limits{Pids: -1}); err == nil {
		t.Error("New with negative pids limit succeeded")
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := New(cancelled, "ok", Limits{}); !errors.Is(err, context.Canceled) {
		t.Errorf("New with cancelled context = %v, want context.Canceled", err)
	}
}

func TestNewAppliesLimitsToUserGroupOnly(t *testing.T) {
	const mem = 64 << 20
	g := newTestGroup(t, Limits{MemoryBytes: mem, Pids: 32, CPUs: 0.5})

	if _, err := New(context.Background(), g.ID(), Limits{}); !errors.Is(err, fs.ErrExist) {
		t.Errorf("second New(%s) = %v, want fs.ErrExist", g.ID(), err)
	}

	type want struct{ controller, file, user, agent string }
	var wants []want
	if g.Version() == V2 {
		wants = []want{
			{"memory", "memory.max", strconv.Itoa(mem), "max"},
			{"pids", "pids.max", "32", "max"},
			{"cpu", "cpu.max", "50000 100000", "max 100000"},
		}
		if swap := ctrlFile(t, g, "memory", "memory.swap.max", true); exists(swap) {
			wants = append(wants, want{"memory", "memory.swap.max", "0", "max"})
		}
	} else {
		unlimited := readTrim(t, filepath.Join(g.impl.(*v1Group).mounts[0].dir, "memory.limit_in_bytes"))
		wants = []want{
			{"memory", "memory.limit_in_bytes", strconv.Itoa(mem), unlimited},
			{"pids", "pids.max", "32", "max"},
			{"cpu", "cpu.cfs_quota_us", "50000", "-1"},
			{"cpu", "cpu.cfs_period_us", "100000", "100000"},
		}
		if exists(ctrlFile(t, g, "memory", "memory.memsw.limit_in_bytes", true)) {
			wants = append(wants, want{"memory", "memory.memsw.limit_in_bytes", strconv.Itoa(mem), unlimited})
		}
	}
	for _, w := range wants {
		if got := readTrim(t, ctrlFile(t, g, w.controller, w.file, true)); got != w.user {
			t.Errorf("user %s = %q, want %q", w.file, got, w.user)
		}
		if got := readTrim(t, ctrlFile(t, g, w.controller, w.file, false)); got != w.agent {
			t.Errorf("parent %s = %q, want %q (unlimited)", w.file, got, w.agent)
		}
	}
}

func TestProcessesJoinTheirGroups(t *testing.T) {
	g := newTestGroup(t, Limits{Pids: 16})
	user, _ := userShell(t, g, "exec sleep 30")
	agent := startAgent(t, g)

	prefix := "/" + airlockDir + "/" + g.ID()
	assertCgroup(t, g, user.Process.Pid, prefix+"/user")
	agentGroup := prefix
	if g.Version() == V2 {
		agentGroup += "/agent"
	}
	assertCgroup(t, g, agent.Process.Pid, agentGroup)

	s, err := g.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if s.PidsCurrent != 1 {
		t.Errorf("PidsCurrent = %d, want 1 (only the user shell)", s.PidsCurrent)
	}
	if n, err := g.PidsCurrent(); err != nil || n != 1 {
		t.Errorf("PidsCurrent() = %d, %v; want 1 (only the user shell)", n, err)
	}
}

func TestPidsLimitContainsForkBomb(t *testing.T) {
	const limit = 16
	g := newTestGroup(t, Limits{Pids: limit})
	stderr, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	stderr.Close()
	// Fork far more sleepers than allowed; dash gives up at the first
	// failed fork ("Cannot fork") and exits 2.
	cmd, _ := userShell(t, g, `exec 2>`+stderr.Name()+`
i=0; while [ $i -lt 200 ]; do sleep 30 >/dev/null & i=$((i+1)); done; echo all forked`)
	err = waitCtx(t, cmd, 10*time.Second)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Errorf("fork bomb shell exited with %v, want exit status 2 after a failed fork", err)
	}
	if msg, _ := os.ReadFile(stderr.Name()); !strings.Contains(string(msg), "fork") {
		t.Errorf("shell stderr %q does not report a failed fork", msg)
	}
	cur, err := strconv.Atoi(readTrim(t, ctrlFile(t, g, "pids", "pids.current", true)))
	if err != nil {
		t.Fatal(err)
	}
	if cur > limit || cur < limit-2 {
		t.Errorf("pids.current = %d, want close to the limit %d", cur, limit)
	}
	if ev := readTrim(t, ctrlFile(t, g, "pids", "pids.events", true)); ev == "max 0" {
		t.Errorf("pids.events = %q, want failed forks counted", ev)
	}

	if err := g.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	_, users := g.impl.dirs()
	for _, d := range users {
		if pids, err := procsUnder(d); err != nil || len(pids) > 0 {
			t.Errorf("%s still holds %v (%v)", d, pids, err)
		}
	}
}

func TestMemoryLimitOOMKills(t *testing.T) {
	const limit = 50 << 20
	g := newTestGroup(t, Limits{MemoryBytes: limit})
	before, err := g.Stats()
	if err != nil {
		t.Fatal(err)
	}
	// tail keeps a whole line in memory; /dev/zero has no newlines.
	cmd, out := userShell(t, g, `head -c 300M /dev/zero | tail; echo "tail=$?"`)
	// Read to EOF before Wait, which closes the pipe.
	read := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(out)
		read <- b
	}()
	var rest []byte
	select {
	case rest = <-read:
	case <-time.After(30 * time.Second):
		t.Fatal("shell did not finish within 30s")
	}
	if err := waitCtx(t, cmd, 5*time.Second); err != nil {
		t.Fatalf("shell: %v", err)
	}
	if got := strings.TrimSpace(string(rest)); got != "tail=137" {
		t.Errorf("tail ended with %q, want tail=137 (SIGKILL)", got)
	}
	after, err := g.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stats before %+v, after %+v", before, after)
	if after.OOMKills < before.OOMKills+1 {
		t.Errorf("OOMKills went from %d to %d, want an increase", before.OOMKills, after.OOMKills)
	}
	if g.Version() == V1 || after.MemoryPeakBytes != 0 { // v2 before 5.19 has no memory.peak
		if after.MemoryPeakBytes < limit/2 || after.MemoryPeakBytes > limit {
			t.Errorf("MemoryPeakBytes = %d, want near the limit %d", after.MemoryPeakBytes, limit)
		}
	}
}

func TestKillAndDelete(t *testing.T) {
	g := newTestGroup(t, Limits{Pids: 32, CPUs: 1})
	agent := startAgent(t, g)
	user, _ := userShell(t, g, "sleep 30 & sleep 30 & while :; do :; done")

	if err := g.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	agentDirs, userDirs := g.impl.dirs()
	for _, d := range append(agentDirs, userDirs...) {
		if pids, err := procsUnder(d); err != nil || len(pids) > 0 {
			t.Errorf("after Kill %s holds %v (%v)", d, pids, err)
		}
	}
	for _, cmd := range []*exec.Cmd{agent, user} {
		err := waitCtx(t, cmd, 5*time.Second)
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("%v ended with %v, want SIGKILL", cmd.Args[0], err)
		}
	}
	s, err := g.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if s.CPUUsageNanos == 0 {
		t.Error("CPUUsageNanos = 0 after a busy loop ran in the group")
	}

	if err := g.Delete(); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	for _, d := range append(agentDirs, userDirs...) {
		if exists(d) {
			t.Errorf("%s still exists after Delete", d)
		}
	}
	if Exists(g.ID()) {
		t.Error("Exists is true after Delete")
	}
	if err := g.Delete(); err != nil {
		t.Errorf("second Delete: %v", err)
	}
	if _, err := g.Stats(); err == nil {
		t.Error("Stats of a deleted group succeeded")
	}
}

func TestSweep(t *testing.T) {
	stale := newTestGroup(t, Limits{})
	busy := newTestGroup(t, Limits{})
	fresh := newTestGroup(t, Limits{})
	userShell(t, busy, "exec sleep 30")

	// Pretend the first two were created long ago.
	old := time.Now().Add(-2 * time.Hour)
	for _, g := range []*Group{stale, busy} {
		_, users := g.impl.dirs()
		for _, d := range users {
			if err := os.Chtimes(filepath.Dir(d), old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	removed, err := Sweep(time.Hour)
	if err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	if !slices.Contains(removed, stale.ID()) || Exists(stale.ID()) {
		t.Errorf("Sweep removed %v; stale empty group %s should be gone (exists: %v)", removed, stale.ID(), Exists(stale.ID()))
	}
	for _, g := range []*Group{busy, fresh} {
		if slices.Contains(removed, g.ID()) || !Exists(g.ID()) {
			t.Errorf("Sweep removed %s, which is populated or recent", g.ID())
		}
	}
}

func TestReclaim(t *testing.T) {
	g := newTestGroup(t, Limits{Pids: 32})
	agent := startAgent(t, g)
	user, _ := userShell(t, g, "sleep 30 & exec sleep 30")

	// The group is brand new and populated: Sweep leaves it, Reclaim does not.
	if err := Reclaim(g.ID()); err != nil {
		t.Fatalf("Reclaim: %v", err)
	}
	for _, cmd := range []*exec.Cmd{agent, user} {
		err := waitCtx(t, cmd, 5*time.Second)
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("%v ended with %v, want SIGKILL", cmd.Args[0], err)
		}
	}
	if Exists(g.ID()) {
		t.Error("groups still exist after Reclaim")
	}
	if err := Reclaim(g.ID()); err != nil {
		t.Errorf("Reclaim of a group that is gone: %v", err)
	}
	if err := Reclaim("../etc"); err == nil {
		t.Error("Reclaim accepted an invalid id")
	}
}

// Freeze stops the user's busy loop and the agent where they are: the
// group's CPU time stands still while frozen and goes on after Thaw. A
// frozen group is killed and deleted as any other.
func TestFreezeThawAndKillFrozen(t *testing.T) {
	g := newTestGroup(t, Limits{Pids: 32})
	agent := startAgent(t, g)
	user, out := userShell(t, g, "while :; do :; done & echo looping; wait")
	if line, err := out.ReadString('\n'); line != "looping\n" {
		t.Fatalf("the loop did not start: %q %v", line, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cpu := func() uint64 {
		s, err := g.Stats()
		if err != nil {
			t.Fatal(err)
		}
		return s.CPUUsageNanos
	}
	if err := g.Freeze(ctx); errors.Is(err, errors.ErrUnsupported) {
		t.Skip(err)
	} else if err != nil {
		t.Fatalf("Freeze: %v", err)
	}
	for _, pid := range []int{agent.Process.Pid, user.Process.Pid} {
		if st := procState(t, pid); st != "S" && st != "D" && st != "T" {
			t.Errorf("pid %d is %q while frozen, want sleeping", pid, st)
		}
	}
	before := cpu()
	time.Sleep(500 * time.Millisecond)
	frozen := cpu() - before
	if err := g.Thaw(); err != nil {
		t.Fatalf("Thaw: %v", err)
	}
	before = cpu()
	time.Sleep(500 * time.Millisecond)
	running := cpu() - before
	if frozen*10 > running {
		t.Errorf("CPU time in 500 ms: %v frozen, %v running; want frozen under a tenth", time.Duration(frozen), time.Duration(running))
	}
	// Frozen again, then killed: nothing is left, at once.
	if err := g.Freeze(ctx); err != nil {
		t.Fatalf("second Freeze: %v", err)
	}
	if err := g.Kill(); err != nil {
		t.Fatalf("Kill of a frozen group: %v", err)
	}
	for _, cmd := range []*exec.Cmd{agent, user} {
		if err := waitCtx(t, cmd, 5*time.Second); err == nil {
			t.Errorf("%v survived the kill of its frozen group", cmd.Args[0])
		}
	}
}

// procState is the state letter of pid in /proc/<pid>/stat.
func procState(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])[0]
}
