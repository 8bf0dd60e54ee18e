//go:build !linux

package airlock

import (
	"fmt"
	"log/slog"
	"runtime"

	"github.com/airlock-sandbox/airlock/api"
)

func checkNetworkSupport(Isolation) error {
	return fmt.Errorf("%w: network egress needs Linux in this version (this is %s)", ErrUnavailable, runtime.GOOS)
}

func (n *network) start(int, *slog.Logger, func(api.NetworkEvent)) error {
	return checkNetworkSupport(IsolationProcess)
}

func (n *network) close() error { return nil }
