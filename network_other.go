//go:build !linux

package airlock

import (
	"fmt"
	"log/slog"
	"runtime"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/agentproto"
)

func checkNetworkSupport(Isolation) (bool, error) {
	return false, fmt.Errorf("%w: network egress needs Linux in this version (this is %s)", ErrUnavailable, runtime.GOOS)
}

func (n *network) attach(int) error {
	_, err := checkNetworkSupport(IsolationProcess)
	return err
}

func (n *network) linkSpec() *agentproto.LinkSpec { return nil }

func (n *network) run(*slog.Logger, func(api.NetworkEvent)) error {
	_, err := checkNetworkSupport(IsolationProcess)
	return err
}

func (n *network) close() error { return nil }
