//go:build linux

package redteam_test

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock"
)

// kernelProbe is one system call that hostile code would use to reach
// past the boundary, made with arguments that would succeed (or fail
// with a different errno) were the call let through, so that only a real
// refusal passes.
type kernelProbe struct {
	class string // what the attacker is after
	name  string
	nr    uintptr
	args  string // python arguments after the number (see pyCall)
	want  []syscall.Errno
}

var (
	denied  = []syscall.Errno{syscall.EPERM, syscall.ENOSYS}
	noClone = []syscall.Errno{syscall.ENOSYS}
)

// pyCall defines call(nr, *args) for the probes: integers travel as C
// longs, bytes as pointers, None as NULL; buf(n) is a zeroed buffer.
const pyCall = pyLibc + `
def call(nr, *a):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(x) if isinstance(x, int) else x for x in a])
    if r == 0 and nr in forks:
        os._exit(0)  # a clone that got through: the child leaves at once
    return r, ctypes.get_errno()
def buf(n): return ctypes.create_string_buffer(n)
def u32s(*v): return buf(0) if not v else ctypes.create_string_buffer(b"".join(x.to_bytes(4, "little") for x in v) + bytes(128))
`

// kernelProbes are the attacks on the kernel's surface that every level
// must refuse. The arguments are chosen so that an allowed call would
// succeed: a refusal by missing capabilities alone would not be told
// apart from a refusal by the filter, so where a call needs no privilege
// that is what is asked.
func kernelProbes() []kernelProbe {
	const (
		keySpecProcess = -2
		uffdUserOnly   = 1
		syslogSize     = 10
		openTreeClone  = 1
	)
	p := []kernelProbe{
		{"kernel code", "kexec_load", unix.SYS_KEXEC_LOAD, "0, 0, None, 0", denied},
		{"kernel code", "kexec_file_load", unix.SYS_KEXEC_FILE_LOAD, "-1, -1, 0, b'', 0", denied},
		{"kernel code", "init_module", unix.SYS_INIT_MODULE, "None, 0, b''", denied},
		{"kernel code", "finit_module", unix.SYS_FINIT_MODULE, "-1, b'', 0", denied},
		{"kernel code", "delete_module", unix.SYS_DELETE_MODULE, "b'loop', 0", denied},
		// An array map of one 4-byte entry: unprivileged bpf would make it.
		{"bpf", "bpf(BPF_MAP_CREATE)", unix.SYS_BPF, "0, u32s(2, 4, 4, 1), 72", denied},
		{"bpf", "bpf(BPF_PROG_LOAD)", unix.SYS_BPF, "5, buf(128), 128", denied},
		// A software clock counter of this process, which an
		// unprivileged caller may open at paranoia <= 2.
		{"perf", "perf_event_open", unix.SYS_PERF_EVENT_OPEN, "u32s(1, 128), 0, -1, -1, 0", denied},
		{"userfaultfd", "userfaultfd(UFFD_USER_MODE_ONLY)", unix.SYS_USERFAULTFD, fmt.Sprint(uffdUserOnly), denied},
		{"keyrings", "add_key", unix.SYS_ADD_KEY, fmt.Sprintf("b'user', b'airlock', b'v', 1, %d", keySpecProcess), denied},
		{"keyrings", "keyctl(GET_KEYRING_ID)", unix.SYS_KEYCTL, fmt.Sprintf("0, %d, 1", keySpecProcess), denied},
		{"keyrings", "request_key", unix.SYS_REQUEST_KEY, "b'user', b'airlock', None, 0", denied},
		{"io_uring", "io_uring_setup", unix.SYS_IO_URING_SETUP, "4, buf(120)", denied},
		{"io_uring", "io_uring_enter", unix.SYS_IO_URING_ENTER, "-1, 0, 0, 0, None, 0", denied},
		{"io_uring", "io_uring_register", unix.SYS_IO_URING_REGISTER, "-1, 0, None, 0", denied},
		{"mounts", "mount(tmpfs)", unix.SYS_MOUNT, "b'none', b'/mnt', b'tmpfs', 0, None", denied},
		{"mounts", "mount(bind /)", unix.SYS_MOUNT, "b'/', b'/mnt', None, 0x1000, None", denied},
		{"mounts", "umount2(/proc)", unix.SYS_UMOUNT2, "b'/proc', 2", denied},
		{"mounts", "pivot_root", unix.SYS_PIVOT_ROOT, "b'/', b'/'", denied},
		{"mounts", "chroot", unix.SYS_CHROOT, "b'/tmp'", denied},
		{"mounts", "fsopen(tmpfs)", unix.SYS_FSOPEN, "b'tmpfs', 0", denied},
		{"mounts", "fsconfig", unix.SYS_FSCONFIG, "-1, 0, None, None, 0", denied},
		{"mounts", "fsmount", unix.SYS_FSMOUNT, "-1, 0, 0", denied},
		{"mounts", "fspick", unix.SYS_FSPICK, "-100, b'/', 0", denied},
		// Without OPEN_TREE_CLONE, open_tree needs no privilege at all.
		{"mounts", "open_tree(/)", unix.SYS_OPEN_TREE, "-100, b'/', 0", denied},
		{"mounts", "open_tree(/, CLONE)", unix.SYS_OPEN_TREE, fmt.Sprintf("-100, b'/', %d", openTreeClone), denied},
		{"mounts", "move_mount", unix.SYS_MOVE_MOUNT, "-1, b'', -1, b'', 0", denied},
		{"mounts", "mount_setattr", unix.SYS_MOUNT_SETATTR, "-100, b'/', 0, buf(32), 32", denied},
		{"namespaces", "setns", unix.SYS_SETNS, "-1, 0", denied},
		{"namespaces", "clone3", unix.SYS_CLONE3, "buf(88), 88", noClone},
		{"file handles", "open_by_handle_at", unix.SYS_OPEN_BY_HANDLE_AT, "-100, buf(136), 0", denied},
		{"file handles", "name_to_handle_at(/)", unix.SYS_NAME_TO_HANDLE_AT, "-100, b'/', u32s(128), buf(8), 0", denied},
		{"host state", "acct", unix.SYS_ACCT, "None", denied},
		{"host state", "swapon", unix.SYS_SWAPON, "b'/tmp', 0", denied},
		{"host state", "swapoff", unix.SYS_SWAPOFF, "b'/tmp'", denied},
		{"host state", "reboot", unix.SYS_REBOOT, "0, 0, 0, None", denied},
		{"host state", "syslog(SIZE_BUFFER)", unix.SYS_SYSLOG, fmt.Sprintf("%d, None, 0", syslogSize), denied},
		{"host state", "settimeofday(NULL, NULL)", unix.SYS_SETTIMEOFDAY, "None, None", denied},
		{"host state", "clock_settime", unix.SYS_CLOCK_SETTIME, "0, buf(16)", denied},
		// modes 0 only reads the clock's state: allowed, it would succeed.
		{"host state", "adjtimex(read)", unix.SYS_ADJTIMEX, "buf(208)", denied},
		{"host state", "clock_adjtime(read)", unix.SYS_CLOCK_ADJTIME, "0, buf(208)", denied},
		{"host state", "sethostname", unix.SYS_SETHOSTNAME, "b'evil', 4", denied},
		{"host state", "vhangup", unix.SYS_VHANGUP, "", denied},
		{"host state", "fanotify_init", unix.SYS_FANOTIFY_INIT, "0, 0", denied},
		// personality flags that weaken the address space.
		{"personality", "personality(READ_IMPLIES_EXEC)", unix.SYS_PERSONALITY, "0x0400000", denied},
		{"personality", "personality(ADDR_NO_RANDOMIZE)", unix.SYS_PERSONALITY, "0x0040000", denied},
		{"ptrace", "ptrace(TRACEME)", unix.SYS_PTRACE, "0, 0, 0, 0", denied},
		{"ptrace", "ptrace(ATTACH, 1)", unix.SYS_PTRACE, "16, 1, 0, 0", denied},
		{"ptrace", "ptrace(SEIZE, 1)", unix.SYS_PTRACE, "0x4206, 1, 0, 0", denied},
		// Reading one's own memory would succeed if the call were allowed.
		{"ptrace", "process_vm_readv(self)", unix.SYS_PROCESS_VM_READV, "os.getpid(), iov, 1, iov2, 1, 0", denied},
	}
	for _, f := range []struct {
		name string
		flag int
	}{
		{"user", unix.CLONE_NEWUSER}, {"mount", unix.CLONE_NEWNS}, {"net", unix.CLONE_NEWNET},
		{"pid", unix.CLONE_NEWPID}, {"uts", unix.CLONE_NEWUTS}, {"ipc", unix.CLONE_NEWIPC},
		{"cgroup", unix.CLONE_NEWCGROUP}, {"time", unix.CLONE_NEWTIME},
	} {
		p = append(p, kernelProbe{"namespaces", "unshare(" + f.name + ")", unix.SYS_UNSHARE, strconv.Itoa(f.flag), denied})
	}
	// clone with a namespace flag, as a fork would: SIGCHLD, no stack.
	p = append(p, kernelProbe{"namespaces", "clone(NEWUSER)", unix.SYS_CLONE, strconv.Itoa(unix.CLONE_NEWUSER|int(unix.SIGCHLD)) + ", 0, None, None, 0", denied})
	return append(p, archKernelProbes()...)
}

