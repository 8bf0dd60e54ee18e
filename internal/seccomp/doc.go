// Package seccomp builds and installs airlock's default seccomp-BPF deny
// profile.
//
// The filter is assembled in pure Go as classic BPF with golang.org/x/net/bpf
// and installed with the seccomp(2) system call through golang.org/x/sys/unix.
// There is deliberately no cgo and no libseccomp: the sandbox agent is a
// static binary built with CGO_ENABLED=0, so it cannot link libseccomp.
//
// The profile is a deny list. Everything is allowed except system calls
// that reach kernel attack surface or host-wide state that untrusted code
// has no business touching (module loading, kexec, bpf, io_uring, keyrings,
// the mount API, namespace creation and entry, clock setting, ...). Denied
// calls fail with EPERM rather than killing the process, so well-behaved
// programs that merely probe for a feature keep running. The exceptions are:
//
//   - a system call made under a foreign audit architecture (for example the
//     32-bit int 0x80 entry on x86_64) kills the process, because the filter's
//     syscall numbers would mean something else there;
//   - clone3 fails with ENOSYS, so that libc falls back to clone, whose flags
//     live in a register the filter can inspect (clone3 passes them in memory);
//   - clone, unshare, personality and ioctl are allowed or denied depending
//     on their arguments;
//   - socket and socketpair are the one allow-list: only AF_UNIX, AF_INET,
//     AF_INET6 and AF_NETLINK (NETLINK_ROUTE and NETLINK_SOCK_DIAG) can be
//     created; any other family fails with EAFNOSUPPORT and any other
//     netlink protocol with EPROTONOSUPPORT, as on a kernel built without
//     them.
//
// The package only supports Linux on amd64 and arm64.
package seccomp
