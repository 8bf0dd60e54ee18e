package tap

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/fdpass"
)

// Send sends f over the unix socket sock: one byte, with f's descriptor
// as SCM_RIGHTS.
func Send(sock int, f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.Sendmsg(sock, []byte{0}, unix.UnixRights(int(fd)), nil, 0)
	}); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("tap: send the device's file: %w", serr)
	}
	return nil
}

// Receive waits, until ctx ends, for the TAP device's file sent over sock
// by Send. The file must be the TUN/TAP character device: nothing else is
// accepted from the other side.
func Receive(ctx context.Context, sock *os.File) (*os.File, error) {
	if d, ok := ctx.Deadline(); ok {
		_ = sock.SetReadDeadline(d)
	} else {
		_ = sock.SetReadDeadline(time.Now().Add(30 * time.Second))
	}
	rc, err := sock.SyscallConn()
	if err != nil {
		return nil, err
	}
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4))
	var n, oobn int
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		n, oobn, _, _, rerr = unix.Recvmsg(int(fd), buf, oob, unix.MSG_CMSG_CLOEXEC)
		return rerr != unix.EAGAIN
	})
	if err == nil {
		err = rerr
	}
	if err != nil {
		return nil, fmt.Errorf("tap: receive the device's file from the sandbox: %w", err)
	}
	if n != 1 {
		return nil, errors.New("tap: the sandbox closed the channel without sending its device")
	}
	fd, err := fdpass.One(oob[:oobn])
	if err != nil {
		return nil, fmt.Errorf("tap: receive the device's file from the sandbox: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR || unix.Major(st.Rdev) != 10 || unix.Minor(st.Rdev) != 200 {
		unix.Close(fd)
		return nil, errors.New("tap: the sandbox sent a file that is not a TUN/TAP device")
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), "tap"), nil
}
