package airlock_test

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
)

// newPool makes a pool that is closed when the test ends.
func newPool(t *testing.T, cfg airlock.Config, size int) *airlock.Pool {
	t.Helper()
	p, err := airlock.NewPool(testCtx(t, time.Minute), cfg, size)
	if err != nil {
		t.Fatalf("new pool: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("close pool: %v", err)
		}
	})
	return p
}

// waitReady waits until the pool has n sandboxes ready.
func waitReady(t *testing.T, p *airlock.Pool, n int, d time.Duration) {
	t.Helper()
	if !waitFor(d, func() bool { return p.Stats().Ready >= n }) {
		t.Fatalf("the pool has %+v, want %d ready within %s", p.Stats(), n, d)
	}
}

// strangers lists the processes of ps -e -o pid=,ppid=,comm= output that
// are neither the agent (pid 1), kernel threads (pid 2 and its
// children, in a VM) nor the command that listed them (sh, ps).
func strangers(ps string) []string {
	var out []string
	for l := range strings.Lines(ps) {
		f := strings.Fields(l)
		if len(f) < 3 || f[0] == "1" || f[0] == "2" || f[1] == "2" || f[2] == "sh" || f[2] == "ps" {
			continue
		}
		out = append(out, strings.TrimSpace(l))
	}
	return out
}

// TestPoolHandsOutFreshSandboxes takes 20 sandboxes in a row from a pool
// of 3: each is its own (ids differ), has never been used (the files and
// processes the one before left are not in it), and runs commands.
func TestPoolHandsOutFreshSandboxes(t *testing.T) {
	eachIsolation(t, func(t *testing.T, lv airlock.Isolation) {
		ctx := testCtx(t, 5*time.Minute)
		var mu sync.Mutex
		started := map[string]bool{}
		p := newPool(t, airlock.Config{Isolation: lv, OnEvent: func(e airlock.Event) {
			if e.Type == airlock.EventLifecycle && e.Lifecycle.State == "started" {
				mu.Lock()
				started[e.SandboxID] = true
				mu.Unlock()
			}
		}}, 3)
		seen := map[string]bool{}
		for i := range 20 {
			sb, err := p.Get(ctx)
			if err != nil {
				t.Fatalf("get %d: %v", i, err)
			}
			if seen[sb.ID()] {
				t.Fatalf("get %d: sandbox %s was handed out before", i, sb.ID())
			}
			seen[sb.ID()] = true
			mu.Lock()
			if !started[sb.ID()] {
				t.Errorf("get %d: sandbox %s was handed out without its \"started\" event", i, sb.ID())
			}
			mu.Unlock()
			if got := strangers(mustRun(t, ctx, sb, "ps -e -o pid=,ppid=,comm=")); len(got) > 0 {
				t.Errorf("get %d: sandbox %s runs processes it was not asked to: %q", i, sb.ID(), got)
			}
			out := mustRun(t, ctx, sb, "for f in /tmp/used /workspace/used /used; do test -e $f && echo $f; done; echo fresh")
			if out != "fresh\n" {
				t.Errorf("get %d: sandbox %s was used before: %q", i, sb.ID(), out)
			}
			mustRun(t, ctx, sb, "touch /tmp/used /workspace/used /used && (setsid sleep 300 </dev/null >/dev/null 2>&1 &)")
			if err := sb.Close(); err != nil {
				t.Errorf("close sandbox %d: %v", i, err)
			}
		}
		if s := p.Stats(); s.Started < 20 || s.Failed != 0 || s.Discarded != 0 {
			t.Errorf("stats after 20 gets: %+v, want at least 20 started, none failed or discarded", s)
		}
	})
}

// TestPoolGetIsFast compares, in one run, the median time of a Get from a
// pool with sandboxes ready against the median time of a Create. The
// pool keeps two, as a pool serving a trickle of requests does: the one
// that replaces a sandbox taken starts once that one's first command
// ended (Pool.hold), not while the Get is being timed, which an empty
// pool of one would do at once.
func TestPoolGetIsFast(t *testing.T) {
	eachIsolation(t, func(t *testing.T, lv airlock.Isolation) {
		n := 7
		if lv != airlock.IsolationProcess {
			n = 3
		}
		ctx := testCtx(t, 5*time.Minute)
		cfg := airlock.Config{Isolation: lv}
		p := newPool(t, cfg, 2)
		median := func(d []time.Duration) time.Duration { slices.Sort(d); return d[len(d)/2] }
		var creates, gets []time.Duration
		for i := range n {
			start := time.Now()
			sb, err := airlock.Create(ctx, cfg)
			if err != nil {
				t.Fatalf("create %d: %v", i, err)
			}
			creates = append(creates, time.Since(start))
			sb.Close()

			waitReady(t, p, 2, 2*time.Minute)
			start = time.Now()
			sb, err = airlock.Create(ctx, airlock.Config{Pool: p})
			if err != nil {
				t.Fatalf("create %d from the pool: %v", i, err)
			}
			gets = append(gets, time.Since(start))
			mustRun(t, ctx, sb, "true")
			sb.Close()
		}
		c, g := median(creates), median(gets)
		t.Logf("%s: median create %s, median get from a ready pool %s (%.0fx)", lv, c, g, float64(c)/float64(max(g, 1)))
		if g*5 > c {
			t.Errorf("%s: a get from a ready pool (median %s) is not 5x faster than a create (median %s)", lv, g, c)
		}
	})
}

