package seccomp

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Profile describes what to deny.
type Profile struct {
	// AllowPtrace permits ptrace/process_vm_readv/process_vm_writev
	// (default false: denied).
	AllowPtrace bool
}

// DefaultProfile returns the default profile.
func DefaultProfile() Profile {
	return Profile{}
}

// Offsets into struct seccomp_data, which the kernel hands to the filter:
//
//	struct seccomp_data {
//		int   nr;                  // offset 0
//		__u32 arch;                // offset 4
//		__u64 instruction_pointer; // offset 8
//		__u64 args[6];             // offset 16
//	};
//
// Loads are 32-bit and in native byte order. Both supported architectures
// are little-endian, so the low half of args[i] is at 16+8*i.
const (
	offNr   = 0
	offArch = 4
)

// argLow returns the offset of the low 32 bits of syscall argument i.
func argLow(i uint32) uint32 { return 16 + 8*i }

// x32SyscallBit marks x32 ABI syscalls on x86_64 (__X32_SYSCALL_BIT). They
// arrive with AUDIT_ARCH_X86_64, so the arch check alone does not catch them.
const x32SyscallBit = 0x40000000

// nsFlags are the clone/unshare flags that create namespaces.
//
// CLONE_NEWTIME (0x80) overlaps CSIGNAL, the exit-signal byte of clone(2)'s
// flags, so for clone the bit really means "exit signal >= 128". No such
// signal exists, so denying it costs nothing; for unshare it is a real flag.
const nsFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET |
	unix.CLONE_NEWCGROUP | unix.CLONE_NEWTIME

// allowedPersonalities are the personality(2) arguments that are permitted:
// PER_LINUX, PER_LINUX_32BIT, PER_LINUX|UNAME26, PER_LINUX_32BIT|UNAME26
// and 0xffffffff, which only queries the current persona. Everything else,
// notably ADDR_NO_RANDOMIZE and READ_IMPLIES_EXEC, is denied.
var allowedPersonalities = [...]uint32{0x0, 0x8, 0x20000, 0x20008, 0xffffffff}

// deniedIoctls are ioctl requests that inject input into a terminal.
var deniedIoctls = [...]uint32{unix.TIOCSTI, unix.TIOCLINUX}

// Socket families that socket(2) and socketpair(2) may create; every
// other one fails with EAFNOSUPPORT, as if the kernel had not been built
// with it. It is an allow-list, so that a family a newer kernel adds, or
// one this host happens to offer (AF_VSOCK to the hypervisor on a VM,
// AF_PACKET, AF_ALG, AF_XDP, AF_BLUETOOTH, AF_RDS, AF_TIPC, ...), stays
// out of reach.
//
//   - AF_UNIX: local IPC, scoped to the sandbox by its mount namespace and
//     landlock.
//   - AF_INET, AF_INET6: the sandbox's own network namespace, which holds
//     loopback and at most the one interface that ends in the host's
//     policy stack. Loopback is allowed without a network too: local
//     servers and their tests, and libc's resolver, need it, and it
//     reaches nothing outside the namespace. The obsolete
//     (AF_INET, SOCK_PACKET), which the kernel turns into AF_PACKET, is
//     refused like AF_PACKET.
//   - AF_NETLINK: only the protocols in allowedNetlink.
var allowedFamilies = [...]uint32{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK}

// allowedNetlink are the netlink protocols a sandbox may open; others fail
// with EPROTONOSUPPORT. Both answer only about the sandbox's own network
// namespace:
//
//   - NETLINK_ROUTE: addresses, links and routes (ip addr, ip route, libc's
//     getifaddrs, if_nameindex and getaddrinfo's AI_ADDRCONFIG);
//   - NETLINK_SOCK_DIAG: socket listings (ss).
//
// Refused, among others: NETLINK_AUDIT and NETLINK_KOBJECT_UEVENT (host-wide
// audit records and device events), NETLINK_NETFILTER and NETLINK_XFRM
// (packet filter and IPsec configuration parsers, a common source of
// kernel bugs reachable from a user namespace), NETLINK_GENERIC (the
// multiplexer behind dozens of subsystems: nl80211, devlink, ethtool,
// taskstats, wireguard, MPTCP, ...; nothing a sandbox with at most one
// virtual interface needs), NETLINK_CONNECTOR (process events) and
// NETLINK_CRYPTO (AF_ALG's configuration).
var allowedNetlink = [...]uint32{unix.NETLINK_ROUTE, unix.NETLINK_SOCK_DIAG}

