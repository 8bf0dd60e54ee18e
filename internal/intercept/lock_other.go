//go:build !unix

package intercept

import "os"

// lockDir creates the lock file and takes no lock: without flock,
// creation relies on linking each file into place, which fails when
// another process got there first.
func lockDir(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	return func() { _ = f.Close() }, nil
}