// TestPoolRefillWaitsForFirstCommand: the start that replaces a sandbox
// handed out waits until that sandbox's first command has ended, or it
// is closed, while another sandbox is ready; with none left ready it
// begins at once.
func TestPoolRefillWaitsForFirstCommand(t *testing.T) {
	ctx := testCtx(t, 3*time.Minute)
	p := newPool(t, airlock.Config{}, 2)
	// No timer ends a hold in this test: only a command or a close.
	airlock.SetPoolRefillHold(p, time.Hour)
	full := func(what string) {
		t.Helper()
		if !waitFor(time.Minute, func() bool { s := p.Stats(); return s.Ready+s.Starting == 2 }) {
			t.Fatalf("%s: the pool has %+v, want 2 ready or starting", what, p.Stats())
		}
	}
	get := func() *airlock.Sandbox {
		t.Helper()
		waitReady(t, p, 2, time.Minute)
		sb, err := p.Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sb.Close() })
		return sb
	}
	held := func(what string) {
		t.Helper()
		// Long enough for a start to have begun, were it not held.
		time.Sleep(300 * time.Millisecond)
		if s := p.Stats(); s.Ready != 1 || s.Starting != 0 {
			t.Fatalf("%s: the pool has %+v, want 1 ready and no start until the command ends", what, s)
		}
	}

	sb := get()
	held("after a get")
	mustRun(t, ctx, sb, "true")
	full("after the first command")

	sb = get()
	held("after a get")
	sb.Close()
	full("after the sandbox handed out closed")

	get()
	held("after a get")
	// The last ready one: its replacement, and the held one's, begin
	// now.
	last, err := p.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer last.Close()
	full("after the last ready sandbox was taken")
}

