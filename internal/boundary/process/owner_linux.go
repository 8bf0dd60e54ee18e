package process

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// startOwned starts cmd, whose SysProcAttr makes a new user namespace,
// so that the namespace belongs to host uid and gid (the ids its root
// maps to) rather than to the caller.
//
// The kernel charges a user namespace's per-user budgets (inotify
// instances and watches, fanotify groups and marks, pending signals,
// POSIX message queue bytes, SHM_LOCK, namespace counts; struct ucounts)
// to the namespace's owner as well as to the user inside: a namespace
// that root makes would let every sandbox spend root's budgets, which
// host daemons depend on (systemd and udev need inotify), and would make
// all sandboxes share one. The owner is the effective uid of the task
// that creates the namespace, and cannot change afterwards, so the
// namespace is made by a thread whose effective ids are, for the length
// of the clone, the sandbox's own.
//
// Other ways were weighed: a launcher that drops to the sandbox's uid
// and execs the agent costs an exec per start; setresuid through the
// syscall package changes every thread of the process, which would take
// root away from the rest of the supervisor while it lasts. Linux keeps
// credentials per thread, so raw setresuid and setresgid on a locked OS
// thread change only that thread, and os/exec clones the child from the
// thread that calls Start.
//
// Changing the effective uid from 0 clears the thread's effective
// capabilities; they are raised again from its permitted set (kept, as
// the real and saved uids stay 0) for the length of the switch. So Start
// works as it did as root: it opens /dev/null and the child's /proc
// files (a credential change makes the process non-dumpable, which gives
// those files to root), writes the child's uid_map and gid_map (which
// the owner may write anyway for its own ids, one each, once setgroups
// is "deny"), and a kernel that lets only privileged callers make user
// namespaces with capabilities inside (AppArmor's
// restrict_unprivileged_userns) sees a privileged caller. The child
// gets every capability in its new namespace, and none outside it,
// whatever it inherits, so Credential (root inside) and Pdeathsig work
// as before; the files it inherits are open already; cgroup placement
// and everything else is done after Start.
//
// Thread creation from a locked thread is handed to the runtime's
// template thread, so no thread is ever made with the sandbox's ids. The
// switch runs on a goroutine of its own: should the thread's ids fail to
// come back, that goroutine ends still locked, and the runtime ends the
// thread with it (the agent's parent-death signal then kills the agent).
//
// When the caller is not root (it maps its own uid, and owns the
// namespace already), or the ids are root's, cmd is started as it is.
func startOwned(cmd *exec.Cmd, uid, gid int) error {
	if os.Geteuid() != 0 || uid == 0 && gid == 0 {
		return cmd.Start()
	}
	done := make(chan error, 1)
	go func() { done <- startOnThreadAs(cmd, uid, gid) }()
	return <-done
}

// startOnThreadAs starts cmd from the calling goroutine's OS thread with
// the thread's effective ids set to uid and gid for the length of Start.
// It leaves the goroutine locked to its thread when the thread's ids
// could not be restored.
func startOnThreadAs(cmd *exec.Cmd, uid, gid int) error {
	dumpable.hold()
	defer dumpable.release()
	runtime.LockOSThread()
	saved, err := saveThread()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("read the supervisor's capabilities: %w", err)
	}
	startErr := becomeOwner(uid, gid, saved)
	if startErr == nil {
		startErr = cmd.Start()
	}
	if err := restoreThread(saved); err != nil {
		// The thread stays locked: it ends with this goroutine.
		if cmd.Process != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		return fmt.Errorf("restore the supervisor's thread to root after starting the sandbox's agent as uid %d: %w", uid, err)
	}
	runtime.UnlockOSThread()
	return startErr
}

// becomeOwner sets the calling thread's effective uid and gid, keeping
// its real and saved ids (root's, to come back to) and, raised again,
// its effective capabilities. Raw system calls: the syscall package's
// would change every thread of the process.
func becomeOwner(uid, gid int, t threadCreds) error {
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, ^uintptr(0), uintptr(gid), ^uintptr(0)); e != 0 {
		return fmt.Errorf("set the thread's effective gid to %d: %w", gid, e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, ^uintptr(0), uintptr(uid), ^uintptr(0)); e != 0 {
		return fmt.Errorf("set the thread's effective uid to %d: %w", uid, e)
	}
	if err := unix.Capset(&t.hdr, &t.caps[0]); err != nil {
		return fmt.Errorf("keep the thread's capabilities as uid %d: %w", uid, err)
	}
	return nil
}

// restoreThread gives the calling thread back the effective ids and
// the capabilities it had.
func restoreThread(t threadCreds) error {
	var errs []error
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, ^uintptr(0), uintptr(t.euid), ^uintptr(0)); e != 0 {
		errs = append(errs, fmt.Errorf("set the effective uid back to %d: %w", t.euid, e))
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, ^uintptr(0), uintptr(t.egid), ^uintptr(0)); e != 0 {
		errs = append(errs, fmt.Errorf("set the effective gid back to %d: %w", t.egid, e))
	}
	if err := unix.Capset(&t.hdr, &t.caps[0]); err != nil {
		errs = append(errs, fmt.Errorf("set the capabilities back: %w", err))
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	// A thread left with other ids must not go back to the pool.
	if _, e, _ := unix.Getresuid(); e != t.euid {
		return fmt.Errorf("the thread's effective uid is %d, not %d", e, t.euid)
	}
	if _, e, _ := unix.Getresgid(); e != t.egid {
		return fmt.Errorf("the thread's effective gid is %d, not %d", e, t.egid)
	}
	return nil
}

// threadCreds is what a switch changes of a thread's credentials.
type threadCreds struct {
	euid, egid int
	hdr        unix.CapUserHeader
	caps       [2]unix.CapUserData // effective, permitted, inheritable
}

func saveThread() (threadCreds, error) {
	t := threadCreds{hdr: unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}}
	_, t.euid, _ = unix.Getresuid()
	_, t.egid, _ = unix.Getresgid()
	err := unix.Capget(&t.hdr, &t.caps[0])
	return t, err
}

// dumpable keeps the process's dumpable attribute as it was across the
// switches: the kernel resets it (to fs.suid_dumpable, usually 0)
// whenever a thread's effective ids change, and it belongs to the
// process, not to the thread. It is process-wide state, so it is kept in
// one place for the process; the last switch to end puts it back.
var dumpable dumpableKeeper

type dumpableKeeper struct {
	mu    sync.Mutex
	n     int
	saved int // -1: unknown, left as the kernel sets it
}

func (d *dumpableKeeper) hold() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.n == 0 {
		v, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
		if err != nil {
			v = -1
		}
		d.saved = v
	}
	d.n++
}

func (d *dumpableKeeper) release() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.n--
	// prctl sets only 0 and 1 (2, root-only dumps, comes from a set-id
	// exec and stays as the kernel left it).
	if d.n == 0 && (d.saved == 0 || d.saved == 1) {
		_ = unix.Prctl(unix.PR_SET_DUMPABLE, uintptr(d.saved), 0, 0, 0)
	}
}
