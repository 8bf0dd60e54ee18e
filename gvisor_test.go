package airlock_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/cgroup"
)

// TestGVisorLevel: at the gvisor level commands run on gVisor's kernel
// (its Sentry), not the host's; a system call the Sentry does not
// implement fails cleanly and the sandbox goes on; files and the
// agent's stream work as at every level; and closing leaves nothing on
// the host: no runsc process, no private directory, no mount, no
// cgroup. With AIRLOCK_REQUIRE_GVISOR set (make test), a machine
// without runsc fails rather than skips.
func TestGVisorLevel(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	cfg := airlock.Config{Isolation: airlock.IsolationGVisor, Resources: airlock.Resources{MemoryMB: 256}, PidsLimit: 64}
	if isRoot() {
		// Mounts are served from FUSE mounts on the host, which only
		// root makes.
		cfg.VFS = airlock.VFSConfig{Mounts: map[string]airlock.MountSpec{"/m": {Type: airlock.MountMemory}}}
	}
	sb, err := airlock.Create(ctx, cfg)
	if errors.Is(err, airlock.ErrUnavailable) && os.Getenv("AIRLOCK_REQUIRE_GVISOR") == "" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatalf("create a gvisor sandbox: %v", err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			sb.Close()
		}
	})
	runsc := sb.PID()

	if out := mustRun(t, ctx, sb, "uname -r; cat /proc/version"); !strings.Contains(out, "gvisor") {
		t.Errorf("the kernel commands see:\n%s\nwant gVisor's", out)
	}
	if host, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil && strings.Contains(mustRun(t, ctx, sb, "uname -r"), strings.TrimSpace(string(host))) {
		t.Errorf("commands see the host's kernel release %s", host)
	}
	// pkey_alloc (330), which airlock's filter lets through, is one the
	// Sentry does not implement: ENOSYS (38), not a crash (Linux gives a
	// key, or EINVAL or ENOSPC without protection keys).
	const probe = `import ctypes; libc = ctypes.CDLL(None, use_errno=True); r = libc.syscall(330, 0, 0); print(r, ctypes.get_errno())`
	res, err := sb.Run(ctx, airlock.Command{Argv: []string{"python3", "-c", probe}})
	if err != nil || strings.TrimSpace(string(res.Stdout)) != "-1 38" {
		t.Errorf("an unimplemented system call: %v %+v", err, res)
	}
	if out := mustRun(t, ctx, sb, "echo still here"); out != "still here\n" {
		t.Errorf("after it: %q", out)
	}
	// As root, the Sentry and its gofer run as a block of unprivileged
	// host ids: the host's files closed to others stay closed, as at the
	// process level (Debian's /etc/ssl/private, root's, mode 0710).
	if fi, err := os.Stat("/etc/ssl/private"); isRoot() && err == nil && fi.Mode().Perm()&0o005 == 0 {
		if res := run(t, ctx, sb, "ls /etc/ssl/private"); res.ExitCode == 0 {
			t.Errorf("root in the sandbox lists the host's /etc/ssl/private: %q", res.Stdout)
		}
	}
	if err := sb.WriteFile(ctx, "/workspace/f", []byte("through the Sentry"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := sb.ReadFile(ctx, "/workspace/f"); err != nil || string(b) != "through the Sentry" {
		t.Errorf("read back: %q, %v", b, err)
	}
	if out := mustRun(t, ctx, sb, "cat /workspace/f"); out != "through the Sentry" {
		t.Errorf("the command reads %q", out)
	}

	// The commands' limits hold inside the Sentry, in cgroups of its
	// own: a command over the memory limit is killed and reported as
	// such, not the sandbox; forks stop at the pids limit; and usage
	// counts the commands, not the Sentry's host tasks.
	res, err = sb.Run(ctx, airlock.Command{Argv: []string{"python3", "-c", "b = bytearray(1 << 30); print(len(b))"}})
	if err != nil || res.KilledBy != airlock.KilledByOOM || !slices.Contains(res.LimitsHit, "memory") {
		t.Errorf("1 GiB under a 256 MiB limit: %v, killed_by %q, limits_hit %q", err, res.KilledBy, res.LimitsHit)
	}
	if out := mustRun(t, ctx, sb, "echo after the OOM kill"); out != "after the OOM kill\n" {
		t.Errorf("after it: %q", out)
	}
	// The sleeps outlast the loop, however slowly a loaded machine
	// forks.
	if res := run(t, ctx, sb, "for i in $(seq 1 100); do sleep 10 & done; wait"); !strings.Contains(string(res.Stderr), "fork") {
		t.Errorf("100 processes under a pids limit of 64: exit %d, stderr %q", res.ExitCode, res.Stderr)
	}
	var u airlock.Usage
	if !waitFor(30*time.Second, func() bool { u, err = sb.Usage(); return err == nil && u.Pids < 32 }) || u.OOMKills != 1 || u.Pids == 0 || u.MemoryBytes == 0 || u.MemoryBytes > 64<<20 {
		t.Errorf("usage: %+v, %v; want 1 OOM kill, the commands' few pids and MiB", u, err)
	}

	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "airlock-gvisor-"+sb.ID()+"-*"))
	if len(dirs) != 1 {
		t.Fatalf("private directories of %s: %v, want one", sb.ID(), dirs)
	}

	// A programmable mount reaches the Sentry through its gofer, from a
	// FUSE mount that only runsc's mount namespace holds: the host's has
	// none of the sandbox's.
	if isRoot() {
		if out := mustRun(t, ctx, sb, "echo made inside > /m/f; mkfifo /m/p; (echo through a FIFO > /m/p &); cat /m/p; python3 -c 'import mmap; f = open(\"/m/f\", \"r+b\"); print(mmap.mmap(f.fileno(), 0)[:4].decode())'"); out != "through a FIFO\nmade\n" {
			t.Errorf("the mount, from inside: %q", out)
		}
		if b, err := sb.ReadFile(ctx, "/m/f"); err != nil || string(b) != "made inside\n" {
			t.Errorf("the mount's file through the file API: %q, %v", b, err)
		}
		if mi, err := os.ReadFile("/proc/self/mountinfo"); err != nil || strings.Contains(string(mi), dirs[0]) {
			t.Errorf("the host's mount namespace holds a mount of the sandbox (%v):\n%s", err, mi)
		}
	}

	if err := sb.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	closed = true
	if _, err := os.Stat(dirs[0]); !os.IsNotExist(err) {
		t.Errorf("%s is still there after close: %v", dirs[0], err)
	}
	if mi, err := os.ReadFile("/proc/self/mountinfo"); err == nil && strings.Contains(string(mi), dirs[0]) {
		t.Errorf("a mount beneath %s is left on the host", dirs[0])
	}
	if !waitFor(5*time.Second, func() bool { return !processAlive(runsc) }) {
		t.Errorf("runsc (pid %d) still runs after close", runsc)
	}
	if pids := procsWithArg(t, sb.ID()); len(pids) > 0 {
		t.Errorf("host processes %v still name the sandbox", pids)
	}
	if cgroup.Exists(sb.ID()) {
		t.Errorf("the cgroup of %s is left", sb.ID())
	}
}

func processAlive(pid int) bool {
	_, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid)))
	return err == nil
}
