package seccomp

// The tests in this file install the real filter in a real process. Since a
// filter can never be removed, they re-execute the test binary: TestMain sees
// AIRLOCK_SECCOMP_CHILD=<probe>, sets no_new_privs, installs the filter, runs
// the probe, prints "errno=N" and exits; the parent asserts on N.
//
// Setting no_new_privs: the child first tries syscall.AllThreadsSyscall,
// which sets it on every thread but only works in binaries built without cgo
// (CGO_ENABLED=0, as the agent is). In a cgo binary (the default "go test" on
// a machine with a C compiler, and always with -race) it fails with ENOTSUP,
// and the child sets it on its own locked OS thread and installs from that
// thread. That is enough: the kernel only checks the calling thread, and
// TSYNC copies no_new_privs to every thread it synchronizes (the "tsync"
// probe verifies this through /proc). Either way the tests pass without
// CAP_SYS_ADMIN, that is, as an unprivileged user.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Environment variables understood by a child process.
const (
	envChild   = "AIRLOCK_SECCOMP_CHILD"   // probe to run
	envProfile = "AIRLOCK_SECCOMP_PROFILE" // "ptrace" for Profile{AllowPtrace: true}
	envNNP     = "AIRLOCK_SECCOMP_NNP"     // "thread": set no_new_privs on the calling thread only
	envInstall = "AIRLOCK_SECCOMP_INSTALL" // "0": run the probe without installing the filter
	envPython  = "AIRLOCK_SECCOMP_PYTHON"  // python3 binary for the libc-threads probe
	envSocket  = "AIRLOCK_SECCOMP_SOCKET"  // "family type protocol" for the socket probes
)

// noSuchPID is larger than any pid_max (at most 2^22).
const noSuchPID = 0x7fffffff

// probe performs one operation in a child and reports its errno (0 for
// success). A non-nil error means the probe itself went wrong.
type probe func() (unix.Errno, error)

// errnoOf extracts the errno from err (0 if err is nil).
func errnoOf(err error) (unix.Errno, error) {
	if err == nil {
		return 0, nil
	}
	var errno unix.Errno
	if errors.As(err, &errno) {
		return errno, nil
	}
	return 0, err
}

