package state

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/unixsock"
)

// ProcessStartTime returns the start time of process pid in clock ticks
// since boot (field 22 of /proc/<pid>/stat). Together with the pid it
// identifies a process across PID reuse.
func ProcessStartTime(pid int) (uint64, error) {
	_, start, err := procStat(pid)
	return start, err
}

// Alive reports whether process pid exists, has not exited (a zombie counts
// as exited) and, when startTime is not 0, started at startTime.
func Alive(pid int, startTime uint64) bool {
	if pid <= 0 {
		return false
	}
	state, start, err := procStat(pid)
	if err != nil {
		return false
	}
	if state == 'Z' || state == 'X' || state == 'x' {
		return false
	}
	return startTime == 0 || start == startTime
}

// procStat reads the state (field 3) and start time (field 22) of pid.
func procStat(pid int) (state byte, start uint64, err error) {
	if pid <= 0 {
		return 0, 0, fmt.Errorf("read start time of process %d: invalid pid", pid)
	}
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, fmt.Errorf("read start time of process %d: %w", pid, err)
	}
	defer f.Close()
	// The line is short; comm is at most 64 bytes even in newer kernels.
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return 0, 0, fmt.Errorf("read start time of process %d: %w", pid, err)
	}
	state, start, err = parseStat(b)
	if err != nil {
		return 0, 0, fmt.Errorf("read start time of process %d: %w", pid, err)
	}
	return state, start, nil
}

// parseStat extracts the state and start time from the content of
// /proc/<pid>/stat. The command name (field 2) is in parentheses and may
// itself contain spaces and ')', so fields are counted after the last ')'.
func parseStat(b []byte) (state byte, start uint64, err error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, errors.New("malformed /proc stat: no ')'")
	}
	fields := bytes.Fields(b[i+1:])
	// fields[0] is field 3 (state), so field N is fields[N-3].
	const startField = 22 - 3
	if len(fields) <= startField {
		return 0, 0, fmt.Errorf("malformed /proc stat: %d fields after the command name", len(fields))
	}
	if len(fields[0]) != 1 {
		return 0, 0, fmt.Errorf("malformed /proc stat: state %q", fields[0])
	}
	start, err = strconv.ParseUint(string(fields[startField]), 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("malformed /proc stat: start time: %w", err)
	}
	return fields[0][0], start, nil
}

// socketPeer connects to the unix socket at path and returns the pid of
// the process that serves it, as the kernel recorded when it listened.
func socketPeer(path string) (int, error) {
	addr, release, err := unixsock.Addr(path)
	if err != nil {
		return 0, err
	}
	defer release()
	d := net.Dialer{Timeout: socketProbeTimeout}
	c, err := d.Dial("unix", addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	raw, err := c.(*net.UnixConn).SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, cerr
	}
	if cred.Pid <= 0 {
		return 0, fmt.Errorf("the process serving %s is not visible here", path)
	}
	return int(cred.Pid), nil
}

// socketProbeTimeout bounds connecting to a control socket to find its
// server.
const socketProbeTimeout = 2 * time.Second
