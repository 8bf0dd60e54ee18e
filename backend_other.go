//go:build !linux

package airlock

import (
	"context"
	"fmt"
	"runtime"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
)

func startBoundary(ctx context.Context, id string, c *Config, st storage, boot *agentproto.Boot) (backend, error) {
	return nil, fmt.Errorf("%w: airlock's %s isolation needs Linux, and this version has no backend for %s (the vm level will use Virtualization.framework on macOS); run `airlock doctor`", ErrUnavailable, c.Isolation, runtime.GOOS)
}