// probes are the operations the children can run.
func probes() map[string]probe {
	return map[string]probe{
		"noop": func() (unix.Errno, error) { return 0, nil },
		"getpid": func() (unix.Errno, error) {
			pid, _, errno := unix.RawSyscall(unix.SYS_GETPID, 0, 0, 0)
			if errno == 0 && int(pid) != os.Getpid() {
				return 0, fmt.Errorf("getpid = %d, want %d", pid, os.Getpid())
			}
			return errno, nil
		},
		// Without the filter this fails with ENOENT as root (the target does
		// not exist), so a broken filter cannot mount anything.
		"mount": func() (unix.Errno, error) {
			return errnoOf(unix.Mount("none", "/nonexistent/airlock-seccomp-test", "tmpfs", 0, ""))
		},
		// Without the filter this fails with EINVAL: a multithreaded
		// process cannot enter a new user namespace.
		"unshare-newuser": func() (unix.Errno, error) {
			return errnoOf(unix.Unshare(unix.CLONE_NEWUSER))
		},
		// Only affects the calling thread, which is locked and dies with
		// the process.
		"unshare-files": func() (unix.Errno, error) {
			return errnoOf(unix.Unshare(unix.CLONE_FILES))
		},
		// Without the filter, NULL args fail with EINVAL.
		"clone3": func() (unix.Errno, error) {
			_, _, errno := unix.RawSyscall(unix.SYS_CLONE3, 0, 0, 0)
			return errno, nil
		},
		// Go's os/exec uses clone(CLONE_VM|CLONE_VFORK|...); the shell
		// forks through libc.
		"fork-exec": func() (unix.Errno, error) {
			if out, err := exec.Command("/bin/true").CombinedOutput(); err != nil {
				return 0, fmt.Errorf("/bin/true: %v: %s", err, out)
			}
			if out, err := exec.Command("/bin/sh", "-c", "/bin/true; /bin/true").CombinedOutput(); err != nil {
				return 0, fmt.Errorf("/bin/sh: %v: %s", err, out)
			}
			return 0, nil
		},
		// glibc's pthread_create and posix_spawn try clone3 first and must
		// fall back to clone on ENOSYS.
		"libc-threads": func() (unix.Errno, error) {
			out, err := exec.Command(os.Getenv(envPython), "-c", pythonThreads).CombinedOutput()
			if err != nil {
				return 0, fmt.Errorf("python: %v: %s", err, out)
			}
			return 0, nil
		},
		"keyctl": func() (unix.Errno, error) {
			_, err := unix.KeyctlInt(unix.KEYCTL_GET_KEYRING_ID, unix.KEY_SPEC_SESSION_KEYRING, 0, 0, 0)
			return errnoOf(err)
		},
		// An invalid command: EINVAL without the filter.
		"bpf": func() (unix.Errno, error) {
			_, _, errno := unix.Syscall(unix.SYS_BPF, 0xffff, 0, 0)
			return errno, nil
		},
		"ptrace-traceme": func() (unix.Errno, error) {
			_, _, errno := unix.RawSyscall6(unix.SYS_PTRACE, unix.PTRACE_TRACEME, 0, 0, 0, 0, 0)
			return errno, nil
		},
		// Harmless when allowed: ESRCH.
		"ptrace-peekuser": func() (unix.Errno, error) {
			_, _, errno := unix.RawSyscall6(unix.SYS_PTRACE, unix.PTRACE_PEEKUSR, noSuchPID, 0, 0, 0, 0)
			return errno, nil
		},
		// Reads this process's own memory, which needs no privilege.
		"process-vm-readv": func() (unix.Errno, error) {
			src, dst := []byte("airlock"), make([]byte, 7)
			_, err := unix.ProcessVMReadv(os.Getpid(),
				[]unix.Iovec{{Base: &dst[0], Len: uint64(len(dst))}},
				[]unix.RemoteIovec{{Base: uintptr(unsafe.Pointer(&src[0])), Len: len(src)}}, 0)
			if err == nil && string(dst) != string(src) {
				return 0, fmt.Errorf("process_vm_readv read %q", dst)
			}
			return errnoOf(err)
		},
		"personality-addr-no-randomize": func() (unix.Errno, error) {
			_, _, errno := unix.RawSyscall(unix.SYS_PERSONALITY, 0x0040000, 0, 0)
			return errno, nil
		},
		"personality-query": func() (unix.Errno, error) {
			_, _, errno := unix.RawSyscall(unix.SYS_PERSONALITY, 0xffffffff, 0, 0)
			return errno, nil
		},
		// The parent gives the child /dev/null as stdin, so without the
		// filter these fail with ENOTTY and never reach a terminal.
		"ioctl-tiocsti": func() (unix.Errno, error) {
			c := byte('x')
			_, _, errno := unix.Syscall(unix.SYS_IOCTL, 0, unix.TIOCSTI, uintptr(unsafe.Pointer(&c)))
			return errno, nil
		},
		"ioctl-tioclinux": func() (unix.Errno, error) {
			c := byte(0)
			_, _, errno := unix.Syscall(unix.SYS_IOCTL, 0, unix.TIOCLINUX, uintptr(unsafe.Pointer(&c)))
			return errno, nil
		},
		// The socket probes close what they get: without the filter most
		// of the families refused succeed here (as root, even AF_PACKET).
		"socket": func() (unix.Errno, error) {
			f, typ, proto, err := socketArgs()
			if err != nil {
				return 0, err
			}
			fd, err := unix.Socket(f, typ, proto)
			if err == nil {
				unix.Close(fd)
			}
			return errnoOf(err)
		},
		"socketpair": func() (unix.Errno, error) {
			f, typ, proto, err := socketArgs()
			if err != nil {
				return 0, err
			}
			fds, err := unix.Socketpair(f, typ, proto)
			if err == nil {
				unix.Close(fds[0])
				unix.Close(fds[1])
			}
			return errnoOf(err)
		},
		// getpid through the x32 ABI (x86_64 only).
		"x32-getpid": func() (unix.Errno, error) {
			_, _, errno := unix.RawSyscall(x32SyscallBit|unix.SYS_GETPID, 0, 0, 0)
			return errno, nil
		},
		// Every thread must be in filter mode with no_new_privs.
		"tsync": checkAllThreadsConfined,
		// The filter survives execve: a fresh copy of this binary that does
		// not install anything is still denied.
		"exec-inherits": func() (unix.Errno, error) {
			cmd := exec.Command(os.Args[0])
			cmd.Env = append(os.Environ(), envChild+"=unshare-newuser", envInstall+"=0")
			out, err := cmd.Output()
			if err != nil {
				return 0, fmt.Errorf("re-exec: %v", err)
			}
			return parseErrno(out)
		},
		// A filter the kernel must reject: a load outside seccomp_data.
		// (no_new_privs first, or the kernel answers EACCES before looking.)
		"install-invalid": func() (unix.Errno, error) {
			if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
				return 0, err
			}
			bad := []unix.SockFilter{
				{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 1000},
				{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW},
			}
			return errnoOf(Install(bad))
		},
		// Without no_new_privs and CAP_SYS_ADMIN the kernel refuses.
		"install-no-nnp": func() (unix.Errno, error) {
			if err := dropSysAdmin(); err != nil {
				return 0, err
			}
			filter, err := Build(DefaultProfile())
			if err != nil {
				return 0, err
			}
			return errnoOf(Install(filter))
		},
		"tsync-conflict": installWithConflictingThread,
	}
}

