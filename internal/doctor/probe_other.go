//go:build !linux

package doctor

import (
	"os"
	"os/exec"
	"runtime"
	"strings"
)

// liveHost describes a non-Linux host. Run reports every level as
// unsupported there without calling any Linux probe, so those stay nil.
func liveHost() *host {
	return &host{
		goos:   runtime.GOOS,
		goarch: runtime.GOARCH,
		uid:    os.Getuid(),
		kernel: unameRelease,
	}
}

// unameRelease runs uname -r, which exists on macOS and the BSDs.
func unameRelease() string {
	out, err := exec.Command("uname", "-r").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}
