// Package fdpass reads the descriptors that a unix socket message
// carried (SCM_RIGHTS).
package fdpass

import "golang.org/x/sys/unix"

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