// sockTypeMask selects the socket type in socket(2)'s type argument, whose
// high bits carry SOCK_NONBLOCK and SOCK_CLOEXEC.
const sockTypeMask = 0xf

// Filter return values.
const (
	retAllow  = unix.SECCOMP_RET_ALLOW
	retEPERM  = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	retENOSYS = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	retKill   = unix.SECCOMP_RET_KILL_PROCESS

	retEAFNOSUPPORT    = unix.SECCOMP_RET_ERRNO | uint32(unix.EAFNOSUPPORT)
	retEPROTONOSUPPORT = unix.SECCOMP_RET_ERRNO | uint32(unix.EPROTONOSUPPORT)
)

// syscallNr is one entry of a syscall table.
type syscallNr struct {
	name string
	nr   uint32
}

// archSpec holds the architecture-specific inputs of the filter.
type archSpec struct {
	auditArch uint32      // AUDIT_ARCH_* value of the native ABI
	x32       bool        // deny nr >= x32SyscallBit (x86_64 only)
	deny      []syscallNr // always EPERM
	ptrace    []syscallNr // EPERM unless Profile.AllowPtrace

	// Syscalls with special handling. Neither supported architecture has
	// socketcall(2) in its native table (on x86_64 it exists only for the
	// i386 ABI, which the architecture check kills), so socket and
	// socketpair are the only ways to create a socket of a new family.
	clone, clone3, unshare, personality, ioctl, socket, socketpair uint32
}

