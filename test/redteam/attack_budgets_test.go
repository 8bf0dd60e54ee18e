//go:build linux

package redteam_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/boundary/process"
	"github.com/airlock-sandbox/airlock/internal/testbin"
)

// The kernel charges what a user namespace's processes take of several
// per-user budgets (struct ucounts: inotify instances and watches,
// fanotify groups and marks, pending signals, POSIX message queue bytes,
// SHM_LOCK, namespaces) to the user inside and, up the chain, to the
// namespace's owner in the host's namespace. These tests take such
// budgets to the end from inside a sandbox, and check on whom the charge
// lands.

// budgetHolder takes, in a sandbox, every inotify instance, inotify
// watch and queued signal the kernel lets it have, writes "<inotify
// instances> <errno> <RLIMIT_NOFILE> <watches> <errno> <signals queued>
// <errno> <RLIMIT_SIGPENDING>" to /tmp/held and holds them. Its first
// argument marks it on the host. Watches are of files under /usr (not
// followed, so a link is a watch of its own), the same ones from every
// instance (enough of them, the second argument, for the instances to
// hold every watch the user may have); only a new watch descriptor counts, as a second watch of one
// inode in an instance is the first. Signals are thread-directed
// real-time ones (tgkill: SI_TKILL), which the kernel counts against
// RLIMIT_SIGPENDING, sent to itself with the signal blocked so that they
// stay queued. fanotify_init is refused by the seccomp filter
// (TestAttackKernelSurface), so there is no fanotify group to take.
const budgetHolder = `import ctypes, os, resource, signal, sys, threading, time
libc = ctypes.CDLL(None, use_errno=True)
fds, e_in = [], 0
while True:
    fd = libc.inotify_init1(0o2000000)
    if fd < 0:
        e_in = ctypes.get_errno()
        break
    fds.append(fd)
paths = []
for d, dirs, files in os.walk("/usr"):
    paths += [os.path.join(d, f).encode() for f in files]
    if len(paths) >= int(sys.argv[2]):
        break
n_w, e_w = 0, 0
for fd in fds:
    last = 0
    for p in paths:
        wd = libc.inotify_add_watch(fd, p, 0x2 | 0x02000000)  # IN_MODIFY | IN_DONT_FOLLOW
        if wd < 0:
            e_w = ctypes.get_errno()
            break
        if wd > last:
            n_w, last = n_w + 1, wd
    if e_w:
        break
pending = resource.getrlimit(resource.RLIMIT_SIGPENDING)[0]
sig = signal.SIGRTMIN
signal.pthread_sigmask(signal.SIG_BLOCK, [sig])
n_sig, e_sig, me = 0, 0, threading.get_ident()
while n_sig <= 2 * pending:
    try:
        signal.pthread_kill(me, sig)
    except OSError as x:
        e_sig = x.errno
        break
    n_sig += 1
with open("/tmp/held.new", "w") as f:
    f.write("%d %d %d %d %d %d %d %d" % (len(fds), e_in, resource.getrlimit(resource.RLIMIT_NOFILE)[0], n_w, e_w, n_sig, e_sig, pending))
os.rename("/tmp/held.new", "/tmp/held")
# A slot that another signal of the user held while the queue filled
# is taken back as soon as it is free.
end = time.time() + 3600
while time.time() < end:
    try:
        signal.pthread_kill(me, sig)
    except OSError:
        pass
    time.sleep(0.01)
`

// held is what budgetHolder took in one sandbox.
type held struct {
	inotify, inotifyErrno, nofile int
	watches, watchErrno           int
	signals, signalErrno, pending int
}

