//go:build unix

package intercept

import (
	"os"
	"syscall"

	"github.com/airlock-sandbox/airlock/internal/flock"
)

// lockDir takes an exclusive flock on path (created 0600 if absent) and
// returns the function that releases it. The lock is the operating
// system's: a process that dies releases it.
func lockDir(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return func() { flock.Release(f) }, nil
}
