package lifecycle

import (
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/airlock-sandbox/airlock/internal/unixsock"
)

// Listen creates the unix socket name in dir as a control socket is made
// (see listen), for a supervisor of something other than a sandbox.
func Listen(dir, name string) (net.Listener, error) { return listen(dir, name) }

// CheckPeer refuses connections from other users, as control sockets do.
func CheckPeer(c net.Conn) error { return checkPeer(c) }

// listen creates the unix socket name in dir, reachable only by this
// user: the directory is 0700 and the socket is made 0600.
func listen(dir, name string) (net.Listener, error) {
	path := filepath.Join(dir, name)
	_ = os.Remove(path) // a stale socket of an earlier run with this id
	ln, err := unixsock.Listen(path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("restrict %s: %w", path, err)
	}
	return &unlinking{UnixListener: ln, path: path}, nil
}

// unlinking removes the socket file when the listener closes.
type unlinking struct {
	*net.UnixListener
	path string
}

func (u *unlinking) Close() error {
	err := u.UnixListener.Close()
	_ = os.Remove(u.path)
	return err
}
