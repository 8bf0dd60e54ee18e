//go:build !linux

package lifecycle

import (
	"fmt"
	"net"
	"path/filepath"
)

// shortPath returns dir/name, which must fit a socket address here.
func shortPath(dir, name string) (string, func(), error) {
	p := filepath.Join(dir, name)
	if len(p) > maxSocketPath {
		return "", nil, fmt.Errorf("socket path %s is longer than %d bytes: set AIRLOCK_HOME to a shorter directory", p, maxSocketPath)
	}
	return p, func() {}, nil
}

// checkPeer relies on the socket directory's permissions (0700) here.
func checkPeer(net.Conn) error { return nil }
