package agent

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// closeOnExecAbove2 marks every descriptor from 3 up close-on-exec. What
// this process inherited stays its own (its channels, and any descriptor
// its launcher leaked: os/exec hands a child every descriptor that is not
// marked so, whoever opened it), and the processes it starts get only what
// it passes them by name. Without this, user commands would hold the
// spawner's socket to the agent, the agent binary opened on the host, and
// whatever the supervisor's own parent left open.
func closeOnExecAbove2() error {
	err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	if err == nil {
		return nil
	}
	// Before Linux 5.11: one at a time.
	ents, rerr := os.ReadDir("/proc/self/fd")
	if rerr != nil {
		return fmt.Errorf("mark inherited descriptors close-on-exec: %w (close_range: %v)", rerr, err)
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			unix.CloseOnExec(fd)
		}
	}
	return nil
}
