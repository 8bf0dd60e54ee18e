package seccomp

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"slices"
	"testing"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Foreign audit architectures that can reach a 64-bit kernel.
const (
	auditArchI386 = 0x40000003 // AUDIT_ARCH_I386: int 0x80 on x86_64
	auditArchARM  = 0x40000028 // AUDIT_ARCH_ARM: AArch32 compat on arm64
)

// mustArch returns the running architecture's spec.
func mustArch(t *testing.T) archSpec {
	t.Helper()
	a, err := nativeArch()
	if err != nil {
		t.Skip(err)
	}
	return a
}

// disassemble converts Build output back into x/net/bpf instructions.
func disassemble(t *testing.T, filter []unix.SockFilter) []bpf.Instruction {
	t.Helper()
	raw := make([]bpf.RawInstruction, len(filter))
	for i, f := range filter {
		raw[i] = bpf.RawInstruction{Op: f.Code, Jt: f.Jt, Jf: f.Jf, K: f.K}
	}
	insns, ok := bpf.Disassemble(raw)
	if !ok {
		t.Fatalf("filter contains instructions x/net/bpf cannot decode: %v", insns)
	}
	return insns
}

// TestProgramShape checks the properties the kernel's seccomp_check_filter
// enforces, plus our own size budget, on the real Build output.
func TestProgramShape(t *testing.T) {
	mustArch(t)
	for _, p := range []Profile{DefaultProfile(), {AllowPtrace: true}} {
		t.Run(fmt.Sprintf("AllowPtrace=%v", p.AllowPtrace), func(t *testing.T) {
			filter, err := Build(p)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d instructions", len(filter))
			// The kernel limit is 4096; the program is a flat jeq chain and
			// should stay far below it.
			if len(filter) >= maxInsns || len(filter) > 128 {
				t.Errorf("program has %d instructions, want a small program (< 128)", len(filter))
			}
			insns := disassemble(t, filter)
			if _, ok := insns[len(insns)-1].(bpf.RetConstant); !ok {
				t.Errorf("last instruction is %v, want a return", insns[len(insns)-1])
			}
			rets := []uint32{retAllow, retEPERM, retENOSYS, retKill, retEAFNOSUPPORT, retEPROTONOSUPPORT}
			for i, ins := range insns {
				// remaining is how far a jump at i may skip and still land
				// on an instruction.
				remaining := len(insns) - i - 1
				switch ins := ins.(type) {
				case bpf.LoadAbsolute:
					if ins.Size != 4 || ins.Off%4 != 0 || ins.Off >= 64 {
						t.Errorf("insn %d: %v is not an aligned 32-bit load inside seccomp_data", i, ins)
					}
				case bpf.JumpIf:
					// SkipTrue/SkipFalse are uint8, so the 255 limit holds
					// by construction; landing inside the program does not.
					if int(ins.SkipTrue) >= remaining || int(ins.SkipFalse) >= remaining {
						t.Errorf("insn %d: %v jumps past the end", i, ins)
					}
					// Disassemble reports "jeq k, 0, n" as JumpNotEqual and
					// so on, hence the negated forms.
					if !slices.Contains([]bpf.JumpTest{
						bpf.JumpEqual, bpf.JumpNotEqual,
						bpf.JumpGreaterOrEqual, bpf.JumpLessThan,
						bpf.JumpBitsSet, bpf.JumpBitsNotSet,
					}, ins.Cond) {
						t.Errorf("insn %d: unexpected condition in %v", i, ins)
					}
				case bpf.Jump:
					if int(ins.Skip) >= remaining {
						t.Errorf("insn %d: %v jumps past the end", i, ins)
					}
				case bpf.ALUOpConstant:
					if ins.Op != bpf.ALUOpAnd {
						t.Errorf("insn %d: unexpected ALU operation in %v", i, ins)
					}
				case bpf.RetConstant:
					if !slices.Contains(rets, ins.Val) {
						t.Errorf("insn %d: unexpected return value %#x", i, ins.Val)
					}
				default:
					t.Errorf("insn %d: unexpected instruction %v", i, ins)
				}
			}
		})
	}
}

