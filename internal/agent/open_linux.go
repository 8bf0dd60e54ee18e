package agent

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
)

// openNoMagic opens p for reading without following /proc magic links
// (such as /proc/self/fd/N or /proc/1/root): a symlink planted in the
// sandbox must not make the agent hand the host one of its own
// descriptors or another namespace's files.
func openNoMagic(p string) (*os.File, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, p, &unix.OpenHow{
		// O_NONBLOCK: opening a FIFO must not wait for a writer.
		Flags:   unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOCTTY | unix.O_NONBLOCK,
		Resolve: unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "stat", Path: p, Err: err}
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG, unix.S_IFDIR:
	default:
		// FIFOs, sockets and devices can block forever or never end.
		unix.Close(fd)
		return nil, agentproto.Errorf(agentproto.CodeInvalid, p+" is not a regular file")
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), p), nil
}

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
