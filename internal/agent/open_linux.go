package agent

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// outputPipe returns a pipe for a command's output: the read end
// non-blocking and registered with the runtime poller (so its reads can be
// interrupted by a deadline), the write end blocking and unregistered,
// ready to hand to the command. os.Pipe would register both ends and then
// take the write end out again when its descriptor is passed on, which
// costs several system calls on every exec.
func outputPipe() (r, w *os.File, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return nil, nil, fmt.Errorf("create pipe: %w", err)
	}
	if err := unix.SetNonblock(p[0], true); err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		return nil, nil, fmt.Errorf("create pipe: %w", err)
	}
	return os.NewFile(uintptr(p[0]), "|0"), os.NewFile(uintptr(p[1]), "|1"), nil
}

// pending is how many bytes f holds unread (0 when it cannot tell).
func pending(f *os.File) int {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0
	}
	n := 0
	_ = rc.Control(func(fd uintptr) {
		n, _ = unix.IoctlGetInt(int(fd), unix.TIOCINQ) // FIONREAD
	})
	return max(n, 0)
}
