//go:build !linux

package netstack

import (
	"context"
	"errors"
	"net"
)

// ErrNeedsLinux is returned by Start on systems other than Linux: the
// link endpoint reads frames from a file descriptor with Linux system
// calls.
var ErrNeedsLinux = errors.New("netstack: the userspace network needs Linux")

// Stack is the running network of one sandbox.
type Stack struct{}

// Start needs Linux; elsewhere it returns ErrNeedsLinux.
func Start(ctx context.Context, linkFD int, cfg Config) (*Stack, error) {
	if _, err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	return nil, ErrNeedsLinux
}

// Pins returns nil.
func (st *Stack) Pins() *PinSet { return nil }

// DNSCache returns 0, 0.
func (st *Stack) DNSCache() (entries, bytes int) { return 0, 0 }

// DroppedEvents returns 0.
func (st *Stack) DroppedEvents() uint64 { return 0 }

// Traffic returns zeros.
func (st *Stack) Traffic() (rx, tx uint64) { return 0, 0 }

// Close does nothing.
func (st *Stack) Close() error { return nil }

// ErrClosed is returned for work asked of a Stack that is closed.
var ErrClosed = errors.New("netstack: the sandbox's network is closed")

// ForwardInbound needs Linux; elsewhere it closes c and returns
// ErrNeedsLinux.
func (st *Stack) ForwardInbound(ctx context.Context, c *net.TCPConn, port uint16) (sent, received int64, err error) {
	c.Close()
	return 0, 0, ErrNeedsLinux
}

// SandboxAddr returns the sandbox's IPv4 address.
func (st *Stack) SandboxAddr() string { return DefaultSandboxV4.Addr().String() }
