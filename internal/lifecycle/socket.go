package lifecycle

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
)

// maxSocketPath is the longest path a unix socket address holds
// (sun_path is 108 bytes on Linux, 104 on macOS, with the final NUL).
const maxSocketPath = 103

// listen creates the unix socket name in dir, reachable only by this
// user: the directory is 0700 and the socket is made 0600. A path too long
// for a socket address is reached through the directory's descriptor.
func listen(dir, name string) (net.Listener, error) {
	path := filepath.Join(dir, name)
	_ = os.Remove(path) // a stale socket of an earlier run with this id
	addr, release, err := shortPath(dir, name)
	if err != nil {
		return nil, err
	}
	defer release()
	ln, err := net.Listen("unix", addr)
	if err != nil {
		return nil, err
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(true)
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("restrict %s: %w", path, err)
	}
	return ln, nil
}
