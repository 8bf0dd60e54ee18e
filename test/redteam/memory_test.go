package redteam_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/boundary/vm"
)

// Memory that no limit counts: every sandbox has a memory limit unless
// its caller lifts it, kernel memory is charged to it, and what the
// kernel keeps for the sandbox's IPC, which outlives the process that
// made it, is bounded.

// memoryEnforced skips the test when the sandbox's memory limit is not
// enforced on this machine (no usable cgroups), as its notes say.
func memoryEnforced(t *testing.T, sb *airlock.Sandbox) {
	t.Helper()
	for _, n := range sb.Notes() {
		if strings.Contains(n, "memory") && strings.Contains(n, "not enforced") {
			t.Skipf("the memory limit is not enforced here: %s", n)
		}
	}
}

// runProbe runs argv in sb with a deadline and returns its result, whatever
// its exit code.
func runProbe(t *testing.T, sb *airlock.Sandbox, argv ...string) *airlock.ExecResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := sb.Run(ctx, airlock.Command{Argv: argv})
	if err != nil {
		t.Fatalf("run %q: %v", argv, err)
	}
	return res
}

// probeLastInt returns the last line of out that is a number, or -1.
func probeLastInt(out []byte) int64 {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if n, err := strconv.ParseInt(strings.TrimSpace(lines[i]), 10, 64); err == nil {
			return n
		}
	}
	return -1
}

// A sandbox that sets no memory limit has one: a 4 GiB allocation is
// killed by the OOM killer, reported as such, and the sandbox goes on.
func TestMemoryDefaultLimit(t *testing.T) {
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		t.Parallel()
		sb := box(t, lv, airlock.Config{})
		memoryEnforced(t, sb)
		mb := sb.Config().Resources.MemoryMB
		if mb <= 0 || mb > airlock.DefaultMemoryMB {
			t.Fatalf("default memory limit %d MiB, want 1..%d", mb, airlock.DefaultMemoryMB)
		}
		res := runProbe(t, sb, "python3", "-c", "b = bytearray(4 << 30); print(len(b))")
		if res.KilledBy != airlock.KilledByOOM || !slices.Contains(res.LimitsHit, "memory") {
			t.Errorf("a 4 GiB allocation under the default limit of %d MiB: exit %d, killed_by %q, limits_hit %q, stdout %q; want an OOM kill",
				mb, res.ExitCode, res.KilledBy, res.LimitsHit, res.Stdout)
		}
		if out := ok(t, sb, "echo ok"); out != "ok\n" {
			t.Errorf("after the OOM kill: %q", out)
		}
	})
}

// MemoryUnlimited lifts the default: more than the default limit can be
// allocated.
func TestMemoryUnlimited(t *testing.T) {
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		t.Parallel()
		sb := box(t, lv, airlock.Config{Resources: airlock.Resources{MemoryMB: airlock.MemoryUnlimited}})
		if got := sb.Config().Resources.MemoryMB; got != airlock.MemoryUnlimited {
			t.Errorf("Config().Resources.MemoryMB = %d, want %d (unlimited)", got, airlock.MemoryUnlimited)
		}
		n := (airlock.DefaultMemoryMB + 176) << 20
		res := runProbe(t, sb, "python3", "-c", fmt.Sprintf("b = bytearray(%d); print(len(b))", n))
		if res.ExitCode != 0 || res.KilledBy != "" || strings.TrimSpace(string(res.Stdout)) != strconv.Itoa(n) {
			t.Errorf("%d MiB with the memory limit lifted: exit %d, killed_by %q, stdout %q, stderr %q", n>>20, res.ExitCode, res.KilledBy, res.Stdout, res.Stderr)
		}
	})
}