// pythonThreads starts a thread (pthread_create) and a subprocess.
const pythonThreads = `
import subprocess, threading
t = threading.Thread(target=lambda: None)
t.start()
t.join()
subprocess.run(["/bin/true"], check=True)
`

func TestMain(m *testing.M) {
	if name := os.Getenv(envChild); name != "" {
		os.Exit(runChild(name))
	}
	os.Exit(m.Run())
}

// runChild is the body of a child process. It returns the exit code.
func runChild(name string) int {
	// Stay on one OS thread: no_new_privs may be set on this thread only,
	// and unshare(CLONE_FILES) must not leak to other goroutines.
	runtime.LockOSThread()

	p, ok := probes()[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "unknown probe %q\n", name)
		return 2
	}
	if os.Getenv(envInstall) != "0" {
		// Park a few goroutines on their own threads so that TSYNC has
		// threads other than the runtime's to synchronize.
		for range 3 {
			go func() {
				runtime.LockOSThread()
				select {}
			}()
		}
		if err := setNoNewPrivs(os.Getenv(envNNP) == "thread"); err != nil {
			fmt.Fprintf(os.Stderr, "no_new_privs: %v\n", err)
			return 2
		}
		profile := DefaultProfile()
		if os.Getenv(envProfile) == "ptrace" {
			profile.AllowPtrace = true
		}
		filter, err := Build(profile)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		if err := Install(filter); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
	}
	errno, err := p()
	if err != nil {
		fmt.Fprintf(os.Stderr, "probe %s: %v\n", name, err)
		return 3
	}
	fmt.Printf("errno=%d\n", int(errno))
	return 0
}

// setNoNewPrivs sets no_new_privs on all threads if it can, else (cgo
// binaries, or threadOnly) on the calling thread.
func setNoNewPrivs(threadOnly bool) error {
	if !threadOnly {
		_, _, errno := syscall.AllThreadsSyscall(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0)
		if errno != syscall.ENOTSUP {
			return errnoOrNil(errno)
		}
	}
	return unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
}

func errnoOrNil(errno syscall.Errno) error {
	if errno == 0 {
		return nil
	}
	return errno
}

// checkAllThreadsConfined reads the status of every thread of the process.
func checkAllThreadsConfined() (unix.Errno, error) {
	tasks, err := filepath.Glob("/proc/self/task/*/status")
	if err != nil {
		return 0, err
	}
	if len(tasks) < 4 {
		return 0, fmt.Errorf("only %d threads; TSYNC was not exercised", len(tasks))
	}
	for _, status := range tasks {
		b, err := os.ReadFile(status)
		if err != nil {
			return 0, err
		}
		s := string(b)
		if !strings.Contains(s, "\nNoNewPrivs:\t1\n") || !strings.Contains(s, "\nSeccomp:\t2\n") {
			return 0, fmt.Errorf("%s: thread is not confined:\n%s", status, s)
		}
	}
	return 0, nil
}

