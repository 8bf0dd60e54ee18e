package lifecycle

import (
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

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