// Build assembles the filter for the running architecture (amd64 and arm64
// are supported; others return an error wrapping errors.ErrUnsupported).
func Build(p Profile) ([]unix.SockFilter, error) {
	a, err := nativeArch()
	if err != nil {
		return nil, err
	}
	insns, err := build(p, a)
	if err != nil {
		return nil, fmt.Errorf("seccomp: building filter: %w", err)
	}
	raw, err := bpf.Assemble(insns)
	if err != nil {
		return nil, fmt.Errorf("seccomp: assembling filter: %w", err)
	}
	out := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		out[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	return out, nil
}

// build emits the filter program. Its shape is:
//
//	ld arch; if arch != native: kill
//	ld nr
//	if nr >= x32 bit: EPERM                      (x86_64 only)
//	if nr == denied_1: EPERM ... denied_n: EPERM (one jeq each)
//	if nr == clone3: ENOSYS
//	if nr == clone or unshare: goto nsCheck
//	if nr == personality: goto personaCheck
//	if nr == ioctl: goto ioctlCheck
//	if nr == socket or socketpair: goto sockCheck
//	ALLOW (jump to the shared return)
//	nsCheck:      ld arg0; if arg0 & nsFlags: EPERM else ALLOW
//	personaCheck: ld arg0; if arg0 in allowed: ALLOW else EPERM
//	ioctlCheck:   ld arg1; if arg1 in denied: EPERM else ALLOW
//	sockCheck:    ld arg0; AF_UNIX, AF_INET6: ALLOW; AF_INET: goto inetCheck;
//	              AF_NETLINK: goto netlinkCheck; else EAFNOSUPPORT
//	inetCheck:    ld arg1; if arg1 & type mask == SOCK_PACKET: EAFNOSUPPORT else ALLOW
//	netlinkCheck: ld arg2; if arg2 in allowed: ALLOW else EPROTONOSUPPORT
//	shared returns
//
// The decision for a syscall that is always allowed depends only on arch and
// nr, which lets kernels >= 5.11 cache it in the seccomp action bitmap and
// skip running the filter for those syscalls altogether.
func build(p Profile, a archSpec) ([]bpf.Instruction, error) {
	var prog program
	allow, eperm, enosys, kill := prog.newLabel(), prog.newLabel(), prog.newLabel(), prog.newLabel()
	eafnosupport, eprotonosupport := prog.newLabel(), prog.newLabel()
	nsCheck, personaCheck, ioctlCheck := prog.newLabel(), prog.newLabel(), prog.newLabel()
	sockCheck, inetCheck, netlinkCheck := prog.newLabel(), prog.newLabel(), prog.newLabel()

	prog.emit(bpf.LoadAbsolute{Off: offArch, Size: 4})
	prog.jumpIf(bpf.JumpEqual, a.auditArch, next, kill)
	prog.emit(bpf.LoadAbsolute{Off: offNr, Size: 4})
	if a.x32 {
		prog.jumpIf(bpf.JumpGreaterOrEqual, x32SyscallBit, eperm, next)
	}
	denied := a.deny
	if !p.AllowPtrace {
		denied = slices.Concat(a.deny, a.ptrace)
	}
	for _, s := range denied {
		prog.jumpIf(bpf.JumpEqual, s.nr, eperm, next)
	}
	prog.jumpIf(bpf.JumpEqual, a.clone3, enosys, next)
	prog.jumpIf(bpf.JumpEqual, a.clone, nsCheck, next)
	prog.jumpIf(bpf.JumpEqual, a.unshare, nsCheck, next)
	prog.jumpIf(bpf.JumpEqual, a.personality, personaCheck, next)
	prog.jumpIf(bpf.JumpEqual, a.ioctl, ioctlCheck, next)
	prog.jumpIf(bpf.JumpEqual, a.socket, sockCheck, next)
	prog.jumpIf(bpf.JumpEqual, a.socketpair, sockCheck, allow)

	// clone(flags, ...) on both architectures, and unshare(flags). Only the
	// low 32 bits matter: clone truncates its flags to 32 bits, and unshare
	// rejects unknown bits with EINVAL.
	prog.place(nsCheck)
	prog.emit(bpf.LoadAbsolute{Off: argLow(0), Size: 4})
	prog.jumpIf(bpf.JumpBitsSet, nsFlags, eperm, allow)

	// personality(unsigned int persona): the high half is ignored by the kernel.
	prog.place(personaCheck)
	prog.emit(bpf.LoadAbsolute{Off: argLow(0), Size: 4})
	for i, v := range allowedPersonalities {
		els := next
		if i == len(allowedPersonalities)-1 {
			els = eperm
		}
		prog.jumpIf(bpf.JumpEqual, v, allow, els)
	}

	// ioctl(fd, unsigned int cmd, ...): the high half of cmd is ignored too.
	prog.place(ioctlCheck)
	prog.emit(bpf.LoadAbsolute{Off: argLow(1), Size: 4})
	for i, v := range deniedIoctls {
		els := next
		if i == len(deniedIoctls)-1 {
			els = allow
		}
		prog.jumpIf(bpf.JumpEqual, v, eperm, els)
	}

	// socket(int family, int type, int protocol) and socketpair with the
	// same first three arguments: the kernel reads ints, so the high
	// halves are ignored here too.
	prog.place(sockCheck)
	prog.emit(bpf.LoadAbsolute{Off: argLow(0), Size: 4})
	for _, f := range allowedFamilies {
		switch f {
		case unix.AF_INET:
			prog.jumpIf(bpf.JumpEqual, f, inetCheck, next)
		case unix.AF_NETLINK:
			prog.jumpIf(bpf.JumpEqual, f, netlinkCheck, next)
		default:
			prog.jumpIf(bpf.JumpEqual, f, allow, next)
		}
	}
	prog.jump(eafnosupport)

	prog.place(inetCheck)
	prog.emit(bpf.LoadAbsolute{Off: argLow(1), Size: 4})
	prog.emit(bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: sockTypeMask})
	prog.jumpIf(bpf.JumpEqual, unix.SOCK_PACKET, eafnosupport, allow)

	prog.place(netlinkCheck)
	prog.emit(bpf.LoadAbsolute{Off: argLow(2), Size: 4})
	for i, v := range allowedNetlink {
		els := next
		if i == len(allowedNetlink)-1 {
			els = eprotonosupport
		}
		prog.jumpIf(bpf.JumpEqual, v, allow, els)
	}

	prog.place(allow)
	prog.emit(bpf.RetConstant{Val: retAllow})
	prog.place(eperm)
	prog.emit(bpf.RetConstant{Val: retEPERM})
	prog.place(enosys)
	prog.emit(bpf.RetConstant{Val: retENOSYS})
	prog.place(kill)
	prog.emit(bpf.RetConstant{Val: retKill})
	prog.place(eafnosupport)
	prog.emit(bpf.RetConstant{Val: retEAFNOSUPPORT})
	prog.place(eprotonosupport)
	prog.emit(bpf.RetConstant{Val: retEPROTONOSUPPORT})

	return prog.resolve()
}