// TestDenyTableComplete checks the per-arch table against the list of
// syscalls the profile is meant to deny, so that a syscall cannot silently
// drop out of one architecture's file.
func TestDenyTableComplete(t *testing.T) {
	a := mustArch(t)
	want := []string{
		"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
		"bpf", "perf_event_open", "userfaultfd", "keyctl", "add_key", "request_key",
		"io_uring_setup", "io_uring_enter", "io_uring_register",
		"mount", "umount2", "pivot_root", "move_mount", "open_tree", "open_tree_attr",
		"fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr", "setns",
		"open_by_handle_at", "name_to_handle_at", "acct", "swapon", "swapoff", "reboot",
		"syslog", "quotactl", "quotactl_fd", "lookup_dcookie", "iopl", "ioperm", "uselib",
		"ustat", "sysfs", "vhangup", "settimeofday", "clock_settime", "clock_adjtime",
		"adjtimex", "chroot", "fanotify_init", "nfsservctl", "create_module",
		"get_kernel_syms", "query_module",
	}
	// Syscalls that do not exist in a given architecture's table.
	missing := map[string][]string{
		"arm64": {"iopl", "ioperm", "uselib", "ustat", "sysfs", "create_module", "get_kernel_syms", "query_module"},
	}[runtime.GOARCH]

	var got []string
	seen := map[uint32]string{}
	for _, s := range slices.Concat(a.deny, a.ptrace) {
		if prev, dup := seen[s.nr]; dup {
			t.Errorf("syscall %d listed twice (%s, %s)", s.nr, prev, s.name)
		}
		seen[s.nr] = s.name
		got = append(got, s.name)
	}
	for _, special := range []uint32{a.clone, a.clone3, a.unshare, a.personality, a.ioctl, a.socket, a.socketpair} {
		if name, ok := seen[special]; ok {
			t.Errorf("%s (%d) is in the deny table but also has special handling", name, special)
		}
	}
	for _, name := range want {
		if !slices.Contains(got, name) && !slices.Contains(missing, name) {
			t.Errorf("%s is not denied on %s", name, runtime.GOARCH)
		}
	}
	for _, name := range []string{"ptrace", "process_vm_readv", "process_vm_writev"} {
		if !slices.ContainsFunc(a.ptrace, func(s syscallNr) bool { return s.name == name }) {
			t.Errorf("%s is not in the ptrace table", name)
		}
	}
}

// seccompData lays out struct seccomp_data for x/net/bpf's VM.
//
// The kernel runs the filter with native-endian (here little-endian) 32-bit
// loads, while the VM's loads are big-endian (network order). Writing every
// 32-bit word big-endian at the offset where the kernel would read it makes
// the VM see the same values: nr at 0, arch at 4, and for args[i] the low
// half at 16+8i and the high half at 20+8i.
func seccompData(nr, arch uint32, args ...uint64) []byte {
	b := make([]byte, 64)
	binary.BigEndian.PutUint32(b[0:], nr)
	binary.BigEndian.PutUint32(b[4:], arch)
	for i, a := range args {
		binary.BigEndian.PutUint32(b[16+8*i:], uint32(a))
		binary.BigEndian.PutUint32(b[20+8*i:], uint32(a>>32))
	}
	return b
}

// simulator runs a profile's filter in the x/net/bpf VM.
type simulator struct {
	vm   *bpf.VM
	arch uint32
}

func newSimulator(t *testing.T, p Profile) *simulator {
	t.Helper()
	a := mustArch(t)
	filter, err := Build(p)
	if err != nil {
		t.Fatal(err)
	}
	vm, err := bpf.NewVM(disassemble(t, filter))
	if err != nil {
		t.Fatal(err)
	}
	return &simulator{vm: vm, arch: a.auditArch}
}

// run returns the filter's action for syscall nr under arch.
func (s *simulator) run(t *testing.T, nr, arch uint32, args ...uint64) uint32 {
	t.Helper()
	out, err := s.vm.Run(seccompData(nr, arch, args...))
	if err != nil {
		t.Fatalf("VM: %v", err)
	}
	return uint32(out)
}

// expect asserts the action for a native syscall.
func (s *simulator) expect(t *testing.T, name string, want uint32, nr uint32, args ...uint64) {
	t.Helper()
	if got := s.run(t, nr, s.arch, args...); got != want {
		t.Errorf("%s(nr=%d, args=%#x) = %s, want %s", name, nr, args, actionName(got), actionName(want))
	}
}

func actionName(v uint32) string {
	switch v {
	case retAllow:
		return "ALLOW"
	case retEPERM:
		return "ERRNO(EPERM)"
	case retENOSYS:
		return "ERRNO(ENOSYS)"
	case retKill:
		return "KILL_PROCESS"
	case retEAFNOSUPPORT:
		return "ERRNO(EAFNOSUPPORT)"
	case retEPROTONOSUPPORT:
		return "ERRNO(EPROTONOSUPPORT)"
	}
	return fmt.Sprintf("%#x", v)
}

