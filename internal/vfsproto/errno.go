package vfsproto

import "syscall"

// wireErrno is the Linux errno number that err stands for (vfs.Errno's
// mapping), EIO for anything that has none.
func wireErrno(e syscall.Errno) uint32 {
	if e == 0 {
		return 0
	}
	n := toLinuxErrno(e)
	if n == 0 {
		return linuxEIO
	}
	return n
}

// localErrno is the errno of this host for the Linux errno number n, EIO
// for a number that has none.
func localErrno(n uint32) syscall.Errno {
	if n == 0 || n > maxLinuxErrno {
		return syscall.EIO
	}
	if e := fromLinuxErrno(n); e != 0 {
		return e
	}
	return syscall.EIO
}

const (
	linuxEIO = 5
	// maxLinuxErrno is the largest errno Linux uses (MAX_ERRNO).
	maxLinuxErrno = 4095
)
