package airlock_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/image/store"
	"github.com/airlock-sandbox/airlock/internal/vmkernel"
	"github.com/airlock-sandbox/airlock/vfs"
)

// vmOnly skips unless the vm level works here.
func vmOnly(t *testing.T) {
	t.Helper()
	sb, err := airlock.Create(testCtx(t, time.Minute), airlock.Config{Isolation: airlock.IsolationVM})
	if errors.Is(err, airlock.ErrUnavailable) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatalf("create a vm sandbox: %v", err)
	}
	sb.Close()
}

// TestVMOwnKernel: the code of a vm sandbox runs on a kernel of its own,
// not the host's, and sees the guest's devices only.
func TestVMOwnKernel(t *testing.T) {
	vmOnly(t)
	ctx := testCtx(t, 2*time.Minute)
	sb := newSandbox(t, airlock.Config{Isolation: airlock.IsolationVM})
	var host unix.Utsname
	if err := unix.Uname(&host); err != nil {
		t.Fatal(err)
	}
	hostRelease := unix.ByteSliceToString(host.Release[:])
	got := strings.TrimSpace(mustRun(t, ctx, sb, "uname -r"))
	if got == "" || got == hostRelease {
		t.Errorf("uname -r inside is %q, the host's is %q: want a kernel of its own", got, hostRelease)
	}
	if v := mustRun(t, ctx, sb, "cat /proc/version"); !strings.Contains(v, got) {
		t.Errorf("/proc/version %q does not name the guest's release %q", v, got)
	}
}