// Kernel memory is charged to the memory limit: pipe buffers, which no
// rlimit bounds in bytes, stop at the limit (a refused write or an OOM
// kill) instead of growing to the half GiB asked for.
func TestMemoryKernelCharged(t *testing.T) {
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		t.Parallel()
		if lv == airlock.IsolationVM && !vm.HardwareVirtualization() {
			// The guest kernel charges pipe buffers as the host's does;
			// near a 48 MiB limit it reclaims and reads back the
			// program's own files over and over, which an emulated CPU
			// takes many minutes over.
			t.Skip("at the vm level this runs with KVM only: under TCG the reclaim at the limit takes minutes")
		}
		const limitMB = 48
		// Enough descriptors for pipes of 512 MiB: more than any bound
		// below.
		sb := box(t, lv, airlock.Config{Resources: airlock.Resources{MemoryMB: limitMB}, NofileLimit: 16384})
		memoryEnforced(t, sb)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		res, err := sb.Run(ctx, airlock.Command{Argv: []string{"python3", "-c", `import fcntl, os
held, n = 0, 0
chunk = b"x" * 65536
try:
    while held < (512 << 20):
        r, w = os.pipe()
        fcntl.fcntl(w, fcntl.F_SETFL, os.O_NONBLOCK)
        n += 1
        while True:
            try:
                held += os.write(w, chunk)
            except BlockingIOError:
                break
        if n % 16 == 0:
            print(held, flush=True)
except OSError as e:
    print("stopped:", e, flush=True)
print(held, flush=True)
`}})
		bound := int64(limitMB) << 20
		if lv == airlock.IsolationGVisor {
			// The kernel is gVisor's Sentry, which keeps pipe buffers
			// on its own heap: the host's cgroup charges them with the
			// whole Sentry, bounded at the limit plus the Sentry's own
			// 256 MiB (the README's "The gvisor level"). Reaching that
			// ends the sandbox, and its reason says why.
			bound += 256 << 20
			if err != nil {
				if !errors.Is(err, airlock.ErrCrashed) || !strings.Contains(err.Error(), "for memory") {
					t.Fatalf("the pipes ended the sandbox without a reason that names memory: %v", err)
				}
				t.Logf("the pipes ended the sandbox: %v", err)
				return
			}
		}
		if err != nil {
			t.Fatalf("run the pipes: %v", err)
		}
		held := probeLastInt(res.Stdout)
		t.Logf("pipes held %d MiB under a %d MiB limit: exit %d, killed_by %q, stderr %q", held>>20, limitMB, res.ExitCode, res.KilledBy, res.Stderr)
		if held < 0 {
			t.Fatalf("no progress printed: stdout %q stderr %q", res.Stdout, res.Stderr)
		}
		if held > bound {
			t.Errorf("the sandbox held %d MiB in pipe buffers under a memory limit of %d MiB: kernel memory is not charged", held>>20, limitMB)
		}
		if out := ok(t, sb, "echo ok"); out != "ok\n" {
			t.Errorf("after the pipes: %q", out)
		}
	})
}

