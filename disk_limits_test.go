package airlock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
)

// A disk larger than half the memory limit is a file under the state
// directory as root, and refused with the reason and the fix otherwise;
// either way a full disk is ENOSPC for the writer, not an OOM kill.
func TestLimitsDiskLargerThanMemory(t *testing.T) {
	t.Parallel()
	cfg := airlock.Config{Resources: airlock.Resources{MemoryMB: 64}, DiskMB: 256}
	if !isRoot() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		sb, err := airlock.Create(ctx, cfg)
		if err == nil {
			sb.Close()
			t.Fatal("an unprivileged sandbox got a 256 MiB disk with 64 MiB of memory; want a refusal")
		}
		for _, want := range []string{"does not fit in memory", "ENOSPC", "--disk 32m", "--memory 512m", "root"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the refusal %q does not say %q", err, want)
			}
		}
		// What fits is a tmpfs, and is made.
		cfg.DiskMB = 32
		sb = newSandbox(t, cfg)
		if fs := mustRun(t, testCtx(t, time.Minute), sb, "stat -f -c %T /"); strings.TrimSpace(fs) != "tmpfs" {
			t.Errorf("a disk of half the memory is %q, want tmpfs", fs)
		}
		return
	}
	ctx := testCtx(t, 2*time.Minute)
	sb := newSandbox(t, cfg)
	requireEnforced(t, sb)
	if fs := mustRun(t, ctx, sb, "stat -f -c %T /"); strings.TrimSpace(fs) == "tmpfs" {
		t.Errorf("a disk of four times the memory is a tmpfs")
	}
	res := run(t, ctx, sb, "dd if=/dev/zero of=/workspace/fill bs=1M; echo status $?")
	if res.KilledBy != "" || len(res.LimitsHit) != 0 || !strings.Contains(string(res.Stderr), "No space left on device") || !strings.Contains(string(res.Stdout), "status 1") {
		t.Errorf("filling the disk: exit %d, killed_by %q, limits_hit %q, stdout %q, stderr %q; want dd to fail with ENOSPC", res.ExitCode, res.KilledBy, res.LimitsHit, res.Stdout, res.Stderr)
	}
	if out := mustRun(t, ctx, sb, "rm /workspace/fill && echo ok"); out != "ok\n" {
		t.Errorf("after the disk was full: %q", out)
	}
}
