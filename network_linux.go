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
	"github.com/airlock-sandbox/airlock/internal/agentproto"
	"github.com/airlock-sandbox/airlock/internal/intercept"
	"github.com/airlock-sandbox/airlock/internal/netstack"
	"github.com/airlock-sandbox/airlock/internal/tap"
)

// checkNetworkSupport says, before anything starts, whether this process
// can give a sandbox of isolation iso its network, and how: as root, the
// supervisor makes the TAP device inside the sandbox's namespace itself;
// otherwise the agent makes it (it is root in the sandbox's namespaces)
// and sends it back, which needs /dev/net/tun to be open to the caller
// (the sandbox's root is the caller's uid).
func checkNetworkSupport(iso Isolation) (viaAgent bool, err error) {
	if iso != IsolationProcess {
		return false, fmt.Errorf("%w: network egress is available with process isolation in this version", ErrUnavailable)
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		return false, fmt.Errorf("%w: network egress needs /dev/net/tun (%v): load the tun module (modprobe tun)", ErrUnavailable, err)
	}
	if os.Geteuid() == 0 {
		return false, nil
	}
	f, err := os.OpenFile("/dev/net/tun", os.O_RDWR, 0)
	if err != nil {
		return false, fmt.Errorf("%w: network egress without root needs /dev/net/tun to be open to uid %d, and it is not (%v): `sudo chmod 0666 /dev/net/tun` (the default on most distributions; a udev rule keeps it), or run airlock as root (`airlock doctor` shows what this machine supports)", ErrUnavailable, os.Geteuid(), err)
	}
	f.Close()
	return true, nil
}

// attach makes the sandbox's TAP device inside the network namespace of
// process pid (the sandbox's agent), from this process: root only.
func (n *network) attach(pid int) (err error) {
	side := n.side()
	n.link, err = tap.Create(pid, tap.Config{
		Name:      linkName,
		Address:   side.Address,
		Gateway:   side.Gateway,
		AddressV6: side.AddressV6,
		GatewayV6: side.GatewayV6,
		MTU:       side.MTU,
	})
	if err != nil {
		return fmt.Errorf("make the sandbox's network interface: %w", err)
	}
	return nil
}

// linkSpec asks the agent to make the TAP device itself.
func (n *network) linkSpec() *agentproto.LinkSpec {
	side := n.side()
	return &agentproto.LinkSpec{
		Name:      linkName,
		Address:   side.Address.String(),
		Gateway:   side.Gateway.String(),
		AddressV6: side.AddressV6.String(),
		GatewayV6: side.GatewayV6.String(),
		MTU:       side.MTU,
	}
}

// run starts the interceptor and the userspace stack on the TAP device's
// file, n.link.
func (n *network) run(log *slog.Logger, emit func(api.NetworkEvent)) (err error) {
	cfg := netstack.Config{Policy: n.policy, Logger: log, OnEvent: emit, OnResolved: n.ca.Prewarm}
	defer func() {
		if err != nil {
			n.close()
		}
	}()
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