// What the kernel keeps for System V and POSIX IPC is bounded in the
// sandbox's IPC namespace, commands cannot lift the bounds, and shared
// memory segments die with their processes instead of being storage
// outside the disk.
func TestMemoryIPCBounded(t *testing.T) {
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		t.Parallel()
		const diskMB = 64
		sb := box(t, lv, airlock.Config{DiskMB: diskMB})
		prog := fmt.Sprintf(`import ctypes, ctypes.util, os, resource
libc = ctypes.CDLL(None, use_errno=True)
libc.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]
IPC_PRIVATE, IPC_CREAT = 0, 0o1000
disk = %d << 20

def err():
    return os.strerror(ctypes.get_errno())

# One segment larger than the disk is refused.
print("big", libc.shmget(IPC_PRIVATE, disk + 4096, IPC_CREAT | 0o600), err())
# Segments of a quarter of the disk: at most four in all.
segs = 0
for i in range(64):
    if libc.shmget(IPC_PRIVATE, disk // 4, IPC_CREAT | 0o600) < 0:
        print("segments stop:", err())
        break
    segs += 1
print("segments", segs)
queues = 0
for i in range(100000):
    if libc.msgget(IPC_PRIVATE, IPC_CREAT | 0o600) < 0:
        print("msg queues stop:", err())
        break
    queues += 1
print("msgqueues", queues)
sets = 0
for i in range(100000):
    if libc.semget(IPC_PRIVATE, 64, IPC_CREAT | 0o600) < 0:
        print("semaphore sets stop:", err())
        break
    sets += 1
print("semsets", sets)
soft, hard = resource.getrlimit(resource.RLIMIT_MSGQUEUE)
print("rlimit_msgqueue", hard)
try:
    resource.setrlimit(resource.RLIMIT_MSGQUEUE, (hard + (1 << 20), hard + (1 << 20)))
    print("raised rlimit_msgqueue")
except (ValueError, OSError) as e:
    print("rlimit_msgqueue stays:", e)
# POSIX queues, through mq_open and as files of /dev/mqueue (each of 10
# messages of 8 KiB by default).
rt = ctypes.CDLL(ctypes.util.find_library("rt") or "librt.so.1", use_errno=True)
mqs = 0
for i in range(100000):
    if rt.mq_open(("/q%%d" %% i).encode(), os.O_CREAT | os.O_RDWR, 0o600, None) < 0:
        print("mq_open stops:", err())
        break
    mqs += 1
for i in range(100000):
    try:
        os.close(os.open("/dev/mqueue/f%%d" %% i, os.O_CREAT | os.O_RDWR, 0o600))
    except OSError as e:
        print("/dev/mqueue stops:", e)
        break
    mqs += 1
print("mqueues", mqs)
for name, value in (("kernel/shmmax", "1099511627776"), ("kernel/shmall", "268435456"), ("kernel/msgmni", "32000"), ("kernel/shm_rmid_forced", "0")):
    try:
        with open("/proc/sys/" + name, "w") as f:
            f.write(value)
        print("raised", name)
    except OSError as e:
        print(name, "stays:", e.strerror)
`, diskMB)
		out := py(t, sb, prog)
		t.Logf("%s", out)
		field := func(name string) int64 {
			for _, l := range strings.Split(out, "\n") {
				if f := strings.Fields(l); len(f) >= 2 && f[0] == name {
					n, err := strconv.ParseInt(f[1], 10, 64)
					if err == nil {
						return n
					}
				}
			}
			t.Fatalf("no %q in the output:\n%s", name, out)
			return 0
		}
		if strings.Contains(out, "raised") {
			t.Errorf("a command raised an IPC bound:\n%s", out)
		}
		if lv == airlock.IsolationGVisor {
			// In gVisor's Sentry IPC objects are the Sentry's memory,
			// counted against the sandbox (a segment's pages against the
			// commands' limit, everything against the host's cgroup),
			// not the host kernel's or the host user's: the Sentry's own
			// bounds hold (SHMMNI, MSGMNI, SEMMNI), its IPC sysctls are
			// read-only, and a POSIX queue is the Sentry's too. What
			// remains is memory left in a detached segment.
			for _, name := range []string{"msgqueues", "semsets"} {
				if n := field(name); n < 1 || n > 32000 {
					t.Errorf("%d %s were made; want at most gVisor's 32000", n, name)
				}
			}
			detachedSegmentsFreed(t, box(t, lv, airlock.Config{Resources: airlock.Resources{MemoryMB: 64}}))
			return
		}
		if field("big") >= 0 {
			t.Errorf("a System V segment larger than the %d MiB disk was made", diskMB)
		}
		if n := field("segments"); n < 1 || n > 4 {
			t.Errorf("%d System V segments of a quarter of the disk were made; want 1 to 4", n)
		}
		if n := field("msgqueues"); n < 1 || n > 256 {
			t.Errorf("%d System V message queues were made; want at most 256", n)
		}
		if n := field("semsets"); n < 1 || n > 1024 {
			t.Errorf("%d System V semaphore sets of 64 were made; want at most 1024", n)
		}
		// POSIX queues would be charged to the budget of the user
		// airlock runs as, shared with every sandbox and that user's
		// own processes: none may be made.
		if n := field("rlimit_msgqueue"); n != 0 {
			t.Errorf("RLIMIT_MSGQUEUE is %d; want 0", n)
		}
		if n := field("mqueues"); n != 0 {
			t.Errorf("%d POSIX message queues were made; want none", n)
		}
		// The segments above were never attached, and their creator has
		// exited: none is left holding memory.
		if segs := ok(t, sb, "tail -n +2 /proc/sysvipc/shm"); strings.TrimSpace(segs) != "" {
			t.Errorf("System V segments outlive their processes:\n%s", segs)
		}
	})
}

// detachedSegmentsFreed shows that the memory a command leaves in a
// System V segment is freed once nothing has it attached, as Linux's
// shm_rmid_forced does: with a 64 MiB limit, a command fills a 40 MiB
// segment and exits; another then needs 40 MiB of its own. Where the
// segment lived on, every later command would be killed for memory.
func detachedSegmentsFreed(t *testing.T, sb *airlock.Sandbox) {
	t.Helper()
	const fill = `import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]
libc.shmat.restype = ctypes.c_void_p
libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
size = 40 << 20
i = libc.shmget(0, size, 0o1000 | 0o600)
p = libc.shmat(i, None, 0)
if i < 0 or p in (None, ctypes.c_void_p(-1).value):
    sys.exit("shm: " + str(ctypes.get_errno()))
ctypes.memset(p, 1, size)
print(i)
`
	for round := range 3 {
		res := runProbe(t, sb, "python3", "-c", fill)
		if res.ExitCode != 0 {
			t.Fatalf("round %d: a command that fills a 40 MiB segment under a 64 MiB limit: exit %d, killed_by %q, stderr %q: the segments of earlier rounds still hold their memory", round, res.ExitCode, res.KilledBy, res.Stderr)
		}
	}
}
