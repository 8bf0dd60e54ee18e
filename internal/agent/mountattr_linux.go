package agent

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// mountSetattr is mount_setattr(2), and, where the kernel has none
// (gVisor's Sentry answers ENOSYS), a bind remount that sets the same
// flags on the one mount named (AT_RECURSIVE then reaches no submounts:
// where it is used the mounts have none). A remount must repeat the
// flags a user namespace locked, which mount_setattr leaves alone; the
// Sentry's agent is root of its first namespace, where none are locked.
func mountSetattr(dirfd int, path string, flags int, attr *unix.MountAttr) error {
	err := unix.MountSetattr(dirfd, path, uint(flags), attr)
	if !errors.Is(err, unix.ENOSYS) {
		return err
	}
	if attr.Attr_clr != 0 || attr.Propagation != 0 || attr.Userns_fd != 0 {
		return err
	}
	var ms uintptr = unix.MS_REMOUNT | unix.MS_BIND
	for _, f := range [][2]uint64{
		{unix.MOUNT_ATTR_RDONLY, unix.MS_RDONLY}, {unix.MOUNT_ATTR_NOSUID, unix.MS_NOSUID},
		{unix.MOUNT_ATTR_NODEV, unix.MS_NODEV}, {unix.MOUNT_ATTR_NOEXEC, unix.MS_NOEXEC},
	} {
		if attr.Attr_set&f[0] != 0 {
			ms |= uintptr(f[1])
		}
	}
	target := path
	switch {
	case flags&unix.AT_EMPTY_PATH != 0 && path == "":
		target = fmt.Sprintf("/proc/self/fd/%d", dirfd)
	case dirfd != unix.AT_FDCWD && (path == "" || path[0] != '/'):
		target = fmt.Sprintf("/proc/self/fd/%d/%s", dirfd, path)
	}
	return unix.Mount("", target, "", ms, "")
}
