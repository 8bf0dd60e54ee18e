// Command echoinit is the /init of the vm launcher's test guest: it
// echoes what comes on the agent's virtio-serial port back to the host,
// and makes the kernel send a frame on eth0 (an ARP request), then waits.
package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

func say(format string, args ...any) {
	fmt.Fprintf(os.Stdout, "echoinit: "+format+"\n", args...)
}

func main() {
	say("started")
	if err := unix.Mount("devtmpfs", "/dev", "devtmpfs", 0, ""); err != nil && err != unix.EBUSY {
		say("FAIL mount /dev: %v", err)
	}
	if err := unix.Mount("sysfs", "/sys", "sysfs", 0, ""); err != nil {
		say("FAIL mount /sys: %v", err)
	}
	go frame()
	port, err := findPort("airlock.agent")
	if err != nil {
		say("FAIL %v", err)
		select {}
	}
	f, err := os.OpenFile(port, os.O_RDWR, 0)
	if err != nil {
		say("FAIL open %s: %v", port, err)
		select {}
	}
	say("port %s", port)
	io.WriteString(f, "ready\n")
	buf := make([]byte, 4096)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			f.Write(buf[:n])
		}
		if err != nil && err != io.EOF {
			say("FAIL read %s: %v", port, err)
			select {}
		}
		if n == 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// findPort finds the virtio-serial port QEMU named name.
func findPort(name string) (string, error) {
	for range 100 {
		ms, _ := filepath.Glob("/sys/class/virtio-ports/*/name")
		for _, m := range ms {
			b, err := os.ReadFile(m)
			if err == nil && strings.TrimSpace(string(b)) == name {
				return "/dev/" + filepath.Base(filepath.Dir(m)), nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return "", fmt.Errorf("no virtio-serial port named %s", name)
}

// frame brings eth0 up with 10.0.2.15/24 and sends a datagram to
// 10.0.2.2: the kernel first asks for its address, in a frame the host
// reads from the other end of the network socket.
func frame() {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
	if err != nil {
		say("FAIL socket: %v", err)
		return
	}
	set := func(req uint, addr []byte) error {
		r, err := unix.NewIfreq("eth0")
		if err == nil {
			err = r.SetInet4Addr(addr)
		}
		if err == nil {
			err = unix.IoctlIfreq(fd, req, r)
		}
		return err
	}
	if err := set(unix.SIOCSIFADDR, []byte{10, 0, 2, 15}); err != nil {
		say("FAIL set address: %v", err)
		return
	}
	if err := set(unix.SIOCSIFNETMASK, []byte{255, 255, 255, 0}); err != nil {
		say("FAIL set netmask: %v", err)
		return
	}
	ifr, err := unix.NewIfreq("eth0")
	if err != nil {
		say("FAIL ifreq: %v", err)
		return
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		say("FAIL get flags: %v", err)
		return
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		say("FAIL bring eth0 up: %v", err)
		return
	}
	for range 50 {
		unix.Sendto(fd, []byte("x"), 0, &unix.SockaddrInet4{Port: 9, Addr: [4]byte{10, 0, 2, 2}})
		time.Sleep(100 * time.Millisecond)
	}
}
