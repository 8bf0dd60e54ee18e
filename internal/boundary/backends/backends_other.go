//go:build !linux

package backends

import (
	"fmt"
	"runtime"

	"github.com/airlock-sandbox/airlock/internal/boundary"
)

// For returns the backend of isolation level iso: none off Linux yet.
func For(iso string) (boundary.Backend, error) {
	return nil, fmt.Errorf("%w: airlock's %s isolation needs Linux, and this version has no backend for %s (the vm level will use Virtualization.framework on macOS); run `airlock doctor`", boundary.ErrUnavailable, iso, runtime.GOOS)
}

// Sweep has nothing to clean where sandboxes use no host cgroups.
func Sweep() []string { return nil }

// Reclaim has nothing to clean where sandboxes use no host cgroups.
func Reclaim(id string) error { return nil }
