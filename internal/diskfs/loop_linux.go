package diskfs

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// attachLoop attaches backing to a free loop device, which clears itself
// when its last user closes it. It returns the open device and its path;
// the device stays attached while the returned file is open.
func attachLoop(backing *os.File, name string) (*os.File, string, error) {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return nil, "", fmt.Errorf("open /dev/loop-control (a disk larger than memory needs root and loop devices; modprobe loop): %w", err)
	}
	defer ctl.Close()
	cfg := unix.LoopConfig{Fd: uint32(backing.Fd()), Size: 4096}
	cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR | unix.LO_FLAGS_DIRECT_IO
	copy(cfg.Info.File_name[:len(cfg.Info.File_name)-1], "airlock "+name)
	// Another process may take the device between GET_FREE and
	// CONFIGURE; then ask again.
	for range 16 {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, "", fmt.Errorf("find a free loop device: %w", err)
		}
		dev := fmt.Sprintf("/dev/loop%d", n)
		loop, err := os.OpenFile(dev, os.O_RDWR, 0)
		if err != nil {
			return nil, "", fmt.Errorf("open %s: %w", dev, err)
		}
		err = unix.IoctlLoopConfigure(int(loop.Fd()), &cfg)
		if errors.Is(err, unix.EINVAL) && cfg.Info.Flags&unix.LO_FLAGS_DIRECT_IO != 0 {
			// The backing filesystem has no direct I/O: go through its
			// page cache instead.
			cfg.Info.Flags &^= unix.LO_FLAGS_DIRECT_IO
			err = unix.IoctlLoopConfigure(int(loop.Fd()), &cfg)
		}
		switch {
		case err == nil:
			return loop, dev, nil
		case errors.Is(err, unix.EBUSY):
			loop.Close()
			continue
		default:
			loop.Close()
			return nil, "", fmt.Errorf("attach the disk's file to %s: %w", dev, err)
		}
	}
	return nil, "", errors.New("attach the disk's file to a loop device: every free device was taken by another process first, 16 times")
}
