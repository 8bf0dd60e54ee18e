//go:build !linux

package state

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// ProcessStartTime returns 0 ("unknown": the pid alone decides liveness)
// when process pid exists. Only Linux reports start times here.
func ProcessStartTime(pid int) (uint64, error) {
	if !processExists(pid) {
		return 0, fmt.Errorf("read start time of process %d: no such process", pid)
	}
	return 0, nil
}

// Alive reports whether process pid exists. startTime is ignored: this
// system does not report it, so a reused pid counts as alive.
func Alive(pid int, startTime uint64) bool {
	return processExists(pid)
}

func processExists(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

// socketPeer fails: this system's unix sockets are not asked for their
// peer here. A damaged record then reads as running only while a
// detached supervisor is alive.
func socketPeer(path string) (int, error) {
	return 0, errors.New("finding the process serving a socket needs Linux")
}
