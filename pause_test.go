package airlock_test

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
)

// A paused sandbox's processes use no CPU and its agent takes no new
// request, until it is resumed: then the same processes go on. A paused
// sandbox closes as any other.
func TestPauseResume(t *testing.T) {
	eachIsolation(t, func(t *testing.T, lv airlock.Isolation) {
		ctx := testCtx(t, 2*time.Minute)
		var (
			mu     sync.Mutex
			states []string
		)
		sb := newSandbox(t, airlock.Config{Isolation: lv, OnEvent: func(e airlock.Event) {
			if e.Lifecycle != nil {
				mu.Lock()
				states = append(states, e.Lifecycle.State)
				mu.Unlock()
			}
		}})
		if _, err := sb.Start(ctx, airlock.Command{Shell: "echo $$ > /tmp/loop; while :; do :; done", DiscardOutput: true}); err != nil {
			t.Fatal(err)
		}
		mustRun(t, ctx, sb, "while [ ! -s /tmp/loop ]; do sleep 0.01; done")
		// The CPU time of the sandbox's host processes (agent, runsc's
		// Sentry, or QEMU) over 700 ms.
		busy := func() time.Duration {
			start := hostCPU(sb.PID())
			time.Sleep(700 * time.Millisecond)
			return hostCPU(sb.PID()) - start
		}

		if err := sb.Pause(ctx); err != nil {
			t.Fatalf("Pause: %v", err)
		}
		if !sb.Paused() {
			t.Error("Paused() is false after Pause")
		}
		paused := busy()
		for what, err := range map[string]error{
			"Exec":     func() error { _, err := sb.Exec(ctx, "true"); return err }(),
			"ReadFile": func() error { _, err := sb.ReadFile(ctx, "/tmp/loop"); return err }(),
			"Pause":    sb.Pause(ctx),
		} {
			if !errors.Is(err, airlock.ErrPaused) {
				t.Errorf("%s of a paused sandbox: %v, want ErrPaused", what, err)
			}
		}
		if _, err := sb.Usage(); err != nil && lv == airlock.IsolationProcess {
			t.Errorf("Usage of a paused sandbox: %v", err)
		}

		if err := sb.Resume(ctx); err != nil {
			t.Fatalf("Resume: %v", err)
		}
		running := busy()
		t.Logf("CPU time over 700 ms: %v paused, %v running", paused, running)
		if paused*5 > running {
			t.Errorf("CPU time of the sandbox over 700 ms: %v paused, %v running; want paused under a fifth", paused, running)
		}
		if out := mustRun(t, ctx, sb, `kill -0 "$(cat /tmp/loop)" && echo the loop goes on`); out != "the loop goes on\n" {
			t.Errorf("after Resume: %q", out)
		}
		if err := sb.Resume(ctx); !errors.Is(err, airlock.ErrNotPaused) {
			t.Errorf("Resume of a running sandbox: %v, want ErrNotPaused", err)
		}

		// Closed while paused: promptly, and leaving nothing.
		if err := sb.Pause(ctx); err != nil {
			t.Fatalf("second Pause: %v", err)
		}
		pid := sb.PID()
		closed := make(chan error, 1)
		go func() { closed <- sb.Close() }()
		select {
		case err := <-closed:
			if err != nil {
				t.Errorf("Close of a paused sandbox: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("Close of a paused sandbox hangs")
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			if st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); !strings.Contains(string(st), ") Z ") {
				t.Errorf("process %d of the sandbox is left after Close", pid)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if want := []string{"paused", "resumed", "paused"}; !slices.Equal(slices.DeleteFunc(slices.Clone(states), func(s string) bool { return s != "paused" && s != "resumed" }), want) {
			t.Errorf("lifecycle events %v, want %v among them", states, want)
		}
	})
}

// hostCPU is the CPU time that pid and every process under it have used,
// as the host counts it.
func hostCPU(pid int) time.Duration {
	var ticks int64
	for _, p := range descendants(pid) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		// utime and stime are fields 14 and 15 of stat, 12 and 13 after
		// the state.
		var u, st int64
		fmt.Sscan(f[11], &u)
		fmt.Sscan(f[12], &st)
		ticks += u + st
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}