func TestSimulatedActions(t *testing.T) {
	a := mustArch(t)
	def := newSimulator(t, DefaultProfile())
	withPtrace := newSimulator(t, Profile{AllowPtrace: true})

	t.Run("foreign arch is killed", func(t *testing.T) {
		// The other supported 64-bit arch must be killed too.
		other := uint32(unix.AUDIT_ARCH_X86_64 ^ unix.AUDIT_ARCH_AARCH64 ^ a.auditArch)
		for _, arch := range []uint32{auditArchI386, auditArchARM, 0, other} {
			for _, nr := range []uint32{unix.SYS_GETPID, unix.SYS_READ, unix.SYS_MOUNT} {
				if got := def.run(t, nr, arch); got != retKill {
					t.Errorf("nr %d under arch %#x = %s, want KILL_PROCESS", nr, arch, actionName(got))
				}
			}
		}
	})

	t.Run("deny table", func(t *testing.T) {
		for _, s := range a.deny {
			def.expect(t, s.name, retEPERM, s.nr)
			withPtrace.expect(t, s.name, retEPERM, s.nr)
		}
	})

	// Spot checks written against x/sys/unix directly, independent of the
	// tables under test.
	t.Run("spot checks", func(t *testing.T) {
		for name, nr := range map[string]uint32{
			"mount": unix.SYS_MOUNT, "umount2": unix.SYS_UMOUNT2, "bpf": unix.SYS_BPF,
			"keyctl": unix.SYS_KEYCTL, "setns": unix.SYS_SETNS, "kexec_load": unix.SYS_KEXEC_LOAD,
			"finit_module": unix.SYS_FINIT_MODULE, "io_uring_setup": unix.SYS_IO_URING_SETUP,
			"perf_event_open": unix.SYS_PERF_EVENT_OPEN, "userfaultfd": unix.SYS_USERFAULTFD,
			"open_by_handle_at": unix.SYS_OPEN_BY_HANDLE_AT, "chroot": unix.SYS_CHROOT,
			"pivot_root": unix.SYS_PIVOT_ROOT, "fsopen": unix.SYS_FSOPEN,
			"clock_settime": unix.SYS_CLOCK_SETTIME, "reboot": unix.SYS_REBOOT,
		} {
			def.expect(t, name, retEPERM, nr, 0, 0, 0)
		}
	})

	t.Run("ptrace", func(t *testing.T) {
		for name, nr := range map[string]uint32{
			"ptrace":            unix.SYS_PTRACE,
			"process_vm_readv":  unix.SYS_PROCESS_VM_READV,
			"process_vm_writev": unix.SYS_PROCESS_VM_WRITEV,
		} {
			def.expect(t, name, retEPERM, nr, unix.PTRACE_TRACEME)
			withPtrace.expect(t, name, retAllow, nr, unix.PTRACE_TRACEME)
		}
	})

	t.Run("allowed", func(t *testing.T) {
		for _, sim := range []*simulator{def, withPtrace} {
			for name, nr := range map[string]uint32{
				"read": unix.SYS_READ, "write": unix.SYS_WRITE, "openat": unix.SYS_OPENAT,
				"close": unix.SYS_CLOSE, "mmap": unix.SYS_MMAP, "execve": unix.SYS_EXECVE,
				"exit_group": unix.SYS_EXIT_GROUP, "getpid": unix.SYS_GETPID,
				"wait4": unix.SYS_WAIT4, "futex": unix.SYS_FUTEX, "prctl": unix.SYS_PRCTL,
				"seccomp": unix.SYS_SECCOMP, "pidfd_open": unix.SYS_PIDFD_OPEN,
				"connect": unix.SYS_CONNECT, "unknown 1000": 1000,
			} {
				sim.expect(t, name, retAllow, nr, 1, 2, 3, 4, 5, 6)
			}
		}
	})

	t.Run("socket families", func(t *testing.T) {
		// Written against x/sys/unix, independent of the filter's tables.
		allowed := map[uint64]bool{unix.AF_UNIX: true, unix.AF_INET: true, unix.AF_INET6: true, unix.AF_NETLINK: true}
		calls := map[string]uint32{"socket": unix.SYS_SOCKET, "socketpair": unix.SYS_SOCKETPAIR}
		for _, sim := range []*simulator{def, withPtrace} {
			for name, nr := range calls {
				// Every family number the kernel knows (AF_MAX is 46 in
				// Linux 6.x) and well past it, so that one a later
				// kernel adds is refused too.
				for family := range uint64(256) {
					want := uint32(retEAFNOSUPPORT)
					if allowed[family] {
						want = retAllow
					}
					proto := uint64(0)
					if family == unix.AF_NETLINK {
						proto = unix.NETLINK_ROUTE
					}
					sim.expect(t, fmt.Sprintf("%s(family %d)", name, family), want, nr, family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, proto)
				}
				for _, family := range []uint64{0xffff, 0x7fffffff, 0xffffffff, unix.AF_VSOCK | 1<<16} {
					sim.expect(t, fmt.Sprintf("%s(family %#x)", name, family), retEAFNOSUPPORT, nr, family, unix.SOCK_STREAM, 0)
				}
				// family is an int: high bits do not hide it, either way.
				sim.expect(t, name+"(1<<32|AF_VSOCK)", retEAFNOSUPPORT, nr, 1<<32|unix.AF_VSOCK, unix.SOCK_STREAM, 0)
				sim.expect(t, name+"(1<<32|AF_UNIX)", retAllow, nr, 1<<32|unix.AF_UNIX, unix.SOCK_STREAM, 0)
			}
		}
	})

	t.Run("netlink protocols", func(t *testing.T) {
		for name, nr := range map[string]uint32{"socket": unix.SYS_SOCKET, "socketpair": unix.SYS_SOCKETPAIR} {
			for proto := range uint64(64) {
				want := uint32(retEPROTONOSUPPORT)
				if proto == unix.NETLINK_ROUTE || proto == unix.NETLINK_SOCK_DIAG {
					want = retAllow
				}
				for _, typ := range []uint64{unix.SOCK_RAW, unix.SOCK_DGRAM | unix.SOCK_CLOEXEC} {
					def.expect(t, fmt.Sprintf("%s(AF_NETLINK, %#x, %d)", name, typ, proto), want, nr, unix.AF_NETLINK, typ, proto)
				}
			}
			for _, proto := range []uint64{unix.NETLINK_AUDIT, unix.NETLINK_KOBJECT_UEVENT, unix.NETLINK_NETFILTER,
				unix.NETLINK_GENERIC, unix.NETLINK_XFRM, unix.NETLINK_CONNECTOR, unix.NETLINK_CRYPTO, 1<<32 | unix.NETLINK_AUDIT, 0xffffffff} {
				def.expect(t, fmt.Sprintf("%s(AF_NETLINK, %d)", name, proto), retEPROTONOSUPPORT, nr, unix.AF_NETLINK, unix.SOCK_RAW, proto)
			}
			def.expect(t, name+"(AF_NETLINK, 1<<32|NETLINK_ROUTE)", retAllow, nr, unix.AF_NETLINK, unix.SOCK_RAW, 1<<32|unix.NETLINK_ROUTE)
		}
	})

	t.Run("inet types", func(t *testing.T) {
		for _, typ := range []uint64{unix.SOCK_STREAM, unix.SOCK_DGRAM, unix.SOCK_RAW, unix.SOCK_SEQPACKET,
			unix.SOCK_STREAM | unix.SOCK_NONBLOCK | unix.SOCK_CLOEXEC, 1<<32 | unix.SOCK_DGRAM} {
			def.expect(t, fmt.Sprintf("socket(AF_INET, %#x)", typ), retAllow, unix.SYS_SOCKET, unix.AF_INET, typ, 0)
			def.expect(t, fmt.Sprintf("socket(AF_INET6, %#x)", typ), retAllow, unix.SYS_SOCKET, unix.AF_INET6, typ, 0)
		}
		// (AF_INET, SOCK_PACKET) is AF_PACKET to the kernel, whatever the
		// flags in the high bits of the type.
		for _, typ := range []uint64{unix.SOCK_PACKET, unix.SOCK_PACKET | unix.SOCK_CLOEXEC, unix.SOCK_PACKET | unix.SOCK_NONBLOCK, 1<<32 | unix.SOCK_PACKET} {
			def.expect(t, fmt.Sprintf("socket(AF_INET, %#x)", typ), retEAFNOSUPPORT, unix.SYS_SOCKET, unix.AF_INET, typ, 0x0300)
			def.expect(t, fmt.Sprintf("socketpair(AF_INET, %#x)", typ), retEAFNOSUPPORT, unix.SYS_SOCKETPAIR, unix.AF_INET, typ, 0)
		}
	})

	t.Run("socketcall", func(t *testing.T) {
		// socketcall exists only in the 32-bit table, whose entry is
		// killed before any number is looked at.
		const i386Socketcall = 102
		if got := def.run(t, i386Socketcall, auditArchI386, 1); got != retKill {
			t.Errorf("i386 socketcall = %s, want KILL_PROCESS", actionName(got))
		}
	})

	t.Run("x32", func(t *testing.T) {
		if !a.x32 {
			t.Skip("no x32 ABI on " + runtime.GOARCH)
		}
		for _, nr := range []uint32{unix.SYS_GETPID, unix.SYS_READ, unix.SYS_MOUNT, 0, 0xffff} {
			def.expect(t, "x32 syscall", retEPERM, x32SyscallBit|nr)
		}
		def.expect(t, "nr 0xffffffff", retEPERM, 0xffffffff)
	})

	t.Run("clone3", func(t *testing.T) {
		for _, sim := range []*simulator{def, withPtrace} {
			sim.expect(t, "clone3", retENOSYS, unix.SYS_CLONE3)
			sim.expect(t, "clone3", retENOSYS, unix.SYS_CLONE3, 0xdeadbeef, 88)
		}
	})

	sigchld := uint64(unix.SIGCHLD)
	namespaces := map[string]uint64{
		"CLONE_NEWNS": unix.CLONE_NEWNS, "CLONE_NEWUTS": unix.CLONE_NEWUTS,
		"CLONE_NEWIPC": unix.CLONE_NEWIPC, "CLONE_NEWUSER": unix.CLONE_NEWUSER,
		"CLONE_NEWPID": unix.CLONE_NEWPID, "CLONE_NEWNET": unix.CLONE_NEWNET,
		"CLONE_NEWCGROUP": unix.CLONE_NEWCGROUP, "CLONE_NEWTIME": unix.CLONE_NEWTIME,
	}

	t.Run("clone", func(t *testing.T) {
		// fork, vfork-style spawn (as used by Go's os/exec) and thread creation.
		thread := uint64(unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND |
			unix.CLONE_SYSVSEM | unix.CLONE_THREAD | unix.CLONE_SETTLS |
			unix.CLONE_PARENT_SETTID | unix.CLONE_CHILD_CLEARTID)
		for _, flags := range []uint64{
			sigchld,
			unix.CLONE_VM | unix.CLONE_VFORK | unix.CLONE_PIDFD | sigchld,
			thread,
			1<<32 | sigchld, // the kernel only uses the low 32 bits
		} {
			def.expect(t, "clone", retAllow, unix.SYS_CLONE, flags)
		}
		for name, flag := range namespaces {
			def.expect(t, "clone|"+name, retEPERM, unix.SYS_CLONE, flag|sigchld)
			def.expect(t, "clone|"+name, retEPERM, unix.SYS_CLONE, flag|thread|1<<40)
		}
	})

	t.Run("unshare", func(t *testing.T) {
		for _, flags := range []uint64{0, unix.CLONE_FILES, unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SYSVSEM} {
			def.expect(t, "unshare", retAllow, unix.SYS_UNSHARE, flags)
		}
		for name, flag := range namespaces {
			def.expect(t, "unshare("+name+")", retEPERM, unix.SYS_UNSHARE, flag)
			def.expect(t, "unshare("+name+"|CLONE_FILES)", retEPERM, unix.SYS_UNSHARE, flag|unix.CLONE_FILES)
		}
	})

	t.Run("personality", func(t *testing.T) {
		for _, v := range []uint64{0x0, 0x8, 0x20000, 0x20008, 0xffffffff, 0xffffffff_ffffffff, 1 << 32} {
			def.expect(t, "personality", retAllow, unix.SYS_PERSONALITY, v)
		}
		for _, v := range []uint64{
			0x0040000, // ADDR_NO_RANDOMIZE
			0x0400000, // READ_IMPLIES_EXEC
			0x0040008, // PER_LINUX32|ADDR_NO_RANDOMIZE
			0x1, 0x7, 0xfffffffe,
		} {
			def.expect(t, "personality", retEPERM, unix.SYS_PERSONALITY, v)
		}
	})

	t.Run("ioctl", func(t *testing.T) {
		for _, fd := range []uint64{0, 1, 99} {
			def.expect(t, "ioctl(TIOCSTI)", retEPERM, unix.SYS_IOCTL, fd, unix.TIOCSTI)
			def.expect(t, "ioctl(TIOCLINUX)", retEPERM, unix.SYS_IOCTL, fd, unix.TIOCLINUX)
			// cmd is an unsigned int: high bits do not hide the request.
			def.expect(t, "ioctl(TIOCSTI|1<<32)", retEPERM, unix.SYS_IOCTL, fd, 1<<32|unix.TIOCSTI)
		}
		for _, req := range []uint64{unix.TCGETS, unix.TIOCGWINSZ, unix.TIOCSWINSZ, 0} {
			def.expect(t, "ioctl", retAllow, unix.SYS_IOCTL, 0, req)
		}
		// The fd (arg0) equal to TIOCSTI must not matter.
		def.expect(t, "ioctl(fd=TIOCSTI, TCGETS)", retAllow, unix.SYS_IOCTL, unix.TIOCSTI, unix.TCGETS)
	})
}

