package fdpass

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// received sends fds over a socket pair and returns the control data
// that arrived.
func received(t *testing.T, fds ...int) []byte {
	t.Helper()
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pair[0])
	defer unix.Close(pair[1])
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if err := unix.Sendmsg(pair[0], []byte{0}, oob, nil, 0); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1)
	got := make([]byte, unix.CmsgSpace(4*4))
	_, n, _, _, err := unix.Recvmsg(pair[1], buf, got, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	return got[:n]
}

func open(t *testing.T) int {
	t.Helper()
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return int(f.Fd())
}

// isOpen says whether fd is an open descriptor of this process.
func isOpen(fd int) bool {
	_, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	return err == nil
}

func TestOne(t *testing.T) {
	fd, err := One(received(t, open(t)))
	if err != nil {
		t.Fatal(err)
	}
	if !isOpen(fd) {
		t.Fatalf("One returned %d, which is not open", fd)
	}
	unix.Close(fd)

	if _, err := One(received(t)); err == nil {
		t.Error("One accepted a message that carried no descriptor")
	}

	// Two: refused, and both closed. (Rights only reads the numbers
	// the kernel gave them.)
	oob := received(t, open(t), open(t))
	fds := Rights(oob)
	if len(fds) != 2 || !isOpen(fds[0]) || !isOpen(fds[1]) {
		t.Fatalf("Rights found %v, want two open descriptors", fds)
	}
	if _, err := One(oob); err == nil {
		t.Error("One accepted a message that carried two descriptors")
	}
	for _, fd := range fds {
		if isOpen(fd) {
			t.Errorf("descriptor %d of the refused message is still open", fd)
		}
	}
}
