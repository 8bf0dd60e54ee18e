package airlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/intercept"
	"github.com/airlock-sandbox/airlock/internal/netstack"
	"github.com/airlock-sandbox/airlock/internal/tap"
)

// checkNetworkSupport says, before anything starts, whether this process
// can give a sandbox of isolation iso its network.
func checkNetworkSupport(iso Isolation) error {
	if iso != IsolationProcess {
		return fmt.Errorf("%w: network egress is available with process isolation in this version", ErrUnavailable)
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: network egress needs airlock to run as root on this machine: the supervisor makes the sandbox's TAP device inside the sandbox's network namespace, which takes root; run airlock as root (sudo), or leave out network for a sandbox with no network at all (`airlock doctor` shows what this machine supports)", ErrUnavailable)
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		return fmt.Errorf("%w: network egress needs /dev/net/tun (%v): load the tun module (modprobe tun)", ErrUnavailable, err)
	}
	return nil
}

// start gives the sandbox whose agent is process pid its network: the
// TAP device in its namespace, and the userspace stack, with the
// interceptor, on the device.
func (n *network) start(pid int, log *slog.Logger, emit func(api.NetworkEvent)) (err error) {
	cfg := netstack.Config{Policy: n.policy, Logger: log, OnEvent: emit, OnResolved: n.ca.Prewarm}
	side := cfg.SandboxSide()
	defer func() {
		if err != nil {
			n.close()
		}
	}()
	n.link, err = tap.Create(pid, tap.Config{
		Name:      "eth0",
		Address:   side.Address,
		Gateway:   side.Gateway,
		AddressV6: side.AddressV6,
		GatewayV6: side.GatewayV6,
		MTU:       side.MTU,
	})
	if err != nil {
		return fmt.Errorf("make the sandbox's network interface: %w", err)
	}
	n.icpt, err = intercept.New(intercept.Config{
		Policy: n.policy,
		CA:     n.ca,
		Dial: func(ctx context.Context, dst netip.AddrPort, _ []string) (net.Conn, error) {
			return netstack.DialIntercepted(ctx, n.policy, dst)
		},
		OnEvent: emit,
		Logger:  log,
	})
	if err != nil {
		return fmt.Errorf("start the TLS and HTTP interceptor: %w", err)
	}
	cfg.Interceptor = n.icpt
	rc, err := n.link.SyscallConn()
	if err != nil {
		return err
	}
	var fd int
	if err := rc.Control(func(u uintptr) { fd = int(u) }); err != nil {
		return err
	}
	n.stack, err = netstack.Start(context.Background(), fd, cfg)
	if err != nil {
		return fmt.Errorf("start the sandbox's network stack: %w", err)
	}
	return nil
}

// close stops the stack, the interceptor and the device's file; the
// device itself went with the sandbox's namespace.
func (n *network) close() error {
	if n == nil || n.closed {
		return nil
	}
	n.closed = true
	var errs []error
	if n.stack != nil {
		errs = append(errs, n.stack.Close())
	}
	if n.icpt != nil {
		errs = append(errs, n.icpt.Close())
	}
	if n.link != nil {
		errs = append(errs, n.link.Close())
	}
	return errors.Join(errs...)
}
