// Package fsctx reads what the kernel said on a filesystem context
// (fsopen) about a failed configuration or mount.
package fsctx

import (
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// Err adds to err the messages of filesystem context fd, if it has any.
func Err(fd int, err error) error {
	var msgs []string
	buf := make([]byte, 512)
	for range 8 {
		n, rerr := unix.Read(fd, buf)
		if rerr != nil || n <= 0 {
			break
		}
		msgs = append(msgs, strings.TrimSpace(string(buf[:n])))
	}
	if len(msgs) == 0 {
		return err
	}
	return fmt.Errorf("%w (%s)", err, strings.Join(msgs, "; "))
}
