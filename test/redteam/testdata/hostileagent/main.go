// Command hostileagent is a micro-VM's PID 1 that plays a hostile agent
// against the supervisor, in the mode its build names (-X main.mode=):
// flood sends endless bytes, huge announces a frame larger than any the
// host takes, garbage sends a frame that is no message, silent never
// answers, and exit ends the guest at once.
package main

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

var mode = "silent"

func main() {
	_ = unix.Mount("devtmpfs", "/dev", "devtmpfs", 0, "")
	_ = unix.Mount("sysfs", "/sys", "sysfs", 0, "")
	if mode == "exit" {
		os.Exit(3)
	}
	port := find("airlock.agent")
	f, err := os.OpenFile(port, os.O_RDWR, 0)
	if err != nil {
		os.Exit(4)
	}
	// Whatever the host sends is read and dropped, so that it never
	// blocks on a full port.
	go func() {
		buf := make([]byte, 64<<10)
		for {
			if _, err := f.Read(buf); err != nil {
				time.Sleep(10 * time.Millisecond)
			}
		}
	}()
	switch mode {
	case "flood":
		buf := make([]byte, 64<<10)
		for {
			_, _ = rand.Read(buf)
			if _, err := f.Write(buf); err != nil {
				time.Sleep(time.Millisecond)
			}
		}
	case "huge":
		_, _ = f.Write([]byte{0xff, 0xff, 0xff, 0xff})
	case "garbage":
		_, _ = f.Write([]byte{0, 0, 0, 8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	}
	select {}
}

// find returns the device of the virtio-serial port named name.
func find(name string) string {
	for {
		ms, _ := filepath.Glob("/sys/class/virtio-ports/*/name")
		for _, m := range ms {
			if b, err := os.ReadFile(m); err == nil && strings.TrimSpace(string(b)) == name {
				return "/dev/" + filepath.Base(filepath.Dir(m))
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}
