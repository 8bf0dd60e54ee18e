//go:build linux && !amd64 && !arm64

package seccomp

import (
	"errors"
	"fmt"
	"runtime"
)

// nativeArch reports that there is no syscall table for this architecture.
func nativeArch() (archSpec, error) {
	return archSpec{}, fmt.Errorf("seccomp: no filter for GOARCH=%s (supported: amd64, arm64): %w",
		runtime.GOARCH, errors.ErrUnsupported)
}