// TestAttackKernelSurface makes every call of kernelProbes from inside
// a sandbox, in one python process, and checks that each was refused
// with the errno the defence gives.
func TestAttackKernelSurface(t *testing.T) {
	t.Parallel()
	probes := kernelProbes()
	var prog strings.Builder
	prog.WriteString(pyCall)
	fmt.Fprintf(&prog, "forks = {%d, %d}\n", unix.SYS_CLONE, unix.SYS_CLONE3)
	prog.WriteString(`class IOV(ctypes.Structure): _fields_ = [("b", ctypes.c_void_p), ("n", ctypes.c_size_t)]
mem = buf(8); iov = IOV(ctypes.cast(mem, ctypes.c_void_p), 8); iov2 = IOV(ctypes.cast(mem, ctypes.c_void_p), 8)
iov, iov2 = ctypes.byref(iov), ctypes.byref(iov2)
`)
	for i, p := range probes {
		fmt.Fprintf(&prog, "r, e = call(%d%s); print(%d, r, e, flush=True)\n", p.nr, prefixComma(p.args), i)
	}
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		sb := box(t, lv, airlock.Config{})
		out := py(t, sb, prog.String())
		seen := map[int]bool{}
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Fields(l)
			if len(f) != 3 {
				t.Errorf("unexpected line %q", l)
				continue
			}
			i, _ := strconv.Atoi(f[0])
			if i < 0 || i >= len(probes) || seen[i] {
				t.Errorf("unexpected line %q", l)
				continue
			}
			seen[i] = true
			r, _ := strconv.ParseInt(f[1], 10, 64)
			e, _ := strconv.Atoi(f[2])
			p := probes[i]
			refused(t, p.class+": "+p.name, r, syscall.Errno(e), p.want...)
		}
		if len(seen) != len(probes) {
			t.Errorf("%d of %d probes reported:\n%s", len(seen), len(probes), out)
		}
	})
}

