package lifecycle

import (
	"fmt"
	"net"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// shortPath returns an address for dir/name that fits a socket address:
// the path itself, or dir opened and named through /proc/self/fd. release
// closes the descriptor once the socket is bound or connected.
func shortPath(dir, name string) (string, func(), error) {
	p := filepath.Join(dir, name)
	if len(p) <= maxSocketPath {
		return p, func() {}, nil
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", nil, fmt.Errorf("open %s: %w", dir, err)
	}
	return fmt.Sprintf("/proc/self/fd/%d/%s", fd, name), func() { unix.Close(fd) }, nil
}

// checkPeer refuses connections from other users (root may connect): the
// socket's directory already keeps them out, this is the second lock.
func checkPeer(c net.Conn) error {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return fmt.Errorf("not a unix socket connection")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if cerr != nil {
		return fmt.Errorf("read peer credentials: %w", cerr)
	}
	if me := os.Geteuid(); int(cred.Uid) != me && cred.Uid != 0 {
		return fmt.Errorf("connection from uid %d refused: the sandbox belongs to uid %d", cred.Uid, me)
	}
	return nil
}
