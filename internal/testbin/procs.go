package testbin

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// HostProcs lists the host's processes as pid -> command line, its
// arguments separated by NUL.
func HostProcs() (map[int]string, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	out := map[int]string{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		out[pid] = string(b)
	}
	return out, nil
}

// ProcState returns the one-letter state of a host process, or "" if
// it is gone.
func ProcState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+3 > len(s) {
		return ""
	}
	return s[i+2 : i+3]
}

// Alive reports whether pid exists and is not a zombie.
func Alive(pid int) bool {
	st := ProcState(pid)
	return st != "" && st != "Z"
}

// WaitFor polls cond until it holds or d passes, and reports whether it
// held.
func WaitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}
