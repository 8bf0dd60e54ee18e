package untar

import (
	"os"

	"golang.org/x/sys/unix"
)

// mkfifoat makes the FIFO name (one path element) in the open folder
// parent: the name's own link is never followed.
func mkfifoat(parent *os.File, name string, perm uint32) error {
	if err := unix.Mkfifoat(int(parent.Fd()), name, perm); err != nil {
		return &os.PathError{Op: "mkfifoat", Path: name, Err: err}
	}
	return nil
}