// TestVMLimits: the memory limit holds inside the VM and its breach is
// reported as an OOM kill; the pids limit holds; stats reads the guest's
// counters.
func TestVMLimits(t *testing.T) {
	vmOnly(t)
	ctx := testCtx(t, 3*time.Minute)
	sb := newSandbox(t, airlock.Config{Isolation: airlock.IsolationVM, Resources: airlock.Resources{MemoryMB: 96}, PidsLimit: 64})
	res, err := sb.Run(ctx, airlock.Command{Argv: []string{"python3", "-c", "x = bytearray(200 << 20); print(len(x))"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.KilledBy != airlock.KilledByOOM || !slices.Contains(res.LimitsHit, "memory") {
		t.Errorf("a command over the memory limit: exit %d, killed by %q, limits hit %v; want an OOM kill", res.ExitCode, res.KilledBy, res.LimitsHit)
	}
	var u airlock.Usage
	res = run(t, ctx, sb, "for i in $(seq 200); do sleep 5 & done 2>/dev/null; wait")
	if !slices.Contains(res.LimitsHit, "pids") {
		t.Errorf("200 processes under a pids limit of 64: limits hit %v, want pids", res.LimitsHit)
	}
	u, err = sb.Usage()
	if err != nil {
		t.Fatalf("usage of a vm sandbox: %v", err)
	}
	if u.OOMKills == 0 || u.PidsLimitHits == 0 || u.MemoryBytes == 0 || u.CPUNanos == 0 {
		t.Errorf("usage %+v: want the OOM kill, the refused forks, memory and CPU counted", u)
	}
}

// TestVMDirectMounts: host directories reach the VM, served by the host,
// read-only or writable, and a read-only one refuses writes.
func TestVMDirectMounts(t *testing.T) {
	vmOnly(t)
	ctx := testCtx(t, 2*time.Minute)
	ro, rw := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(ro, "in.txt"), []byte("from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A hook that refuses everything, and file events: neither applies
	// to a direct mount, at any level.
	var mu sync.Mutex
	var events []string
	refuse := func(ctx context.Context, p string, flags int) error { return unix.EACCES }
	sb := newSandbox(t, airlock.Config{Isolation: airlock.IsolationVM, VFS: airlock.VFSConfig{
		DirectMounts: map[string]airlock.DirectMount{
			"/data": {HostPath: ro, Readonly: true},
			"/out":  {HostPath: rw},
		},
		Hooks: vfs.Hooks{BeforeOpen: refuse},
	}, OnEvent: func(e airlock.Event) {
		if e.File != nil {
			mu.Lock()
			events = append(events, e.File.Op+" "+e.File.Path)
			mu.Unlock()
		}
	}})
	if got := mustRun(t, ctx, sb, "cat /data/in.txt"); got != "from the host\n" {
		t.Errorf("read-only mount reads %q", got)
	}
	if res := run(t, ctx, sb, "echo x > /data/new"); res.ExitCode == 0 {
		t.Error("a write to a read-only direct mount succeeded")
	}
	mustRun(t, ctx, sb, "echo result > /out/r.txt")
	if b, err := os.ReadFile(filepath.Join(rw, "r.txt")); err != nil || string(b) != "result\n" {
		t.Errorf("the writable mount's file on the host: %q, %v", b, err)
	}
	mu.Lock()
	if len(events) > 0 {
		t.Errorf("file events from direct mounts: %v", events)
	}
	mu.Unlock()
	// Served by the host, they leave QEMU in its jail.
	for _, n := range sb.Notes() {
		if strings.Contains(n, "QEMU keeps") {
			t.Errorf("note %q: a direct mount took QEMU out of its jail", n)
		}
	}
}

// TestVMTwoAtOnce: two VMs run side by side, each with its own kernel
// and files.
func TestVMTwoAtOnce(t *testing.T) {
	vmOnly(t)
	ctx := testCtx(t, 2*time.Minute)
	var sbs [2]*airlock.Sandbox
	var wg sync.WaitGroup
	for i := range sbs {
		wg.Go(func() { sbs[i] = newSandbox(t, airlock.Config{Isolation: airlock.IsolationVM}) })
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	mustRun(t, ctx, sbs[0], "echo one > /tmp/mine")
	if res := run(t, ctx, sbs[1], "cat /tmp/mine"); res.ExitCode == 0 {
		t.Errorf("the second VM reads the first one's file: %q", res.Stdout)
	}
	if sbs[0].PID() == sbs[1].PID() {
		t.Error("two VMs share one QEMU")
	}
}

// lockedBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestVMRestore: a VM whose root is an image is restored from a
// snapshot saved once, instead of booting, and each restore is a
// sandbox of its own: its id and hostname, the host's clock, random
// numbers no other restore has.
func TestVMRestore(t *testing.T) {
	vmOnly(t)
	k, err := vmkernel.Find(os.Getenv(vmkernel.EnvCacheDir), vmkernel.HostArch(runtime.GOARCH), nil)
	if err != nil {
		t.Skipf("no guest kernel to boot: %v", err)
	}
	// Snapshots are kept beside the kernels: this test's, in a cache of
	// its own.
	t.Setenv(vmkernel.EnvCacheDir, t.TempDir())
	images := t.TempDir()
	putImage(t, images, "restore.test/busybox:1", store.Config{Env: []string{"PATH=/bin"}}, func(root string) {
		for _, a := range []string{"head", "od", "date", "uname"} {
			os.Symlink("busybox", filepath.Join(root, "bin", a))
		}
	})
	var logs lockedBuffer
	cfg := airlock.Config{
		Isolation: airlock.IsolationVM, Kernel: k.Path, Image: "restore.test/busybox:1", ImageCacheDir: images,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	ctx := testCtx(t, 3*time.Minute)
	seen := map[string]bool{}
	for i := range 3 {
		sb := newSandbox(t, cfg)
		out := mustRun(t, ctx, sb, "hostname; head -c 16 /dev/urandom | od -An -tx1; date +%s")
		f := strings.Split(strings.TrimSpace(out), "\n")
		if len(f) != 3 {
			t.Fatalf("restore %d: %q", i, out)
		}
		if f[0] != sb.ID() {
			t.Errorf("restore %d: hostname %q, want its id %s", i, f[0], sb.ID())
		}
		if seen[f[1]] {
			t.Errorf("restore %d: random bytes %s that another restore had", i, f[1])
		}
		seen[f[1]] = true
		if secs, err := strconv.ParseInt(f[2], 10, 64); err != nil || time.Since(time.Unix(secs, 0)).Abs() > time.Minute {
			t.Errorf("restore %d: the guest's clock says %q, the host's %d", i, f[2], time.Now().Unix())
		}
		sb.Close()
	}
	if n := strings.Count(logs.String(), "restored=true"); n < 2 {
		t.Errorf("%d of 3 sandboxes restored from a snapshot, want the 2 after the first at least; log:\n%s", n, logs.String())
	}
}