// decide is the profile written as plain Go, apart from the filter: what
// the filter must answer for a native syscall nr with args.
func decide(p Profile, a archSpec, nr uint32, args [6]uint64) uint32 {
	if a.x32 && nr >= x32SyscallBit {
		return retEPERM
	}
	denied := a.deny
	if !p.AllowPtrace {
		denied = slices.Concat(a.deny, a.ptrace)
	}
	for _, s := range denied {
		if s.nr == nr {
			return retEPERM
		}
	}
	lo := func(i int) uint32 { return uint32(args[i]) }
	switch nr {
	case a.clone3:
		return retENOSYS
	case a.clone, a.unshare:
		if lo(0)&nsFlags != 0 {
			return retEPERM
		}
	case a.personality:
		if !slices.Contains(allowedPersonalities[:], lo(0)) {
			return retEPERM
		}
	case a.ioctl:
		if slices.Contains(deniedIoctls[:], lo(1)) {
			return retEPERM
		}
	case a.socket, a.socketpair:
		switch lo(0) {
		case unix.AF_UNIX, unix.AF_INET6:
		case unix.AF_INET:
			if lo(1)&sockTypeMask == unix.SOCK_PACKET {
				return retEAFNOSUPPORT
			}
		case unix.AF_NETLINK:
			if !slices.Contains(allowedNetlink[:], lo(2)) {
				return retEPROTONOSUPPORT
			}
		default:
			return retEAFNOSUPPORT
		}
	}
	return retAllow
}

