//go:build linux && amd64

package redteam_test

import "golang.org/x/sys/unix"

// archKernelProbes are the x86_64-only attacks: port I/O and the x32 ABI,
// whose calls arrive with the x86_64 audit arch and must not slip past a
// filter written for the native table.
func archKernelProbes() []kernelProbe {
	return []kernelProbe{
		{"port I/O", "iopl(3)", unix.SYS_IOPL, "3", denied},
		{"port I/O", "ioperm", unix.SYS_IOPERM, "0x80, 1, 1", denied},
		{"x32 ABI", "x32 getpid", 0x40000000 | unix.SYS_GETPID, "", denied},
		{"x32 ABI", "x32 unshare(user)", 0x40000000 | unix.SYS_UNSHARE, "0x10000000", denied},
	}
}
