// Package fdpass reads the descriptors that a unix socket message
// carried (SCM_RIGHTS).
package fdpass

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Rights returns every descriptor that the control data oob carried, in
// order; malformed control data carries none. The caller owns them.
func Rights(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for i := range msgs {
		if got, err := unix.ParseUnixRights(&msgs[i]); err == nil {
			fds = append(fds, got...)
		}
	}
	return fds
}

// One returns the one descriptor that the control data oob carried. Data
// that carried none, or more than one, is refused, and what it carried
// is closed.
func One(oob []byte) (int, error) {
	fds := Rights(oob)
	if len(fds) != 1 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return -1, fmt.Errorf("malformed rights: %d descriptors where one was sent", len(fds))
	}
	return fds[0], nil
}