// dropSysAdmin removes CAP_SYS_ADMIN from the calling thread's effective set
// (capabilities are per thread).
func dropSysAdmin() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	data[unix.CAP_SYS_ADMIN/32].Effective &^= 1 << (unix.CAP_SYS_ADMIN % 32)
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}

// installWithConflictingThread gives one thread a filter of its own (without
// TSYNC) and then expects Install from another thread to fail with a
// ThreadSyncError naming it.
func installWithConflictingThread() (unix.Errno, error) {
	type result struct {
		tid int
		err error
	}
	done := make(chan result)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread keeps its filter
		allowAll := []unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW}}
		prog := unix.SockFprog{Len: 1, Filter: &allowAll[0]}
		err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
		if err == nil {
			_, _, errno := unix.Syscall(unix.SYS_PRCTL, unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER,
				uintptr(unsafe.Pointer(&prog)))
			err = errnoOrNil(errno)
		}
		done <- result{unix.Gettid(), err}
		select {}
	}()
	other := <-done
	if other.err != nil {
		return 0, fmt.Errorf("per-thread filter: %w", other.err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return 0, err
	}
	filter, err := Build(DefaultProfile())
	if err != nil {
		return 0, err
	}
	err = Install(filter)
	var syncErr *ThreadSyncError
	if !errors.As(err, &syncErr) {
		return 0, fmt.Errorf("Install = %v, want a ThreadSyncError", err)
	}
	if syncErr.TID != other.tid {
		return 0, fmt.Errorf("ThreadSyncError names thread %d, want %d", syncErr.TID, other.tid)
	}
	return 0, nil
}

// parseErrno finds the "errno=N" line in a child's output.
func parseErrno(out []byte) (unix.Errno, error) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "errno="); ok {
			n, err := strconv.Atoi(v)
			return unix.Errno(n), err
		}
	}
	return 0, fmt.Errorf("no errno line in child output %q", out)
}

// socketArgs reads the socket probes' arguments from envSocket.
func socketArgs() (family, typ, proto int, err error) {
	_, err = fmt.Sscanf(os.Getenv(envSocket), "%d %d %d", &family, &typ, &proto)
	if err != nil {
		err = fmt.Errorf("%s=%q: %w", envSocket, os.Getenv(envSocket), err)
	}
	return family, typ, proto, err
}

// runProbe runs probe in a child process with extra environment variables.
func runProbe(t *testing.T, probe string, env ...string) unix.Errno {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), envChild+"="+probe)
	// Race-enabled binaries otherwise sleep a second at exit.
	cmd.Env = append(cmd.Env, "GORACE=atexit_sleep_ms=0 "+os.Getenv("GORACE"))
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr // stdin stays /dev/null
	if err := cmd.Run(); err != nil {
		t.Fatalf("child %s: %v\nstdout: %s\nstderr: %s", probe, err, &stdout, &stderr)
	}
	errno, err := parseErrno(stdout.Bytes())
	if err != nil {
		t.Fatalf("child %s: %v\nstderr: %s", probe, err, &stderr)
	}
	return errno
}

func requireSeccomp(t *testing.T) {
	t.Helper()
	if ok, reason := Supported(); !ok {
		t.Skip("seccomp filters unsupported: " + reason)
	}
	if _, err := nativeArch(); err != nil {
		t.Skip(err)
	}
}

func errnoName(e unix.Errno) string {
	if e == 0 {
		return "success"
	}
	if name := unix.ErrnoName(e); name != "" {
		return name
	}
	return strconv.Itoa(int(e))
}

type probeCase struct {
	probe string
	env   []string
	want  unix.Errno
}

func runCases(t *testing.T, cases []probeCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(strings.Join(append([]string{tc.probe}, tc.env...), ","), func(t *testing.T) {
			t.Parallel()
			if got := runProbe(t, tc.probe, tc.env...); got != tc.want {
				t.Errorf("%s = %s, want %s", tc.probe, errnoName(got), errnoName(tc.want))
			}
		})
	}
}

