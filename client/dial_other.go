//go:build !linux

package client

import "fmt"

// maxSocketPath is the longest path a unix socket address holds (104
// bytes with the final NUL on macOS and the BSDs).
const maxSocketPath = 103

// socketAddr returns path, which must fit a socket address.
func socketAddr(path string) (string, func(), error) {
	if len(path) > maxSocketPath {
		return "", nil, fmt.Errorf("the path is longer than %d bytes, the most a socket address holds here: set AIRLOCK_HOME to a shorter directory", maxSocketPath)
	}
	return path, func() {}, nil
}
