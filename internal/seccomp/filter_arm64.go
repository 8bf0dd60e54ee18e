//go:build linux

package seccomp

import "golang.org/x/sys/unix"

// nativeArch describes arm64. Its syscall table is the newer generic one, so
// several x86 entries do not exist here: iopl, ioperm, uselib, ustat, sysfs,
// create_module, get_kernel_syms and query_module.
func nativeArch() (archSpec, error) {
	return archSpec{
		auditArch: unix.AUDIT_ARCH_AARCH64,
		deny: []syscallNr{
			{"kexec_load", unix.SYS_KEXEC_LOAD},
			{"kexec_file_load", unix.SYS_KEXEC_FILE_LOAD},
			{"init_module", unix.SYS_INIT_MODULE},
			{"finit_module", unix.SYS_FINIT_MODULE},
			{"delete_module", unix.SYS_DELETE_MODULE},
			{"bpf", unix.SYS_BPF},
			{"perf_event_open", unix.SYS_PERF_EVENT_OPEN},
			{"userfaultfd", unix.SYS_USERFAULTFD},
			{"keyctl", unix.SYS_KEYCTL},
			{"add_key", unix.SYS_ADD_KEY},
			{"request_key", unix.SYS_REQUEST_KEY},
			{"io_uring_setup", unix.SYS_IO_URING_SETUP},
			{"io_uring_enter", unix.SYS_IO_URING_ENTER},
			{"io_uring_register", unix.SYS_IO_URING_REGISTER},
			{"mount", unix.SYS_MOUNT},
			{"umount2", unix.SYS_UMOUNT2},
			{"pivot_root", unix.SYS_PIVOT_ROOT},
			{"move_mount", unix.SYS_MOVE_MOUNT},
			{"open_tree", unix.SYS_OPEN_TREE},
			{"open_tree_attr", unix.SYS_OPEN_TREE_ATTR},
			{"fsopen", unix.SYS_FSOPEN},
			{"fsconfig", unix.SYS_FSCONFIG},
			{"fsmount", unix.SYS_FSMOUNT},
			{"fspick", unix.SYS_FSPICK},
			{"mount_setattr", unix.SYS_MOUNT_SETATTR},
			{"setns", unix.SYS_SETNS},
			{"open_by_handle_at", unix.SYS_OPEN_BY_HANDLE_AT},
			{"name_to_handle_at", unix.SYS_NAME_TO_HANDLE_AT},
			{"acct", unix.SYS_ACCT},
			{"swapon", unix.SYS_SWAPON},
			{"swapoff", unix.SYS_SWAPOFF},
			{"reboot", unix.SYS_REBOOT},
			{"syslog", unix.SYS_SYSLOG},
			{"quotactl", unix.SYS_QUOTACTL},
			{"quotactl_fd", unix.SYS_QUOTACTL_FD},
			{"lookup_dcookie", unix.SYS_LOOKUP_DCOOKIE},
			{"vhangup", unix.SYS_VHANGUP},
			{"settimeofday", unix.SYS_SETTIMEOFDAY},
			{"clock_settime", unix.SYS_CLOCK_SETTIME},
			{"clock_adjtime", unix.SYS_CLOCK_ADJTIME},
			{"adjtimex", unix.SYS_ADJTIMEX},
			{"chroot", unix.SYS_CHROOT},
			{"fanotify_init", unix.SYS_FANOTIFY_INIT},
			{"nfsservctl", unix.SYS_NFSSERVCTL},
		},
		ptrace: []syscallNr{
			{"ptrace", unix.SYS_PTRACE},
			{"process_vm_readv", unix.SYS_PROCESS_VM_READV},
			{"process_vm_writev", unix.SYS_PROCESS_VM_WRITEV},
		},
		clone:       unix.SYS_CLONE,
		clone3:      unix.SYS_CLONE3,
		unshare:     unix.SYS_UNSHARE,
		personality: unix.SYS_PERSONALITY,
		ioctl:       unix.SYS_IOCTL,
		socket:      unix.SYS_SOCKET,
		socketpair:  unix.SYS_SOCKETPAIR,
	}, nil
}