func TestSupported(t *testing.T) {
	ok, reason := Supported()
	t.Logf("Supported() = %v, %q", ok, reason)
	if ok && reason != "" {
		t.Errorf("reason %q given although supported", reason)
	}
	if !ok && reason == "" {
		t.Error("no reason given for missing support")
	}
}

func TestInstallDefaultProfile(t *testing.T) {
	requireSeccomp(t)
	cases := []probeCase{
		{probe: "getpid", want: 0},
		{probe: "mount", want: unix.EPERM},
		{probe: "unshare-newuser", want: unix.EPERM},
		{probe: "unshare-files", want: 0},
		{probe: "clone3", want: unix.ENOSYS},
		{probe: "fork-exec", want: 0},
		{probe: "keyctl", want: unix.EPERM},
		{probe: "bpf", want: unix.EPERM},
		{probe: "ptrace-traceme", want: unix.EPERM},
		{probe: "ptrace-peekuser", want: unix.EPERM},
		{probe: "process-vm-readv", want: unix.EPERM},
		{probe: "personality-addr-no-randomize", want: unix.EPERM},
		{probe: "personality-query", want: 0},
		{probe: "ioctl-tiocsti", want: unix.EPERM},
		{probe: "ioctl-tioclinux", want: unix.EPERM},
		{probe: "exec-inherits", want: unix.EPERM},
	}
	if runtime.GOARCH == "amd64" {
		cases = append(cases, probeCase{probe: "x32-getpid", want: unix.EPERM})
	}
	runCases(t, cases)
}

func TestInstallAllowPtrace(t *testing.T) {
	requireSeccomp(t)
	ptrace := envProfile + "=ptrace"
	runCases(t, []probeCase{
		{probe: "ptrace-peekuser", env: []string{ptrace}, want: unix.ESRCH},
		{probe: "process-vm-readv", env: []string{ptrace}, want: 0},
		{probe: "mount", env: []string{ptrace}, want: unix.EPERM},
	})
}

