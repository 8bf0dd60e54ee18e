package vfsproto

import "syscall"

// On Linux an errno is its own wire number.

func toLinuxErrno(e syscall.Errno) uint32 {
	if e > maxLinuxErrno {
		return 0
	}
	return uint32(e)
}

func fromLinuxErrno(n uint32) syscall.Errno { return syscall.Errno(n) }
