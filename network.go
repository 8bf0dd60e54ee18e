package airlock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/agentproto"
	"github.com/airlock-sandbox/airlock/internal/boundary"
	"github.com/airlock-sandbox/airlock/internal/intercept"
	"github.com/airlock-sandbox/airlock/internal/netstack"
	"github.com/airlock-sandbox/airlock/policy"
)

// ErrNoNetwork is returned by the policy methods of a sandbox created
// without Config.Network.
var ErrNoNetwork = errors.New("this sandbox has no network: it was created without a network policy; create it with one (network with an empty allowed_hosts list allows nothing, and hosts can then be added while it runs)")

// caEnv are the variables that make TLS clients in the sandbox trust the
// interception CA, for those that do not read the system store.
func caEnv() map[string]string {
	return map[string]string{
		"SSL_CERT_FILE":       agentproto.TrustBundleFile,
		"REQUESTS_CA_BUNDLE":  agentproto.TrustBundleFile,
		"CURL_CA_BUNDLE":      agentproto.TrustBundleFile,
		"GIT_SSL_CAINFO":      agentproto.TrustBundleFile,
		"NODE_EXTRA_CA_CERTS": agentproto.TrustCAFile,
	}
}

// network is the egress of a sandbox with a network policy.
type network struct {
	policy *policy.Policy
	ca     *intercept.CA
	// running parts, set once the boundary is up (see run).
	stack  *netstack.Stack
	icpt   *intercept.Interceptor
	link   *os.File
	closed bool
}

// linkName is the sandbox's network interface.
const linkName = "eth0"

// side is what the inside of the sandbox configures.
func (n *network) side() netstack.SandboxSide {
	return (&netstack.Config{}).SandboxSide()
}

// newNetwork checks the network part of c, and that this process can
// give the sandbox a network, and prepares its policy and CA, before
// anything is started.
func newNetwork(c *Config, be boundary.Backend) (*network, error) {
	if c.Network == nil {
		if len(c.Ports) == 0 {
			return nil, nil
		}
		// Published ports need the network; it allows nothing out.
		c.Network = &policy.Config{}
		if err := be.CheckNetwork(); err != nil {
			return nil, fmt.Errorf("publishing ports needs the sandbox's network, which allows no egress here: %w", err)
		}
	} else if err := be.CheckNetwork(); err != nil {
		return nil, err
	}
	p, err := policy.New(*c.Network, policy.Options{
		HostAddrs:   hostAddrs(),
		OnRequest:   c.OnRequest,
		OnResponse:  c.OnResponse,
		HookTimeout: c.HookTimeout,
		ScriptPrint: func(msg string) { c.Logger.Info("policy script", "print", msg) },
	})
	if err != nil {
		return nil, fmt.Errorf("network policy: %w", err)
	}
	for name := range p.Env() {
		if _, ok := c.Env[name]; ok {
			return nil, fmt.Errorf("network policy: secret %s is also set in env: the sandbox gets the secret's placeholder in that variable; remove it from env", name)
		}
	}
	home, err := Home()
	if err != nil {
		return nil, err
	}
	ca, err := intercept.LoadOrCreateCA(filepath.Join(home, "ca"))
	if err != nil {
		return nil, fmt.Errorf("load the TLS interception CA: %w", err)
	}
	return &network{policy: p, ca: ca}, nil
}

// linkSpec is the sandbox's side of its interface, for its backend to
// make.
func (n *network) linkSpec() *boundary.LinkSpec {
	side := n.side()
	return &boundary.LinkSpec{
		Name: linkName, Address: side.Address, Gateway: side.Gateway,
		AddressV6: side.AddressV6, GatewayV6: side.GatewayV6, MTU: side.MTU,
	}
}

// run starts the interceptor and the userspace stack on the file that
// carries the sandbox's frames, n.link.
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

// close stops the stack, the interceptor and the link's file; the
// interface itself goes with the sandbox.
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

