package client

import (
	"fmt"
	"os"
	"path/filepath"
)

// maxSocketPath is the longest path a unix socket address holds here.
const maxSocketPath = 107

// socketAddr returns an address for the socket at path: path itself, or,
// when it is too long for a socket address, its directory opened and
// named through /proc/self/fd. release closes that directory.
func socketAddr(path string) (string, func(), error) {
	if len(path) <= maxSocketPath {
		return path, func() {}, nil
	}
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return "", nil, err
	}
	return fmt.Sprintf("/proc/self/fd/%d/%s", dir.Fd(), filepath.Base(path)), func() { dir.Close() }, nil
}
