//go:build !linux

package cgroup

import (
	"context"
	"fmt"
	"runtime"
	"time"
)

var errNeedLinux = fmt.Errorf("%w: cgroups need Linux (this is %s)", ErrUnavailable, runtime.GOOS)

// Detect reports that cgroups are not available on this OS.
func Detect() Info {
	return Info{Reason: errNeedLinux.Error()}
}

// New fails: cgroups need Linux.
func New(ctx context.Context, id string, l Limits) (*Group, error) {
	return nil, errNeedLinux
}

// Sweep fails: cgroups need Linux.
func Sweep(minAge time.Duration) ([]string, error) {
	return nil, errNeedLinux
}

// Exists is always false: cgroups need Linux.
func Exists(id string) bool { return false }

// Reclaim has nothing to do: cgroups need Linux.
func Reclaim(id string) error { return nil }