// configureBoot gives the sandbox its name server, the CA in its trust
// store, the variables that point clients at it, and the secrets'
// placeholders.
func (n *network) configureBoot(b *agentproto.Boot) {
	side := n.side()
	var rc strings.Builder
	rc.WriteString("# airlock: the gateway answers DNS for the names that policy allows\n")
	for _, a := range side.DNS {
		fmt.Fprintf(&rc, "nameserver %s\n", a)
	}
	b.Root.Etc["resolv.conf"] = []byte(rc.String())
	b.Root.TrustCA = n.ca.CertPEM()
	extra := caEnv()
	maps.Copy(extra, n.policy.Env())
	for _, k := range slices.Sorted(maps.Keys(extra)) {
		b.Env = setEnv(b.Env, k, extra[k])
	}
}

// setEnv sets k=v in env, replacing an earlier value.
func setEnv(env []string, k, v string) []string {
	prefix := k + "="
	for i, e := range env {
		if strings.HasPrefix(e, prefix) {
			env[i] = prefix + v
			return env
		}
	}
	return append(env, prefix+v)
}

// hostAddrs lists this machine's own addresses, which the sandbox may
// never reach.
func hostAddrs() []netip.Addr {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr())
		}
	}
	return out
}

// Env returns the environment that every command gets from the sandbox
// (Config.Env, and a placeholder for each secret, never its value),
// without the variables airlock sets for itself.
func (s *Sandbox) Env() map[string]string {
	env := maps.Clone(s.cfg.Env)
	if env == nil {
		env = map[string]string{}
	}
	if s.net != nil {
		maps.Copy(env, s.net.policy.Env())
	}
	return env
}

// AllowHost adds a pattern to the allowed hosts of a running sandbox:
// "api.example.com", "*.example.com" or "*" open ports 80 and 443, and
// "api.example.com:8443" that port alone.
func (s *Sandbox) AllowHost(pattern string) error {
	if s.net == nil {
		return ErrNoNetwork
	}
	return s.net.policy.AllowHost(pattern)
}

// DenyHost adds a pattern to the denied hosts of a running sandbox: no
// new request, connection or DNS answer may match it.
func (s *Sandbox) DenyHost(pattern string) error {
	if s.net == nil {
		return ErrNoNetwork
	}
	return s.net.policy.DenyHost(pattern)
}

// RemoveHost removes a pattern from the allowed and denied hosts.
func (s *Sandbox) RemoveHost(pattern string) error {
	if s.net == nil {
		return ErrNoNetwork
	}
	return s.net.policy.RemoveHost(pattern)
}

// Hosts returns the allowed and denied host patterns now in force.
func (s *Sandbox) Hosts() (allowed, denied []string, err error) {
	if s.net == nil {
		return nil, nil, ErrNoNetwork
	}
	allowed, denied = s.net.policy.Hosts()
	return allowed, denied, nil
}

// HasNetwork reports whether the sandbox was created with a network.
func (s *Sandbox) HasNetwork() bool { return s.net != nil }

// CACertPEM returns the certificate of the CA that signs the certificates
// the sandbox sees for intercepted TLS, or nil without a network.
func (s *Sandbox) CACertPEM() []byte {
	if s.net == nil {
		return nil
	}
	return bytes.Clone(s.net.ca.CertPEM())
}

// NetworkStats are counters of a sandbox's network.
type NetworkStats struct {
	// LeavesMinted counts the TLS leaf certificates the interception CA
	// minted for this sandbox: one per name, then cached.
	LeavesMinted uint64 `json:"leaves_minted"`
	// Pins is the number of (name, address) pairs DNS has pinned.
	Pins int `json:"pins"`
	// DNSCached is the number of upstream answers the gateway's DNS
	// cache holds for the sandbox, and DNSCachedBytes their size (both
	// bounded).
	DNSCached      int `json:"dns_cached"`
	DNSCachedBytes int `json:"dns_cached_bytes"`
	// DroppedEvents counts the network events dropped because OnEvent
	// fell behind.
	DroppedEvents uint64 `json:"dropped_events"`
}

// NetworkStats returns the counters of the sandbox's network, or
// ErrNoNetwork.
func (s *Sandbox) NetworkStats() (NetworkStats, error) {
	if s.net == nil {
		return NetworkStats{}, ErrNoNetwork
	}
	st := NetworkStats{LeavesMinted: s.net.ca.Minted()}
	if s.net.stack != nil {
		st.Pins = s.net.stack.Pins().Len()
		st.DNSCached, st.DNSCachedBytes = s.net.stack.DNSCache()
		st.DroppedEvents = s.net.stack.DroppedEvents()
	}
	return st, nil
}
