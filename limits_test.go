package airlock_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
)

// userProcs lists the sandbox's user processes other than PID 1 and the
// probe itself, as "pid stat args" lines.
func userProcs(t *testing.T, ctx context.Context, sb *airlock.Sandbox) []string {
	t.Helper()
	res, err := sb.Run(ctx, airlock.Command{Argv: []string{"ps", "-eo", "pid=,stat=,args="}})
	if err != nil {
		t.Fatalf("ps: %v", err)
	}
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(string(res.Stdout)), "\n") {
		f := strings.Fields(l)
		if len(f) < 3 || f[0] == "1" || f[2] == "ps" {
			continue
		}
		out = append(out, l)
	}
	return out
}

// requireNoUserProcs fails unless the sandbox runs no user processes,
// allowing the kernel a short moment to finish kills already sent.
func requireNoUserProcs(t *testing.T, ctx context.Context, sb *airlock.Sandbox) {
	t.Helper()
	if len(userProcs(t, ctx, sb)) == 0 {
		return
	}
	if !waitFor(3*time.Second, func() bool { return len(userProcs(t, ctx, sb)) == 0 }) {
		t.Errorf("processes remain in the sandbox:\n%s", strings.Join(userProcs(t, ctx, sb), "\n"))
	}
}

// TestSpawnerThreadsBeforeReady: the spawner's threads count against the
// pids limit, and the Go runtime dies when it cannot make one, so a command
// that fills the limit at once must never find the spawner short of a
// thread. The spawner makes every thread it needs before the sandbox is
// ready: a burst of concurrent commands that fork, exit and leave orphans
// behind leaves its thread count as it was.
func TestSpawnerThreadsBeforeReady(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 90*time.Second)
	sb := newSandbox(t, airlock.Config{})
	threads := func() int {
		n, err := strconv.Atoi(strings.TrimSpace(mustRun(t, ctx, sb, "ls /proc/1/task | wc -l")))
		if err != nil {
			t.Fatalf("count the spawner's threads: %v", err)
		}
		return n
	}
	before := threads()
	for round := range 3 {
		errs := make(chan error, 40)
		for range cap(errs) {
			go func() {
				_, err := sb.Exec(ctx, "seq 1 2000; sleep 0.05 & sleep 0.02 & true")
				errs <- err
			}()
		}
		for range cap(errs) {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
	time.Sleep(200 * time.Millisecond) // the orphans exit and are reaped
	if after := threads(); after > before {
		t.Errorf("the spawner had %d threads when ready and %d after a burst of commands: it made threads after set-up, which a full pids limit would refuse", before, after)
	}
}

func TestLimitsForkBomb(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 90*time.Second)
	sb := newSandbox(t, airlock.Config{PidsLimit: 64})
	if !isRoot() {
		if !notesMention(sb.Notes(), "RLIMIT_NPROC") {
			t.Fatalf("unprivileged: Notes() = %q, want the RLIMIT_NPROC fallback for the pids limit", sb.Notes())
		}
	} else {
		requireEnforced(t, sb)
	}
	hostBefore := len(hostProcs(t))

	// The command outlives the bomb's first generations, so that its
	// timeout kills the whole bomb: a bomb whose command exits by itself
	// leaves background processes, which airlock keeps (they may be a
	// command's daemons), and at the pids limit such a bomb can sustain
	// itself. The command's shell forks once, before the bomb exists,
	// and then execs: a shell whose own fork fails at the limit exits
	// (dash: "Cannot fork", status 2) before its timeout.
	res, err := sb.Run(ctx, airlock.Command{Shell: "f(){ f|f & }; f & exec sleep 60", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("fork bomb: %v", err)
	}
	t.Logf("fork bomb: exit %d killed_by %q limits_hit %q", res.ExitCode, res.KilledBy, res.LimitsHit)
	if res.KilledBy != "timeout" {
		t.Errorf("KilledBy = %q, want timeout", res.KilledBy)
	}
	if isRoot() && !slices.Contains(res.LimitsHit, "pids") {
		t.Errorf("LimitsHit = %q, want pids", res.LimitsHit)
	}

	// The sandbox still answers once the bomb is gone, and on time.
	deadline := time.Now().Add(30 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		ectx, cancel := context.WithTimeout(ctx, 10*time.Second)
		r, err := sb.Exec(ectx, "echo ok")
		cancel()
		if err == nil && string(r.Stdout) == "ok\n" {
			last = nil
			break
		}
		last = fmt.Errorf("echo ok: %v %+v", err, r)
		time.Sleep(200 * time.Millisecond)
	}
	if last != nil {
		t.Fatalf("the sandbox does not answer after a fork bomb: %v (processes: %d)", last, len(procsInSandbox(sb.PID())))
	}
	// The host is fine.
	if err := exec1("true"); err != nil {
		t.Errorf("the host cannot start a process: %v", err)
	}
	if after := len(hostProcs(t)); after > hostBefore+100 {
		t.Errorf("host process count grew from %d to %d", hostBefore, after)
	}

	// The bomb is gone: the sandbox comes back to just its spawner.
	if !waitFor(30*time.Second, func() bool { return len(procsInSandbox(sb.PID())) <= 2 }) {
		t.Fatalf("30 s after the fork bomb's command ended, %d processes still run in the sandbox", len(procsInSandbox(sb.PID())))
	}

	// The limit itself: of 200 sleeps at most the limit run at once.
	marker := sleepMarker(100)
	var out syncBuffer
	p, err := sb.Start(ctx, airlock.Command{
		Argv: []string{"python3", "-c", fmt.Sprintf(`import subprocess
ps = []
for i in range(200):
    try:
        ps.append(subprocess.Popen(["sleep", "%s"]))
    except OSError:
        pass
print("spawned", len(ps), flush=True)
for p in ps:
    p.wait()`, marker)},
		Stdout: &out,
		Stderr: io.Discard,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !waitFor(30*time.Second, func() bool { return strings.Contains(out.String(), "spawned") }) {
		t.Fatalf("the loop starting 200 sleeps did not finish")
	}
	n := len(procsWithArg(t, marker))
	t.Logf("%d of 200 sleeps run under a pids limit of 64 (%d processes in the sandbox); python3 says %q", n, len(procsInSandbox(sb.PID())), out.String())
	if n == 0 || n > 64 {
		t.Errorf("%d sleeps run at once under a pids limit of 64", n)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	waitProcess(t, p, 30*time.Second)
}

// procsInSandbox returns the host pids of the descendants of the agent
// with host pid agent.
func procsInSandbox(agent int) []int {
	children := map[int][]int{}
	for pid, ppid := range hostPPIDs() {
		children[ppid] = append(children[ppid], pid)
	}
	var out []int
	queue := []int{agent}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

func TestLimitsMemoryOOM(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 90*time.Second)
	sb := newSandbox(t, airlock.Config{Resources: airlock.Resources{MemoryMB: 64}})
	if !requireEnforced(t, sb) {
		t.Skip("unprivileged: the memory limit is not enforced (and Notes says so)")
	}
	res, err := sb.Run(ctx, airlock.Command{Argv: []string{"python3", "-c", "b = b'x' * (300 << 20); print(len(b))"}, Timeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if res.KilledBy != airlock.KilledByOOM {
		t.Errorf("killed_by = %q (exit %d signal %d), want oom; stderr %q", res.KilledBy, res.ExitCode, res.Signal, res.Stderr)
	}
	if strings.Contains(string(res.Stdout), "314572800") {
		t.Error("python allocated 300 MB under a 64 MB limit")
	}
	// The next command is fine and not reported as OOM-killed.
	r := run(t, ctx, sb, "echo ok")
	if string(r.Stdout) != "ok\n" || r.KilledBy != "" {
		t.Errorf("after the OOM kill: %+v", r)
	}
	// A normal exit of a command that fits is not OOM.
	r, err = sb.Run(ctx, airlock.Command{Argv: []string{"python3", "-c", "b = b'x' * (16 << 20); print(len(b))"}})
	if err != nil || r.ExitCode != 0 || r.KilledBy != "" {
		t.Errorf("16 MB under a 64 MB limit: %v %+v %s", err, r, r.Stderr)
	}
}

func TestLimitsBusyLoopTimeout(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	sb := newSandbox(t, airlock.Config{})
	res, err := sb.Run(ctx, airlock.Command{Shell: "while true; do :; done", Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if res.KilledBy != airlock.KilledByTimeout {
		t.Errorf("killed_by = %q, want timeout", res.KilledBy)
	}
	if res.CPUTime <= 0 {
		t.Errorf("CPUTime = %v for a busy loop", res.CPUTime)
	}
	requireNoUserProcs(t, ctx, sb)
}

// sampleRSS samples the test process's VmRSS every 100ms until stop is
// closed and returns the largest value seen.
func sampleRSS(t *testing.T, stop <-chan struct{}) <-chan int64 {
	out := make(chan int64, 1)
	go func() {
		peak := int64(0)
		for {
			if v := vmRSSNoFail(); v > peak {
				peak = v
			}
			select {
			case <-stop:
				out <- peak
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return out
}

// rssBound scales an RSS growth bound for the race detector, whose shadow
// memory grows with the heap; even scaled it stays well under the 1 GiB
// that a test prints.
func rssBound(b int64) int64 {
	if raceEnabled {
		return 4 * b
	}
	return b
}

// TestLimitsHugeOutputStreamed is not parallel: it measures this
// process's memory.
func TestLimitsHugeOutputStreamed(t *testing.T) {
	ctx := testCtx(t, 180*time.Second)
	sb := newSandbox(t, airlock.Config{})
	mustRun(t, ctx, sb, "true") // warm up
	before := vmRSS(t)
	stop := make(chan struct{})
	peakc := sampleRSS(t, stop)
	var n countWriter
	res, err := sb.Run(ctx, airlock.Command{Shell: "head -c 1G /dev/zero", Stdout: &n, Stderr: io.Discard})
	close(stop)
	peak := <-peakc
	after := vmRSS(t)
	if err != nil {
		t.Fatal(err)
	}
	if n.n != 1<<30 || res.ExitCode != 0 {
		t.Errorf("streamed %d bytes, exit %d; want 1 GiB, 0", n.n, res.ExitCode)
	}
	t.Logf("VmRSS before %d MiB, peak %d MiB, after %d MiB", before>>20, peak>>20, after>>20)
	if growth, bound := max(peak, after)-before, rssBound(64<<20); growth > bound {
		t.Errorf("host RSS grew by %d MiB while streaming 1 GiB, want < %d MiB", growth>>20, bound>>20)
	}
}

// TestLimitsHugeOutputBuffered is not parallel: it measures this
// process's memory.
func TestLimitsHugeOutputBuffered(t *testing.T) {
	ctx := testCtx(t, 180*time.Second)
	sb := newSandbox(t, airlock.Config{})
	mustRun(t, ctx, sb, "true")
	before := vmRSS(t)
	stop := make(chan struct{})
	peakc := sampleRSS(t, stop)
	res, err := sb.Run(ctx, airlock.Command{Shell: "head -c 1G /dev/zero; echo done >&2"})
	close(stop)
	peak := <-peakc
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Stdout) != airlock.DefaultMaxOutputBytes || !res.StdoutTruncated {
		t.Errorf("len(Stdout) = %d truncated %v, want %d true", len(res.Stdout), res.StdoutTruncated, airlock.DefaultMaxOutputBytes)
	}
	if string(res.Stderr) != "done\n" || res.ExitCode != 0 {
		t.Errorf("the command did not run to completion: exit %d stderr %q", res.ExitCode, res.Stderr)
	}
	t.Logf("VmRSS before %d MiB, peak %d MiB", before>>20, peak>>20)
	// The 16 MiB buffer, the garbage of its growth by doubling, and
	// little else; far from the 1 GiB that was printed.
	if growth, bound := peak-before, rssBound(128<<20); growth > bound {
		t.Errorf("host RSS grew by %d MiB buffering 16 MiB of 1 GiB, want < %d MiB", growth>>20, bound>>20)
	}
}

func TestLimitsFileSize(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	sb := newSandbox(t, airlock.Config{MaxFileSizeMB: 1})
	res := run(t, ctx, sb, "head -c 5M /dev/zero > /tmp/f")
	if res.ExitCode == 0 {
		t.Error("writing 5 MiB under a 1 MiB file size limit succeeded")
	}
	size := strings.TrimSpace(mustRun(t, ctx, sb, "stat -c %s /tmp/f"))
	if n, err := strconv.ParseInt(size, 10, 64); err != nil || n > 1<<20 {
		t.Errorf("/tmp/f is %s bytes, want <= 1 MiB", size)
	}
	// Files under the limit are fine.
	mustRun(t, ctx, sb, "head -c 512K /dev/zero > /tmp/small && test $(stat -c %s /tmp/small) -eq 524288")
	if out := mustRun(t, ctx, sb, "ulimit -f"); strings.TrimSpace(out) != "2048" {
		t.Errorf("ulimit -f = %q, want 2048 (1 MiB in 512-byte blocks)", out)
	}
}

func TestLimitsDisk(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	sb := newSandbox(t, airlock.Config{DiskMB: 16})
	out := mustFail(t, ctx, sb, "head -c 64M /dev/zero > /tmp/big")
	if !strings.Contains(out, "No space left on device") {
		t.Errorf("writing 64 MB to a 16 MB disk: %q, want ENOSPC", out)
	}
	size := strings.TrimSpace(mustRun(t, ctx, sb, "stat -c %s /tmp/big"))
	if n, _ := strconv.ParseInt(size, 10, 64); n > 16<<20 {
		t.Errorf("/tmp/big is %s bytes on a 16 MiB disk", size)
	}
	// The limit covers the whole writable tree.
	mustRun(t, ctx, sb, "rm /tmp/big")
	mustRun(t, ctx, sb, "head -c 12M /dev/zero > /workspace/a")
	mustFail(t, ctx, sb, "head -c 12M /dev/zero > /var/tmp/b")
	// Freeing space makes it usable again.
	mustRun(t, ctx, sb, "rm -f /workspace/a /var/tmp/b; head -c 8M /dev/zero > /tmp/ok")
}

func TestLimitsNofile(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	sb := newSandbox(t, airlock.Config{NofileLimit: 32})
	if out := mustRun(t, ctx, sb, "ulimit -n"); strings.TrimSpace(out) != "32" {
		t.Errorf("ulimit -n = %q, want 32", out)
	}
	out := mustRun(t, ctx, sb, `python3 -c '
import errno
fs = []
try:
    for i in range(100): fs.append(open("/dev/null"))
    print("opened", len(fs))
except OSError as e:
    print("failed", e.errno == errno.EMFILE, len(fs))'`)
	if !strings.HasPrefix(out, "failed True") {
		t.Errorf("opening 100 files under a limit of 32: %q", out)
	}
	// The hard limit cannot be raised.
	mustFail(t, ctx, sb, "ulimit -n 64")
	def := newSandbox(t, airlock.Config{})
	if out := mustRun(t, ctx, def, "ulimit -n"); strings.TrimSpace(out) != strconv.Itoa(airlock.DefaultNofileLimit) {
		t.Errorf("default ulimit -n = %q, want %d", out, airlock.DefaultNofileLimit)
	}
}

func TestLimitsAgentServesUnderExhaustion(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 120*time.Second)
	sb := newSandbox(t, airlock.Config{Resources: airlock.Resources{MemoryMB: 64, CPUs: 1}})
	enforced := requireEnforced(t, sb)
	memHog := "while :; do python3 -c \"b = b'x' * (200 << 20)\" 2>/dev/null; done"
	cpuHog := "for i in 1 2 3 4; do (while :; do :; done) & done; wait"
	var hogs []*airlock.Process
	for _, h := range []string{memHog, cpuHog} {
		p, err := sb.Start(ctx, airlock.Command{Shell: h, Stdout: io.Discard, Stderr: io.Discard, Timeout: 60 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		hogs = append(hogs, p)
	}
	// Let the hogs get going: wait until the busy loops run.
	if !waitFor(20*time.Second, func() bool { return len(procsInSandbox(sb.PID())) >= 7 }) {
		t.Logf("only %d processes in the sandbox", len(procsInSandbox(sb.PID())))
	}
	for i := range 5 {
		ectx, cancel := context.WithTimeout(ctx, 20*time.Second)
		res, err := sb.Exec(ectx, "echo alive")
		cancel()
		if err != nil || string(res.Stdout) != "alive\n" {
			t.Fatalf("probe %d while hogs run: %v %+v", i, err, res)
		}
		// File operations are served by the agent alone.
		fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		_, err = sb.Stat(fctx, "/workspace")
		cancel()
		if err != nil {
			t.Fatalf("Stat while hogs run: %v", err)
		}
	}
	for _, p := range hogs {
		select {
		case <-p.Done():
			r, _ := p.Wait()
			t.Errorf("a hog ended early: %+v", r)
		default:
		}
		_ = p.Kill()
	}
	if enforced {
		// The memory hog was OOM-killed over and over, not the agent.
		select {
		case <-sb.Done():
			t.Fatalf("the sandbox stopped: %v", sb.Err())
		default:
		}
	}
	for _, p := range hogs {
		if _, err := waitProcess(t, p, 30*time.Second); err != nil {
			t.Logf("hog: %v", err)
		}
	}
	requireNoUserProcs(t, ctx, sb)
}

func TestLimitsLifetime(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	created := time.Now()
	sb := newSandbox(t, airlock.Config{Resources: airlock.Resources{TimeoutSeconds: 2}})
	agent := sb.PID()
	// A command that runs across the end of the lifetime, unless a
	// loaded machine took longer than the lifetime to start it.
	p, err := sb.Start(ctx, airlock.Command{Argv: []string{"sleep", "100"}})
	if err != nil {
		if time.Since(created) < 2*time.Second {
			t.Fatalf("start a command %s after the create: %v", time.Since(created), err)
		}
		t.Logf("the command came %s after the create, past the lifetime: %v", time.Since(created), err)
	}
	select {
	case <-sb.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the sandbox outlived its 2 s lifetime by far")
	}
	if p != nil {
		select {
		case <-p.Done():
		case <-time.After(20 * time.Second):
			t.Fatal("a command outlived its sandbox's lifetime")
		}
	}
	_, err = sb.Exec(ctx, "echo hi")
	if err == nil || !strings.Contains(err.Error(), "lifetime") {
		t.Errorf("Exec after the lifetime: %v, want an error mentioning the lifetime", err)
	}
	if !errors.Is(err, airlock.ErrClosed) {
		t.Errorf("Exec after the lifetime: %v, want errors.Is ErrClosed", err)
	}
	if e := sb.Err(); e == nil || !strings.Contains(e.Error(), "lifetime") {
		t.Errorf("Err() = %v, want the lifetime", e)
	}
	if !waitFor(10*time.Second, func() bool { return !alive(agent) }) {
		t.Errorf("agent pid %d still runs after the lifetime ended", agent)
	}
}

// hostPPIDs maps every host pid to its parent pid.
func hostPPIDs() map[int]int {
	out := map[int]int{}
	ents, _ := readDirNames("/proc")
	for _, name := range ents {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		b, err := readFileString(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		i := strings.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(b[i+1:])
		if len(f) < 2 || f[0] == "Z" {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		out[pid] = ppid
	}
	return out
}