func prefixComma(s string) string {
	if s == "" {
		return ""
	}
	return ", " + s
}

// TestAttackTerminalInjection tries to push input into the sandbox's own
// terminal, which a reader outside (the user's shell, via the PTY) would
// then execute.
func TestAttackTerminalInjection(t *testing.T) {
	t.Parallel()
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		sb := box(t, lv, airlock.Config{})
		for _, req := range []struct {
			name string
			nr   uint
		}{{"TIOCSTI", unix.TIOCSTI}, {"TIOCLINUX", unix.TIOCLINUX}} {
			res := run(t, sb, airlock.Command{TTY: true, Argv: []string{"python3", "-c", fmt.Sprintf(pyLibc+`
c = ctypes.c_char(b"x")
r = libc.ioctl(0, ctypes.c_ulong(%d), ctypes.byref(c)); print(r, ctypes.get_errno())`, req.nr)}})
			f := strings.Fields(string(res.Stdout))
			if len(f) != 2 {
				t.Fatalf("%s probe printed %q %q", req.name, res.Stdout, res.Stderr)
			}
			r, _ := strconv.ParseInt(f[0], 10, 64)
			e, _ := strconv.Atoi(f[1])
			refused(t, "ioctl("+req.name+") on the sandbox's terminal", r, syscall.Errno(e), syscall.EPERM, syscall.EIO, syscall.ENOTTY, syscall.EINVAL)
			if req.nr == unix.TIOCSTI && r != -1 {
				t.Errorf("TIOCSTI injected input")
			}
		}
	})
}
