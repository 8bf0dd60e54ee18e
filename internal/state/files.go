package state

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// openRegular opens name in root for flag, never through a symbolic link
// as its last component (os.Root keeps the others inside root), never
// blocking on a FIFO or a device, and fails unless it is a regular file.
func openRegular(root *os.Root, name string, flag int) (*os.File, error) {
	if fi, err := root.Lstat(name); err == nil && !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is %s, not a regular file", name, kindOf(fi.Mode()))
	}
	f, err := root.OpenFile(name, flag|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, filePerm)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, fmt.Errorf("%s is a symbolic link, not a file", name)
		}
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s is %s, not a regular file", name, kindOf(fi.Mode()))
	}
	return f, nil
}

// kindOf names a file's type for messages.
func kindOf(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&os.ModeSymlink != 0:
		return "a symbolic link"
	case m&os.ModeNamedPipe != 0:
		return "a named pipe"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeDevice != 0:
		return "a device"
	}
	return "not a regular file"
}

// readBounded reads the regular file name in root, failing when it holds
// more than max bytes: it never reads more than max+1.
func readBounded(root *os.Root, name string, max int64) ([]byte, error) {
	f, err := openRegular(root, name, os.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s is larger than %d bytes", name, max)
	}
	return b, nil
}

// writeNew creates name in root with b as its content, mode 0600 whatever
// the umask. It does not sync: a file renamed into place afterwards is
// whole for every reader while the machine runs, which is all a record
// needs, since a machine that crashes takes its sandboxes with it, and a
// record damaged by that crash reads as damaged and is removed as any
// other. A sync here costs every sandbox's start milliseconds of disk.
func writeNew(root *os.Root, name string, b []byte) error {
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, filePerm)
	if err != nil {
		return err
	}
	err = f.Chmod(filePerm)
	if err == nil {
		_, err = f.Write(b)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		root.Remove(name)
	}
	return err
}