// holdBudgets starts budgetHolder in sb and returns what it took once it
// holds it, with the holder and its host pid.
func holdBudgets(t *testing.T, sb *airlock.Sandbox) (held, *airlock.Process, int) {
	t.Helper()
	perInstance := readInt(t, "/proc/sys/fs/inotify/max_user_watches")/readInt(t, "/proc/sys/fs/inotify/max_user_instances") + 2
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	marker := "budgets-" + randHex(8)
	p, err := sb.Start(context.Background(), airlock.Command{Argv: []string{"python3", "-c", budgetHolder, marker, strconv.Itoa(perInstance)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Kill() })
	var out []byte
	if !testbin.WaitFor(time.Minute, func() bool {
		out, err = sb.ReadFile(ctx, "/tmp/held")
		return err == nil
	}) {
		t.Fatalf("the holder in sandbox %s wrote nothing: %v", sb.ID(), err)
	}
	var h held
	if _, err := fmt.Sscan(string(out), &h.inotify, &h.inotifyErrno, &h.nofile, &h.watches, &h.watchErrno, &h.signals, &h.signalErrno, &h.pending); err != nil {
		t.Fatalf("the holder wrote %q: %v", out, err)
	}
	if h.inotifyErrno != int(syscall.EMFILE) || h.inotify+3 >= h.nofile {
		t.Fatalf("inotify_init1 in sandbox %s stopped after %d instances with errno %d (RLIMIT_NOFILE %d): want EMFILE from the per-user budget, below the descriptor limit", sb.ID(), h.inotify, h.inotifyErrno, h.nofile)
	}
	if h.inotify > 0 && h.watchErrno != int(syscall.ENOSPC) {
		t.Fatalf("inotify_add_watch in sandbox %s stopped after %d watches with errno %d: want ENOSPC from the per-user budget", sb.ID(), h.watches, h.watchErrno)
	}
	if h.signalErrno != int(syscall.EAGAIN) {
		t.Fatalf("tgkill in sandbox %s queued %d signals and stopped with errno %d: want EAGAIN from RLIMIT_SIGPENDING (%d)", sb.ID(), h.signals, h.signalErrno, h.pending)
	}
	pid := 0
	for p, cmd := range hostProcs(t) {
		if strings.Contains(cmd, marker) {
			pid = p
		}
	}
	if pid == 0 {
		t.Fatalf("the holder of sandbox %s is not seen on the host", sb.ID())
	}
	return h, p, pid
}

// userNSOwner is the host uid that owns the user namespace of process pid.
func userNSOwner(t *testing.T, pid int) int {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	uid, err := unix.IoctlGetUint32(int(f.Fd()), unix.NS_GET_OWNER_UID)
	if err != nil {
		t.Fatalf("NS_GET_OWNER_UID of pid %d: %v", pid, err)
	}
	return int(uid)
}

// hostInotify takes an inotify instance as this process, and gives it
// back.
func hostInotify() error {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		return err
	}
	return unix.Close(fd)
}

// hostWatch adds a watch to inotify instance fd as this process, and
// removes it.
func hostWatch(fd int) error {
	wd, err := unix.InotifyAddWatch(fd, "/", unix.IN_MODIFY)
	if err != nil {
		return err
	}
	_, err = unix.InotifyRmWatch(fd, uint32(wd))
	return err
}

// hostQueueSignal queues, as this process's user, one thread-directed
// real-time signal (counted against RLIMIT_SIGPENDING, as kill's are
// not) to a child of its own, which it ends.
func hostQueueSignal(t *testing.T) error {
	t.Helper()
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	// Signal 40: real-time (the kernel's start at 32), and none that
	// libc keeps for itself.
	return unix.Tgkill(cmd.Process.Pid, cmd.Process.Pid, syscall.Signal(40))
}

