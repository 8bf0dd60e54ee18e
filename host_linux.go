package airlock

import (
	"os"

	"golang.org/x/sys/unix"
)

// hostMemoryBytes is the host's memory, or 0 when it cannot be read.
func hostMemoryBytes() int64 {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return 0
	}
	return int64(si.Totalram) * int64(si.Unit)
}

// canMountDisks reports whether a disk-backed writable tree can be made:
// it needs loop devices, which need root.
func canMountDisks() bool { return os.Geteuid() == 0 }
