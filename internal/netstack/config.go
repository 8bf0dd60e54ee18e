package netstack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"

	"github.com/airlock-sandbox/airlock/policy"
)

// Defaults for Config.
var (
	DefaultGatewayV4 = netip.MustParseAddr("10.88.0.1")
	DefaultSandboxV4 = netip.MustParsePrefix("10.88.0.2/24")
	// GatewayV6 is the gateway's IPv6 link-local address: the next hop
	// for IPv6, which gets the same decisions as IPv4.
	GatewayV6 = netip.MustParseAddr("fe80::1")
	// SandboxV6 is the sandbox's IPv6 address: IPv6 reaches the gateway
	// and gets the same decisions as IPv4, never a way around them.
	SandboxV6 = netip.MustParsePrefix("fd88::2/64")
	// NameServerV6 is the gateway's address in the sandbox's IPv6
	// network, where it answers DNS as it does at the IPv4 gateway.
	NameServerV6 = netip.MustParseAddr("fd88::1")
)

const (
	// DefaultMTU is the MTU of the sandbox's link when Config.MTU is 0.
	// The link is virtual, with no wire behind it, and upstream goes over
	// the host's own connections: a large MTU carries a bulk transfer in
	// a tenth of the frames, and so of the system calls, that 1500 would.
	DefaultMTU = 65520
	// DefaultMaxConns bounds the TCP connections and UDP flows forwarded
	// at once.
	DefaultMaxConns = 1024
	// DefaultMaxPins bounds the (name, address) pairs of the pin set.
	DefaultMaxPins = 4096
)

// Config describes the network of one sandbox.
type Config struct {
	// Policy decides every name, address and flow. Required: there is
	// no egress without a policy.
	Policy *policy.Policy
	// GatewayV4 is the gateway's address, which is also the sandbox's
	// DNS server; the zero value means DefaultGatewayV4.
	GatewayV4 netip.Addr
	// SandboxV4 is the sandbox's address and prefix; the zero value means
	// DefaultSandboxV4. GatewayV4 must lie inside it.
	SandboxV4 netip.Prefix
	// MTU of the link; 0 means DefaultMTU.
	MTU uint32
	// MaxConns bounds the TCP connections and UDP flows forwarded at
	// once; 0 means DefaultMaxConns.
	MaxConns int
	// MaxPins bounds the pin set; 0 means DefaultMaxPins.
	MaxPins int
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
	// Interceptor, when set, serves the TCP connections that carry HTTP
	// or TLS to a host that policy allows (package intercept). Without
	// it, TCP passes only by egress rules.
	Interceptor Interceptor
	// OnResolved, when set, is called with each name that DNS answered
	// with allowed addresses (to mint its TLS leaf ahead of the first
	// connection). It must not block.
	OnResolved func(name string)
	// OnEvent receives one Event per DNS answer, connection and blocked
	// flow. It is called from one goroutine of its own, in order; when it
	// falls behind, events are dropped (Stack.DroppedEvents) rather than
	// slowing the network.
	OnEvent func(Event)
}

// Interceptor serves one TCP connection from the sandbox whose first
// bytes are TLS (ServeTLS) or HTTP (ServeHTTP); conn replays those bytes.
// dst is where the sandbox connected, names the names that DNS pinned to
// dst's address. Each call returns when the connection is over, having
// closed conn, and reports the connection's requests as events itself.
// conn has a method SetCork(on bool), which holds back partial TCP
// segments while on and sends them when turned off.
type Interceptor interface {
	ServeTLS(ctx context.Context, conn net.Conn, dst netip.AddrPort, names []string)
	ServeHTTP(ctx context.Context, conn net.Conn, dst netip.AddrPort, names []string)
}

// withDefaults returns c with its zero fields set to their defaults, or an
// error that says what is wrong.
func (c Config) withDefaults() (Config, error) {
	if c.Policy == nil {
		return c, errors.New("netstack: Config.Policy is required")
	}
	c = c.withAddressing()
	if c.MaxConns <= 0 {
		c.MaxConns = DefaultMaxConns
	}
	if c.MaxPins <= 0 {
		c.MaxPins = DefaultMaxPins
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case !c.GatewayV4.Is4() || !c.SandboxV4.Addr().Is4():
		return c, fmt.Errorf("netstack: gateway %s and sandbox %s must be IPv4", c.GatewayV4, c.SandboxV4)
	case !c.SandboxV4.Contains(c.GatewayV4):
		return c, fmt.Errorf("netstack: gateway %s is outside the sandbox's network %s", c.GatewayV4, c.SandboxV4)
	case c.GatewayV4 == c.SandboxV4.Addr():
		return c, fmt.Errorf("netstack: gateway and sandbox share the address %s", c.GatewayV4)
	case c.MTU < 1280 || c.MTU > 65535:
		return c, fmt.Errorf("netstack: MTU %d out of range [1280, 65535]", c.MTU)
	}
	return c, nil
}

// withAddressing returns c with its zero addresses and MTU set to their
// defaults.
func (c Config) withAddressing() Config {
	if !c.GatewayV4.IsValid() {
		c.GatewayV4 = DefaultGatewayV4
	}
	if !c.SandboxV4.IsValid() {
		c.SandboxV4 = DefaultSandboxV4
	}
	if c.MTU == 0 {
		c.MTU = DefaultMTU
	}
	return c
}

// SandboxSide is what the inside of the sandbox must configure on its only
// interface.
type SandboxSide struct {
	// Address is the interface's address and prefix ("10.88.0.2/24").
	Address netip.Prefix
	// Gateway is the next hop of the default route.
	Gateway netip.Addr
	// AddressV6 and GatewayV6 are the IPv6 address and next hop (a
	// link-local address).
	AddressV6 netip.Prefix
	GatewayV6 netip.Addr
	// DNS lists the name servers for resolv.conf (the gateway, at its
	// IPv4 and IPv6 addresses).
	DNS []netip.Addr
	// MTU of the interface.
	MTU uint32
}

// SandboxSide describes what the inside of the sandbox must configure,
// with the defaults applied.
func (c *Config) SandboxSide() SandboxSide {
	d := c.withAddressing()
	return SandboxSide{
		Address:   d.SandboxV4,
		Gateway:   d.GatewayV4,
		AddressV6: SandboxV6,
		GatewayV6: GatewayV6,
		DNS:       []netip.Addr{d.GatewayV4, NameServerV6},
		MTU:       d.MTU,
	}
}
