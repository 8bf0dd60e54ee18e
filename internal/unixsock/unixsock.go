// Package unixsock names unix sockets whose paths are too long for a
// socket address (sun_path holds 108 bytes on Linux, 104 on macOS): the
// state directory may sit under a long home directory.
package unixsock

import "net"

// Listen creates the unix socket at path, however long the path is.
func Listen(path string) (*net.UnixListener, error) {
	addr, release, err := Addr(path)
	if err != nil {
		return nil, err
	}
	defer release()
	ln, err := net.Listen("unix", addr)
	if err != nil {
		return nil, err
	}
	ul := ln.(*net.UnixListener)
	// The name to unlink on close is the long one, not the alias.
	ul.SetUnlinkOnClose(false)
	return ul, nil
}