// TestAttackKernelBudgets takes, from inside a sandbox, every inotify
// instance, inotify watch and queued signal the kernel grants it, and
// holds them. Under root, each sandbox's user namespace belongs to the
// sandbox's own leased host uid, so what it takes is its own: root on
// the host can still take an inotify instance, add a watch and queue a
// signal, and a second sandbox gets whole budgets of its own as well. An
// unprivileged caller owns the namespaces it makes (no other owner is
// open to it), so its sandboxes draw on its own budgets: that charge is
// checked to land on the caller and to come back when the sandbox lets
// go.
func TestAttackKernelBudgets(t *testing.T) {
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		if lv == airlock.IsolationVM {
			t.Skip("a VM's inotify instances, watches and pending signals are its guest kernel's: none is charged to a user of the host")
		}
		if lv == airlock.IsolationGVisor {
			// The Sentry has no watch limit: what bounds them is the
			// sandbox's memory, its cgroup's (TestMemory* at gvisor).
			t.Skip("a gvisor sandbox's inotify instances, watches and pending signals are the Sentry's, kept in its memory: none is charged to a user of the host")
		}
		root := os.Geteuid() == 0
		instances := readInt(t, "/proc/sys/fs/inotify/max_user_instances")
		watches := readInt(t, "/proc/sys/fs/inotify/max_user_watches")
		var pending unix.Rlimit
		if err := unix.Getrlimit(unix.RLIMIT_SIGPENDING, &pending); err != nil {
			t.Fatal(err)
		}
		a := box(t, lv, airlock.Config{})
		// B starts, and the host takes the instance it adds watches
		// to, before A takes anything.
		var b *airlock.Sandbox
		if root {
			b = box(t, lv, airlock.Config{})
		}
		fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)

		ha, holder, pa := holdBudgets(t, a)
		t.Logf("sandbox A took %d inotify instances (%d per user) with %d watches (%d per user) and queued %d signals (RLIMIT_SIGPENDING %d)", ha.inotify, instances, ha.watches, watches, ha.signals, ha.pending)
		uid := hostUID(t, a.PID())
		for _, pid := range []int{a.PID(), pa} {
			if got := userNSOwner(t, pid); got != uid {
				t.Errorf("the user namespace of sandbox A's pid %d belongs to host uid %d, want the sandbox's own uid %d", pid, got, uid)
			}
		}
		if !root {
			if uid != os.Getuid() {
				t.Errorf("sandbox A runs as host uid %d, want the caller's %d", uid, os.Getuid())
			}
			if err := hostInotify(); err != unix.EMFILE {
				t.Errorf("with sandbox A holding its inotify instances, the caller's inotify_init1: %v, want EMFILE (the caller owns the namespace)", err)
			}
			if err := hostWatch(fd); err != unix.ENOSPC {
				t.Errorf("with sandbox A holding its inotify watches, the caller's inotify_add_watch: %v, want ENOSPC (the caller owns the namespace)", err)
			}
			// A signal of the caller's that was pending while the
			// sandbox filled the budget (the Go runtime's, a child's
			// exit) frees its slot after, and the holder takes it back:
			// the caller's queue is full when one of a few tries finds
			// it so, and never is if the charge does not land on the
			// caller.
			var serr error
			for range 20 {
				if serr = hostQueueSignal(t); serr == unix.EAGAIN {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			if serr != unix.EAGAIN {
				t.Errorf("with sandbox A holding its queued signals, the caller's tgkill: %v, want EAGAIN (the caller owns the namespace)", serr)
			}
			holder.Kill()
			if !testbin.WaitFor(10*time.Second, func() bool { return hostInotify() == nil && hostWatch(fd) == nil && hostQueueSignal(t) == nil }) {
				t.Errorf("after sandbox A let its budgets go, the caller's inotify_init1: %v, inotify_add_watch: %v, tgkill: %v", hostInotify(), hostWatch(fd), hostQueueSignal(t))
			}
			return
		}

		if uid < process.SandboxUIDBase || uid >= process.SandboxUIDBase+process.SandboxUIDRange {
			t.Fatalf("sandbox A runs as host uid %d, outside the sandbox range", uid)
		}
		hostHolds := func(who string) {
			t.Helper()
			if err := hostInotify(); err != nil {
				t.Errorf("with what %s took held, host root's inotify_init1: %v", who, err)
			}
			if err := hostWatch(fd); err != nil {
				t.Errorf("with what %s took held, host root's inotify_add_watch: %v", who, err)
			}
			if err := hostQueueSignal(t); err != nil {
				t.Errorf("with what %s took held, host root's tgkill of a queued signal: %v", who, err)
			}
		}
		hostHolds("sandbox A")

		hb, _, _ := holdBudgets(t, b)
		t.Logf("sandbox B took %d inotify instances with %d watches and queued %d signals", hb.inotify, hb.watches, hb.signals)
		for name, h := range map[string]held{"A": ha, "B": hb} {
			if h.inotify != instances || h.watches != watches {
				t.Errorf("sandbox %s took %d inotify instances and %d watches, want whole budgets of %d and %d", name, h.inotify, h.watches, instances, watches)
			}
			// A few of a sandbox's own signals (SIGCHLD) may be
			// queued at the time.
			if h.signals < int(pending.Cur)-64 {
				t.Errorf("sandbox %s queued %d signals, want close to a whole RLIMIT_SIGPENDING of %d", name, h.signals, pending.Cur)
			}
		}
		hostHolds("sandboxes A and B")
	})
}

// readInt reads a number from a file such as a sysctl.
func readInt(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return n
}