// TestInstallSocketFamilies creates sockets of many families under the
// real filter: the allowed ones work, every other one is refused as if the
// kernel did not have it.
func TestInstallSocketFamilies(t *testing.T) {
	requireSeccomp(t)
	arg := func(family, typ, proto int) string { return fmt.Sprintf("%s=%d %d %d", envSocket, family, typ, proto) }
	var cases []probeCase
	for _, c := range []struct {
		family, typ, proto int
		want               unix.Errno
	}{
		{unix.AF_UNIX, unix.SOCK_STREAM, 0, 0},
		{unix.AF_UNIX, unix.SOCK_DGRAM | unix.SOCK_CLOEXEC, 0, 0},
		{unix.AF_INET, unix.SOCK_STREAM, 0, 0},
		{unix.AF_INET, unix.SOCK_DGRAM | unix.SOCK_NONBLOCK, 0, 0},
		{unix.AF_INET6, unix.SOCK_STREAM, 0, 0},
		{unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE, 0},
		{unix.AF_NETLINK, unix.SOCK_RAW | unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG, 0},
		{unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_AUDIT, unix.EPROTONOSUPPORT},
		{unix.AF_NETLINK, unix.SOCK_DGRAM, unix.NETLINK_KOBJECT_UEVENT, unix.EPROTONOSUPPORT},
		{unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_GENERIC, unix.EPROTONOSUPPORT},
		{unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_NETFILTER, unix.EPROTONOSUPPORT},
		{unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_XFRM, unix.EPROTONOSUPPORT},
		{unix.AF_VSOCK, unix.SOCK_STREAM, 0, unix.EAFNOSUPPORT},
		{unix.AF_VSOCK, unix.SOCK_DGRAM, 0, unix.EAFNOSUPPORT},
		{unix.AF_PACKET, unix.SOCK_RAW, 0x0300, unix.EAFNOSUPPORT},
		{unix.AF_PACKET, unix.SOCK_DGRAM, 0, unix.EAFNOSUPPORT},
		{unix.AF_INET, unix.SOCK_PACKET, 0x0300, unix.EAFNOSUPPORT},
		{unix.AF_ALG, unix.SOCK_SEQPACKET, 0, unix.EAFNOSUPPORT},
		{unix.AF_XDP, unix.SOCK_RAW, 0, unix.EAFNOSUPPORT},
		{unix.AF_KEY, unix.SOCK_RAW, 2, unix.EAFNOSUPPORT},
		{unix.AF_BLUETOOTH, unix.SOCK_RAW, 0, unix.EAFNOSUPPORT},
		{unix.AF_TIPC, unix.SOCK_RDM, 0, unix.EAFNOSUPPORT},
		{unix.AF_RDS, unix.SOCK_SEQPACKET, 0, unix.EAFNOSUPPORT},
		{unix.AF_CAN, unix.SOCK_RAW, 1, unix.EAFNOSUPPORT},
		{unix.AF_QIPCRTR, unix.SOCK_DGRAM, 0, unix.EAFNOSUPPORT},
		{unix.AF_SMC, unix.SOCK_STREAM, 0, unix.EAFNOSUPPORT},
		{unix.AF_LLC, unix.SOCK_DGRAM, 0, unix.EAFNOSUPPORT},
		{unix.AF_PPPOX, unix.SOCK_STREAM, 0, unix.EAFNOSUPPORT},
		{unix.AF_MCTP, unix.SOCK_DGRAM, 0, unix.EAFNOSUPPORT},
		{unix.AF_IB, unix.SOCK_DGRAM, 0, unix.EAFNOSUPPORT},
		{63, unix.SOCK_STREAM, 0, unix.EAFNOSUPPORT},
	} {
		cases = append(cases, probeCase{probe: "socket", env: []string{arg(c.family, c.typ, c.proto)}, want: c.want})
	}
	cases = append(cases,
		probeCase{probe: "socketpair", env: []string{arg(unix.AF_UNIX, unix.SOCK_STREAM, 0)}, want: 0},
		probeCase{probe: "socketpair", env: []string{arg(unix.AF_VSOCK, unix.SOCK_STREAM, 0)}, want: unix.EAFNOSUPPORT},
		probeCase{probe: "socketpair", env: []string{arg(unix.AF_PACKET, unix.SOCK_RAW, 0)}, want: unix.EAFNOSUPPORT},
		probeCase{probe: "socketpair", env: []string{arg(unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_AUDIT)}, want: unix.EPROTONOSUPPORT},
	)
	runCases(t, cases)
}

// TestKernelAcceptsFilter installs both profiles, through both ways of
// setting no_new_privs.
func TestKernelAcceptsFilter(t *testing.T) {
	requireSeccomp(t)
	var cases []probeCase
	for _, profile := range []string{"default", "ptrace"} {
		for _, nnp := range []string{"all", "thread"} {
			cases = append(cases, probeCase{
				probe: "tsync",
				env:   []string{envProfile + "=" + profile, envNNP + "=" + nnp},
			})
		}
	}
	runCases(t, cases)
}

func TestInstallErrors(t *testing.T) {
	if err := Install(nil); err == nil {
		t.Error("Install(nil) succeeded")
	}
	if err := Install(make([]unix.SockFilter, maxInsns+1)); err == nil {
		t.Error("Install of an oversized filter succeeded")
	}
	requireSeccomp(t)
	noInstall := envInstall + "=0"
	runCases(t, []probeCase{
		{probe: "install-invalid", env: []string{noInstall}, want: unix.EINVAL},
		{probe: "install-no-nnp", env: []string{noInstall}, want: unix.EACCES},
		{probe: "tsync-conflict", env: []string{noInstall}, want: 0},
	})
}

// TestLibcFallsBackToClone runs a glibc program that creates a thread and a
// process under the filter: glibc >= 2.34 tries clone3 first.
func TestLibcFallsBackToClone(t *testing.T) {
	requireSeccomp(t)
	python, err := exec.LookPath("python3")
	if err == nil {
		err = exec.Command(python, "-c", pythonThreads).Run()
	}
	if err != nil {
		t.Skipf("no working python3: %v", err)
	}
	runCases(t, []probeCase{{probe: "libc-threads", env: []string{envPython + "=" + python}}})
}