// TestEverySyscallNumber runs the filter for every syscall number (and
// numbers past the tables, and the x32 range) with arguments that each
// special case looks at, and checks each answer against decide: no
// number may reach another number's case, or fall through to ALLOW
// where the profile denies it.
func TestEverySyscallNumber(t *testing.T) {
	a := mustArch(t)
	argSets := [][6]uint64{
		{},
		{unix.CLONE_NEWUSER, unix.TIOCSTI, 0},
		{unix.CLONE_VM | unix.CLONE_THREAD, unix.TCGETS},
		{0x8, unix.TIOCLINUX},
		{0x1234},
		{unix.AF_INET, unix.SOCK_PACKET | unix.SOCK_CLOEXEC},
		{unix.AF_INET, unix.SOCK_STREAM},
		{unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE},
		{unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_AUDIT},
		{unix.AF_PACKET, unix.SOCK_RAW},
		{unix.AF_UNIX, unix.SOCK_STREAM},
		{1 << 40, 1 << 40, 1 << 40},
	}
	var nrs []uint32
	for nr := uint32(0); nr < 1100; nr++ {
		nrs = append(nrs, nr)
	}
	nrs = append(nrs, x32SyscallBit-1, x32SyscallBit, x32SyscallBit+1, x32SyscallBit+unix.SYS_READ, 1<<31, ^uint32(0))
	for _, p := range []Profile{DefaultProfile(), {AllowPtrace: true}} {
		sim := newSimulator(t, p)
		for _, nr := range nrs {
			for _, args := range argSets {
				want := decide(p, a, nr, args)
				if got := sim.run(t, nr, a.auditArch, args[:]...); got != want {
					t.Errorf("AllowPtrace=%v: nr %d args %#x: %s, want %s", p.AllowPtrace, nr, args, actionName(got), actionName(want))
				}
			}
		}
	}
}
