//go:build unix

// Package flock releases flock(2) locks so that they end at once, even
// where another process holds a copy of the locked descriptor.
//
// A lock belongs to an open file description, which every copy of the
// descriptor shares. Closing one copy does not end the lock while
// another is open, and a process started by os/exec holds a copy of
// every descriptor from its fork until its exec closes those marked
// close-on-exec. That is usually microseconds, but a child that waits
// before its exec (for its user namespace's maps, under memory pressure,
// or stopped) keeps a lock that its parent released by closing. LOCK_UN
// ends the lock on the description itself, whatever copies remain.
package flock

import (
	"os"

	"golang.org/x/sys/unix"
)

// Release ends the flock held through f and closes f.
func Release(f *os.File) error {
	_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return f.Close()
}