// TestPoolClose closes the sandboxes waiting in a pool (their processes
// are gone), and a Get after Close fails with ErrClosed.
func TestPoolClose(t *testing.T) {
	eachIsolation(t, func(t *testing.T, lv airlock.Isolation) {
		p, err := airlock.NewPool(testCtx(t, time.Minute), airlock.Config{Isolation: lv}, 2)
		if err != nil {
			t.Fatal(err)
		}
		waitReady(t, p, 2, 2*time.Minute)
		taken, err := p.Get(testCtx(t, time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		defer taken.Close()
		var pids []int
		for _, sb := range airlock.PoolReady(p) {
			pids = append(pids, sb.PID())
		}
		if len(pids) == 0 {
			t.Fatal("no sandbox waits in the pool")
		}
		if err := p.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		for _, pid := range pids {
			if alive(pid) {
				t.Errorf("pid %d of a waiting sandbox is alive after the pool closed", pid)
			}
		}
		if _, err := p.Get(testCtx(t, time.Minute)); !errors.Is(err, airlock.ErrClosed) {
			t.Errorf("get after close: %v, want ErrClosed", err)
		}
		if _, err := airlock.Create(testCtx(t, time.Minute), airlock.Config{Pool: p}); !errors.Is(err, airlock.ErrClosed) {
			t.Errorf("create from a closed pool: %v, want ErrClosed", err)
		}
		if err := p.Close(); err != nil {
			t.Errorf("second close: %v", err)
		}
		// What was handed out is its owner's, and keeps running.
		mustRun(t, testCtx(t, time.Minute), taken, "true")
	})
}

// TestPoolDiscardsKilled kills a sandbox while it waits in the pool: it
// is never handed out, and another takes its place.
func TestPoolDiscardsKilled(t *testing.T) {
	eachIsolation(t, func(t *testing.T, lv airlock.Isolation) {
		ctx := testCtx(t, 5*time.Minute)
		p := newPool(t, airlock.Config{Isolation: lv}, 2)
		waitReady(t, p, 2, 2*time.Minute)
		victim := airlock.PoolReady(p)[0]
		if err := syscall.Kill(victim.PID(), syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if !waitFor(time.Minute, func() bool { return p.Stats().Discarded == 1 }) {
			t.Fatalf("the killed sandbox was not discarded: %+v", p.Stats())
		}
		for i := range 3 {
			sb, err := p.Get(ctx)
			if err != nil {
				t.Fatalf("get %d: %v", i, err)
			}
			if sb.ID() == victim.ID() {
				t.Fatalf("get %d handed out the killed sandbox %s", i, sb.ID())
			}
			mustRun(t, ctx, sb, "true")
			sb.Close()
		}
	})
}

// TestPoolKilledRaceNeverHandedOut kills a waiting sandbox and takes one
// at once, before the pool can have seen the death: what Get hands out
// still works.
func TestPoolKilledRaceNeverHandedOut(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	p := newPool(t, airlock.Config{}, 1)
	for i := range 5 {
		waitReady(t, p, 1, time.Minute)
		victim := airlock.PoolReady(p)[0]
		if err := syscall.Kill(victim.PID(), syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		// Dead, but not yet reaped nor read as the end of its channel
		// by the supervisor's goroutines, or only just.
		if !waitFor(10*time.Second, func() bool { return !alive(victim.PID()) }) {
			t.Fatalf("sandbox %s: its agent outlived SIGKILL for 10 s", victim.ID())
		}
		sb, err := p.Get(ctx)
		if err != nil {
			t.Fatalf("get %d: %v", i, err)
		}
		if sb.ID() == victim.ID() {
			t.Fatalf("get %d handed out the killed sandbox %s", i, sb.ID())
		}
		mustRun(t, ctx, sb, "true")
		sb.Close()
	}
}

// TestPoolLifetimeFromHandOut: a pooled sandbox's lifetime counts from
// when it is handed out, not from when the pool started it.
func TestPoolLifetimeFromHandOut(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	p := newPool(t, airlock.Config{Resources: airlock.Resources{TimeoutSeconds: 1}}, 1)
	waitReady(t, p, 1, time.Minute)
	time.Sleep(1500 * time.Millisecond)
	taken := time.Now()
	sb, err := p.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	// Usable when handed out, unless a loaded machine took longer than
	// the lifetime to get the command there.
	if _, err := sb.Exec(ctx, "true"); err != nil && time.Since(taken) < time.Second {
		t.Fatalf("a command %s after the hand-out: %v", time.Since(taken), err)
	}
	select {
	case <-sb.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the sandbox outlived its 1 s lifetime")
	}
	if err := sb.Err(); err == nil || !strings.Contains(err.Error(), "lifetime") {
		t.Errorf("stop cause: %v, want its lifetime", err)
	}
}

// TestPoolStartFailures: a pool whose starts fail backs off instead of
// spinning, and Get returns the start's error.
func TestPoolStartFailures(t *testing.T) {
	p := newPool(t, airlock.Config{RootFS: "/nonexistent/rootfs"}, 3)
	_, err := p.Get(testCtx(t, time.Minute))
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/rootfs") {
		t.Fatalf("get from a pool whose starts fail: %v, want the start's error", err)
	}
	time.Sleep(time.Second)
	// 100 ms, 200, 400, 800 ms between tries: a handful in a second.
	if s := p.Stats(); s.Failed > 8 || s.Failed < 2 || s.Ready != 0 {
		t.Errorf("after a second of failing starts: %+v, want a few failures, backed off", s)
	}
}

// TestPoolConfig refuses what a pool cannot be.
func TestPoolConfig(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	for _, tc := range []struct {
		cfg  airlock.Config
		size int
	}{
		{airlock.Config{}, 0},
		{airlock.Config{}, airlock.MaxPoolSize + 1},
		{airlock.Config{Isolation: "bogus"}, 1},
	} {
		if p, err := airlock.NewPool(ctx, tc.cfg, tc.size); err == nil {
			p.Close()
			t.Errorf("NewPool(%+v, %d) succeeded", tc.cfg.Isolation, tc.size)
		}
	}
	p := newPool(t, airlock.Config{}, 1)
	if _, err := airlock.CreateWithID(ctx, "mine", airlock.Config{Pool: p}); err == nil {
		t.Error("CreateWithID with a pool succeeded")
	}
	if _, err := airlock.NewPool(ctx, airlock.Config{Pool: p}, 1); err == nil {
		t.Error("a pool of a pool was made")
	}
}
