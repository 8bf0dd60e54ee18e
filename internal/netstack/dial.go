package netstack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/policy"
)

const dialTimeout = 10 * time.Second

// dialUpstream dials dst over proto ("tcp" or "udp") with a dialer whose
// Control hook asks the policy again, with the same arguments, about the
// address actually being connected to: the dial goes to the address the
// sandbox's connection was decided on, never through a resolution.
func dialUpstream(ctx context.Context, p *policy.Policy, proto string, names []string, dst netip.AddrPort) (net.Conn, error) {
	return dialChecked(ctx, proto, dst, func(ap netip.AddrPort) (bool, string) {
		return p.FlowAllowed(proto, names, ap.Addr(), ap.Port())
	})
}

// DialIntercepted dials dst over TCP for an intercepted connection: the
// interceptor has checked the request's host against the names pinned to
// dst, and the dialer's Control hook refuses, at connect time, an address
// that policy blocks. There is no resolution: dst is where the sandbox
// connected.
func DialIntercepted(ctx context.Context, p *policy.Policy, dst netip.AddrPort) (net.Conn, error) {
	return dialChecked(ctx, "tcp", dst, func(ap netip.AddrPort) (bool, string) {
		return p.AddrAllowed(ap.Addr())
	})
}

// dialChecked dials dst with a Control hook that refuses any other
// address, and any address that check refuses.
func dialChecked(ctx context.Context, proto string, dst netip.AddrPort, check func(netip.AddrPort) (bool, string)) (net.Conn, error) {
	d := net.Dialer{
		Timeout: dialTimeout,
		Control: func(network, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("refusing to dial %q: %w", address, err)
			}
			if ap.Addr().Unmap() != dst.Addr().Unmap() || ap.Port() != dst.Port() {
				return fmt.Errorf("refusing to dial %s: the flow was decided for %s", ap, dst)
			}
			if ok, reason := check(ap); !ok {
				code, detail, _ := strings.Cut(reason, ": ")
				return &policy.BlockError{Reason: code, Detail: fmt.Sprintf("refusing to dial %s: %s", ap, detail)}
			}
			return nil
		},
	}
	return d.DialContext(ctx, proto, dst.String())
}

// halfCloser is a connection whose write side can be shut down alone.
type halfCloser interface {
	net.Conn
	CloseWrite() error
}

// splice copies between the sandbox's connection and upstream in both
// directions, passing a half-close on, until both directions are done. It
// returns the bytes sent upstream and received from upstream.
func splice(sandbox, upstream halfCloser) (sent, received int64) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		var err error
		sent, err = io.Copy(upstream, sandbox)
		_ = upstream.CloseWrite()
		if err != nil {
			// A reset or a failure ends both directions.
			_ = sandbox.Close()
			_ = upstream.Close()
		}
	}()
	go func() {
		defer wg.Done()
		var err error
		received, err = io.Copy(sandbox, upstream)
		_ = sandbox.CloseWrite()
		if err != nil {
			_ = sandbox.Close()
			_ = upstream.Close()
		}
	}()
	wg.Wait()
	_ = sandbox.Close()
	_ = upstream.Close()
	return sent, received
}

// dialFailure returns the blocked flag and reason of an event for a
// failed upstream dial: a policy refusal at connect time is a block; any
// other failure (refused, unreachable, timed out) is an upstream error.
func dialFailure(err error) (blocked bool, reason string) {
	var be *policy.BlockError
	if errors.As(err, &be) {
		return true, be.Error()
	}
	return false, policy.ReasonUpstreamError + ": " + err.Error()
}
