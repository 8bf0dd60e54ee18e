package redteam_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
)

// pidsStartDeadline bounds each start below: far longer than a start
// takes, so that reaching it means the start hung.
const pidsStartDeadline = 3 * time.Minute

// TestPidsLimitSmall starts sandboxes with the smallest pids limits: each
// either starts and runs commands, or is refused with an error that names
// the smallest limit that works, and never waits for its deadline (a
// small limit used to hang the start for ever, in the agent's wait for a
// spawner that could not make its threads).
func TestPidsLimitSmall(t *testing.T) {
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		min := strconv.Itoa(airlock.MinPidsLimit)
		for n := int64(1); n < airlock.MinPidsLimit; n++ {
			ctx, cancel := context.WithTimeout(context.Background(), pidsStartDeadline)
			sb, err := airlock.Create(ctx, airlock.Config{Isolation: lv, PidsLimit: n})
			switch {
			case ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded):
				t.Errorf("pids limit %d: the start hung until its deadline: %v", n, err)
			case err != nil:
				if !strings.Contains(err.Error(), "at least "+min) {
					t.Errorf("pids limit %d: %v, want the error to name the smallest limit, %s", n, err, min)
				}
			default:
				if out := ok(t, sb, "echo ok | cat"); out != "ok\n" {
					t.Errorf("pids limit %d: echo ok printed %q", n, out)
				}
				sb.Close()
			}
			cancel()
		}

		// The CLI says the same, and exits as airlock does when it fails.
		for _, n := range []string{"1", "5", strconv.Itoa(airlock.MinPidsLimit - 1)} {
			ctx, cancel := context.WithTimeout(context.Background(), pidsStartDeadline)
			out, err := exec.CommandContext(ctx, bins.cli, "run", "--isolation", string(lv), "--pids-limit", n, "--", "true").CombinedOutput()
			var ee *exec.ExitError
			if ctx.Err() != nil || !errors.As(err, &ee) || ee.ExitCode() != 125 || !strings.Contains(string(out), "at least "+min) {
				t.Errorf("airlock run --pids-limit %s: %v (deadline: %v), output %q; want exit 125 naming the smallest limit, %s", n, err, ctx.Err(), out, min)
			}
			cancel()
		}
	})
}

// TestPidsLimitMinimum starts sandboxes at the smallest pids limit, again
// and again: every one starts, and runs what a command needs (a
// pipeline, python with a thread, commands at once).
func TestPidsLimitMinimum(t *testing.T) {
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		for i := range 5 {
			ctx, cancel := context.WithTimeout(context.Background(), pidsStartDeadline)
			sb, err := airlock.Create(ctx, airlock.Config{Isolation: lv, PidsLimit: airlock.MinPidsLimit})
			cancel()
			if err != nil {
				t.Fatalf("start %d with pids limit %d: %v", i, airlock.MinPidsLimit, err)
			}
			if out := ok(t, sb, "echo ok | cat | tr a-z A-Z"); out != "OK\n" {
				t.Errorf("pipeline printed %q", out)
			}
			if out := py(t, sb, "import threading; t = threading.Thread(target=print, args=('thread',)); t.start(); t.join()"); out != "thread\n" {
				t.Errorf("python's thread printed %q", out)
			}
			var wg sync.WaitGroup
			for j := range 3 {
				wg.Go(func() {
					if out := ok(t, sb, fmt.Sprintf("echo %d", j)); out != fmt.Sprintf("%d\n", j) {
						t.Errorf("command %d printed %q", j, out)
					}
				})
			}
			wg.Wait()
			sb.Close()
		}
	})
}
