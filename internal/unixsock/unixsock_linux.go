package unixsock

import (
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// maxPath is the longest path a socket address holds, without its NUL.
const maxPath = 107

// Addr returns an address for the socket at path: path itself, or, when
// it is too long, its directory opened and named through /proc/self/fd.
// release closes that directory once the socket is bound or connected.
func Addr(path string) (addr string, release func(), err error) {
	if len(path) <= maxPath {
		return path, func() {}, nil
	}
	dir, base := filepath.Dir(path), filepath.Base(path)
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", nil, fmt.Errorf("open %s: %w", dir, err)
	}
	return fmt.Sprintf("/proc/self/fd/%d/%s", fd, base), func() { unix.Close(fd) }, nil
}