// ThreadSyncError is returned by Install when SECCOMP_FILTER_FLAG_TSYNC could
// not apply the filter to every thread: thread TID is already confined by a
// seccomp filter that is not an ancestor of the calling thread's filter.
type ThreadSyncError struct {
	TID int
}

func (e *ThreadSyncError) Error() string {
	return fmt.Sprintf("seccomp: installing filter: thread %d cannot be synchronized (it has a different seccomp filter)", e.TID)
}

// Install applies the filter with SECCOMP_FILTER_FLAG_TSYNC to all threads
// of the calling process. The filter stays in force for the life of the
// process and is inherited across fork, clone and execve.
//
// The kernel requires no_new_privs on the calling thread or CAP_SYS_ADMIN.
// Install does NOT set no_new_privs itself; the caller does that for all
// threads (syscall.AllThreadsSyscall with PR_SET_NO_NEW_PRIVS). If the caller
// can only set it on one thread, it must call Install from that same thread
// (runtime.LockOSThread); TSYNC then also sets no_new_privs on every thread
// it synchronizes.
func Install(filter []unix.SockFilter) error {
	if len(filter) == 0 || len(filter) > maxInsns {
		return fmt.Errorf("seccomp: installing filter: %d instructions, want 1..%d", len(filter), maxInsns)
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	r, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog)))
	runtime.KeepAlive(filter)
	switch errno {
	case 0:
	case unix.EACCES:
		return fmt.Errorf("seccomp: installing filter: %w (no_new_privs is not set on the calling thread and CAP_SYS_ADMIN is missing)", errno)
	case unix.EINVAL:
		return fmt.Errorf("seccomp: installing filter: %w (rejected by the kernel's filter checks, or TSYNC unsupported)", errno)
	case unix.ENOSYS:
		return fmt.Errorf("seccomp: installing filter: %w (kernel has no seccomp(2))", errno)
	default:
		return fmt.Errorf("seccomp: installing filter: %w", errno)
	}
	if r != 0 {
		// With TSYNC, a positive return is the TID of a thread that could
		// not be synchronized; nothing was installed.
		return &ThreadSyncError{TID: int(r)}
	}
	return nil
}

// Supported reports whether the kernel supports seccomp filters with the
// actions this package uses, with a reason when not.
func Supported() (bool, string) {
	mode, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0)
	switch {
	case errors.Is(err, unix.EINVAL):
		return false, "prctl(PR_GET_SECCOMP) failed with EINVAL: kernel built without CONFIG_SECCOMP (or an emulator that does not implement it)"
	case err != nil:
		return false, fmt.Sprintf("prctl(PR_GET_SECCOMP): %v", err)
	case mode == unix.SECCOMP_MODE_STRICT:
		return false, "process is in seccomp strict mode"
	}
	// SECCOMP_GET_ACTION_AVAIL (Linux 4.14, like SECCOMP_RET_KILL_PROCESS)
	// answers both "are filters supported" and "is this action known".
	for _, action := range [...]uint32{retKill, unix.SECCOMP_RET_ERRNO, retAllow} {
		_, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_GET_ACTION_AVAIL, 0,
			uintptr(unsafe.Pointer(&action)))
		switch errno {
		case 0:
		case unix.ENOSYS:
			return false, "seccomp(2) is not available (kernel older than 3.17?)"
		case unix.EINVAL:
			return false, "seccomp(SECCOMP_GET_ACTION_AVAIL) failed with EINVAL: kernel older than 4.14 or built without CONFIG_SECCOMP_FILTER"
		case unix.EOPNOTSUPP:
			return false, fmt.Sprintf("seccomp action %#x is not supported by this kernel", action)
		default:
			return false, fmt.Sprintf("seccomp(SECCOMP_GET_ACTION_AVAIL, %#x): %v", action, errno)
		}
	}
	return true, ""
}
