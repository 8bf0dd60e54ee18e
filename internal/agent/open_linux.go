package agent

import (
	"os"

	"golang.org/x/sys/unix"
)

// openNoMagic opens p for reading without following /proc magic links
// (such as /proc/self/fd/N or /proc/1/root): a symlink planted in the
// sandbox must not make the agent hand the host one of its own
// descriptors or another namespace's files.
func openNoMagic(p string) (*os.File, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, p, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOCTTY,
		Resolve: unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	return os.NewFile(uintptr(fd), p), nil
}
