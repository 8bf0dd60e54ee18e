//go:build !linux

package unixsock

import "fmt"

// maxPath is the longest path a socket address holds, without its NUL
// (104 bytes on macOS and the BSDs).
const maxPath = 103

// Addr returns path, which must fit a socket address here.
func Addr(path string) (addr string, release func(), err error) {
	if len(path) > maxPath {
		return "", nil, fmt.Errorf("socket path %s is longer than %d bytes, the most a socket address holds here: set AIRLOCK_HOME to a shorter directory", path, maxPath)
	}
	return path, func() {}, nil
}
