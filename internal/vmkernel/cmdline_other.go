//go:build !linux

package vmkernel

import "errors"

// HostTSCkHz is not known where the host is not Linux.
func HostTSCkHz() (int, error) {
	return 0, errors.New("read the CPU's frequency: only on Linux")
}
