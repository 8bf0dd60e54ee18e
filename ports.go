package airlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/netstack"
	"github.com/airlock-sandbox/airlock/policy"
)

// PortMapping asks for a TCP port of the sandbox to be published on the
// host (Config.Ports, Sandbox.Publish), as docker's -p does: SandboxPort
// (required), HostPort (0: a free one), HostIP (empty: 127.0.0.1) and
// Protocol (empty or "tcp"; "udp" is refused).
type PortMapping = api.PortMapping

// PublishedPort is a published port: the host address bound, and the
// sandbox's port it leads to.
type PublishedPort = api.PortForward

// Bounds of published ports.
const (
	// MaxPublishedPorts bounds the ports one sandbox publishes at once.
	MaxPublishedPorts = 64
	// MaxPortConns bounds the connections open at once through one
	// published port; more are reset as they arrive.
	MaxPortConns = 256
	// MaxInboundConns bounds the connections open at once through all
	// the published ports of a sandbox; more are reset as they arrive.
	MaxInboundConns = 1024
)

// DefaultHostIP is the host address a port is published on when its
// mapping gives none: reachable from this machine only.
const DefaultHostIP = "127.0.0.1"

// ErrPortNotPublished is returned by Unpublish for a host port the
// sandbox does not publish.
var ErrPortNotPublished = errors.New("port not published")

// ErrTooManyPorts is returned by Publish for a sandbox that already
// publishes MaxPublishedPorts ports.
var ErrTooManyPorts = errors.New("too many published ports")

// ErrHostPortUnavailable matches the error of a port that could not be
// published because its host address cannot be listened on: the port
// is in use, privileged, or the address is not this host's.
var ErrHostPortUnavailable = errors.New("host port unavailable")

// hostPortError is a host address that cannot be listened on.
type hostPortError struct {
	msg string
	err error
}

func (e *hostPortError) Error() string        { return e.msg }
func (e *hostPortError) Unwrap() error        { return e.err }
func (e *hostPortError) Is(target error) bool { return target == ErrHostPortUnavailable }

// errPortsNoNetwork is why a sandbox without a network cannot publish
// ports; it matches ErrNoNetwork.
type errPortsNoNetwork struct{}

func (errPortsNoNetwork) Error() string {
	return "publishing ports needs the sandbox's network, and this sandbox has none: it was created without ports or a network policy; create it with the ports to publish (Config.Ports, -p, create's \"ports\"), which gives it a network on which no egress is allowed, or with a network policy"
}

func (errPortsNoNetwork) Is(target error) bool { return target == ErrNoNetwork }

// normalize checks m and returns it with its defaults: HostIP 127.0.0.1,
// Protocol "tcp".
func normalizePort(m PortMapping) (PortMapping, netip.Addr, error) {
	if m.SandboxPort == 0 {
		return m, netip.Addr{}, errors.New("sandbox_port is required: give the port, 1 to 65535, a server in the sandbox listens on")
	}
	switch strings.ToLower(m.Protocol) {
	case "", "tcp":
		m.Protocol = "tcp"
	case "udp":
		return m, netip.Addr{}, fmt.Errorf("sandbox port %d/udp: only TCP ports can be published: publish a TCP port (protocol tcp, or none)", m.SandboxPort)
	default:
		return m, netip.Addr{}, fmt.Errorf("sandbox port %d: protocol %q is not tcp: only TCP ports can be published", m.SandboxPort, m.Protocol)
	}
	m.HostIP = cmp.Or(m.HostIP, DefaultHostIP)
	ip, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(m.HostIP, "["), "]"))
	if err != nil {
		return m, netip.Addr{}, fmt.Errorf("sandbox port %d: host_ip %q is not an IP address: give one of this host's, such as 127.0.0.1 (the default), ::1, or 0.0.0.0 for every IPv4 address", m.SandboxPort, m.HostIP)
	}
	ip = ip.Unmap()
	m.HostIP = ip.String()
	return m, ip, nil
}

// validatePorts checks the ports of a Config.
func validatePorts(ports []PortMapping) error {
	if len(ports) > MaxPublishedPorts {
		return fmt.Errorf("ports: %d ports to publish, more than %d: publish fewer", len(ports), MaxPublishedPorts)
	}
	type key struct {
		ip   netip.Addr
		port uint16
	}
	seen := map[key]bool{}
	for _, m := range ports {
		m, ip, err := normalizePort(m)
		if err != nil {
			return fmt.Errorf("ports: %w", err)
		}
		if m.HostPort == 0 {
			continue
		}
		k := key{ip, m.HostPort}
		if seen[k] {
			return fmt.Errorf("ports: host port %s is given twice: a host address and port can lead to one sandbox port only", net.JoinHostPort(m.HostIP, fmt.Sprint(m.HostPort)))
		}
		seen[k] = true
	}
	return nil
}

// forward is one published port: a listener on the host, and the
// connections it has accepted, each spliced with a connection to the
// sandbox's port through its network stack.
type forward struct {
	pub PublishedPort
	ip  netip.Addr
	// sandboxIP is the sandbox's address, where connections go.
	sandboxIP string
	ln        *net.TCPListener
	ctx       context.Context
	cancel    context.CancelFunc
	slots     chan struct{}
	wg        sync.WaitGroup

	mu     sync.Mutex
	conns  map[*net.TCPConn]struct{}
	closed bool
}

// ports is a sandbox's published ports.
type ports struct {
	mu       sync.Mutex
	closed   bool
	forwards []*forward
	// notifyMu orders the calls of watchers, so that the last call has
	// the last list.
	notifyMu sync.Mutex
	watchers map[int]func([]PublishedPort)
	nextID   int
	// slots bounds the connections through all the forwards at once
	// (MaxInboundConns); made with the first forward.
	slots chan struct{}
}

// Publish publishes a TCP port of the sandbox on the host, as docker's
// -p does: it listens on m.HostIP (default 127.0.0.1) at m.HostPort (0:
// a free port, which the result gives), and each connection accepted
// there is connected to m.SandboxPort of the sandbox's own address
// through the sandbox's network stack and spliced with it, both ways.
// A server in the sandbox must listen on all its addresses (0.0.0.0) or
// on the sandbox's own, not on 127.0.0.1 alone. Nothing of the egress
// policy changes: the sandbox still reaches only what it allows.
//
// It needs the sandbox's network (HasNetwork); Config.Ports gives a
// sandbox one that allows no egress. At most MaxPublishedPorts ports are
// published at once, each with at most MaxPortConns connections open,
// and MaxInboundConns across them; more are reset as they arrive.
// Unpublish stops one; Close stops them all.
func (s *Sandbox) Publish(ctx context.Context, m PortMapping) (PublishedPort, error) {
	if err := s.Err(); err != nil {
		return PublishedPort{}, err
	}
	if s.net == nil {
		return PublishedPort{}, fmt.Errorf("publish sandbox port %d: %w", m.SandboxPort, errPortsNoNetwork{})
	}
	m, ip, err := normalizePort(m)
	if err != nil {
		return PublishedPort{}, fmt.Errorf("publish a port: %w", err)
	}
	pub, err := s.publish(ctx, m, ip)
	if err != nil {
		return PublishedPort{}, err
	}
	s.notifyPorts()
	return pub, nil
}

func (s *Sandbox) publish(ctx context.Context, m PortMapping, ip netip.Addr) (PublishedPort, error) {
	p := &s.ports
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return PublishedPort{}, cmp.Or(s.Err(), ErrClosed)
	}
	if len(p.forwards) >= MaxPublishedPorts {
		return PublishedPort{}, fmt.Errorf("publish sandbox port %d: %w: the sandbox already publishes %d, the most it may: stop one first", m.SandboxPort, ErrTooManyPorts, MaxPublishedPorts)
	}
	network := "tcp4"
	if ip.Is6() {
		network = "tcp6"
	}
	want := netip.AddrPortFrom(ip, m.HostPort)
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, network, want.String())
	if err != nil {
		return PublishedPort{}, listenError(m, want, err)
	}
	ln := l.(*net.TCPListener)
	bound := netip.AddrPortFrom(ip, uint16(ln.Addr().(*net.TCPAddr).Port))
	fctx, cancel := context.WithCancel(context.Background())
	f := &forward{
		pub:    PublishedPort{HostIP: ip.String(), HostPort: bound.Port(), SandboxPort: m.SandboxPort, Protocol: "tcp"},
		ip:     ip,
		ln:     ln,
		ctx:    fctx,
		cancel: cancel,
		slots:  make(chan struct{}, MaxPortConns),
		conns:  map[*net.TCPConn]struct{}{},
		// The stack exists: publish runs once the network does.
		sandboxIP: s.net.stack.SandboxAddr(),
	}
	if p.slots == nil {
		p.slots = make(chan struct{}, MaxInboundConns)
	}
	p.forwards = append(p.forwards, f)
	f.wg.Add(1)
	go s.serveForward(f, p.slots)
	s.log.Info("port published", "host", bound.String(), "sandbox_port", m.SandboxPort)
	return f.pub, nil
}

// listenError says why a host address could not be listened on, and
// what to do.
func listenError(m PortMapping, at netip.AddrPort, err error) error {
	what := fmt.Sprintf("publish sandbox port %d on host address %s", m.SandboxPort, at)
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		what += ": the host port is in use by another program: choose another host port, or 0 (leave it out) for a free one"
	case errors.Is(err, syscall.EACCES):
		what += ": ports below 1024 need privileges on this host: choose a host port of 1024 or more, or 0 for a free one"
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		what += fmt.Sprintf(": %s is not an address of this host: give one of its addresses, 127.0.0.1 (the default), or 0.0.0.0 for all of them", at.Addr())
	default:
		what += ": " + err.Error()
	}
	return &hostPortError{msg: what, err: err}
}

// serveForward accepts connections on f's listener until it is closed;
// each takes one of f's slots and one of the sandbox's, all.
func (s *Sandbox) serveForward(f *forward, all chan struct{}) {
	defer f.wg.Done()
	backoff := time.Duration(0)
	for {
		c, err := f.ln.AcceptTCP()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || f.ctx.Err() != nil {
				return
			}
			// Out of file descriptors, for one: wait a little, as
			// net/http's server does, rather than spin.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.log.Warn("published port: accept failed", "host", f.ln.Addr().String(), "err", err, "retry_in", backoff)
			select {
			case <-time.After(backoff):
				continue
			case <-f.ctx.Done():
				return
			}
		}
		backoff = 0
		if why := takeSlot(f.slots, all); why != "" {
			s.log.Warn("published port: connection refused", "host", f.ln.Addr().String(), "sandbox_port", f.pub.SandboxPort, "reason", why)
			_ = c.SetLinger(0)
			c.Close()
			s.emitNetwork(f.event(policy.ReasonLimit + ": " + why))
			continue
		}
		release := func() {
			<-f.slots
			<-all
		}
		if !f.track(c) {
			release()
			return
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			defer release()
			defer f.untrack(c)
			start := time.Now()
			in, out, err := s.net.stack.ForwardInbound(f.ctx, c, f.pub.SandboxPort)
			if errors.Is(err, context.Canceled) || errors.Is(err, netstack.ErrClosed) {
				return // stopped with the port or the sandbox
			}
			ev := f.event("")
			if err != nil {
				s.log.Debug("published port: connection not forwarded", "host", f.ln.Addr().String(), "sandbox_port", f.pub.SandboxPort, "err", err)
				ev.Reason = policy.ReasonUpstreamError + ": " + err.Error()
			}
			ev.RequestBytes, ev.ResponseBytes = in, out
			ev.DurationMs = time.Since(start).Milliseconds()
			s.emitNetwork(ev)
		}()
	}
}

// event is the network event of a connection through f.
func (f *forward) event(reason string) api.NetworkEvent {
	return api.NetworkEvent{
		Kind:   api.NetInbound,
		Host:   net.JoinHostPort(f.pub.HostIP, strconv.Itoa(int(f.pub.HostPort))),
		IP:     f.sandboxIP,
		Port:   f.pub.SandboxPort,
		Proto:  "tcp",
		Reason: reason,
	}
}

// takeSlot takes a slot of one forward and one of the sandbox's, or
// neither and says why.
func takeSlot(one, all chan struct{}) (why string) {
	select {
	case one <- struct{}{}:
	default:
		return fmt.Sprintf("%d connections already open through this port, the most one takes", MaxPortConns)
	}
	select {
	case all <- struct{}{}:
		return ""
	default:
		<-one
		return fmt.Sprintf("%d connections already open through the sandbox's published ports, the most they take together", MaxInboundConns)
	}
}

// track registers a connection to close with f, unless f is closed.
func (f *forward) track(c *net.TCPConn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		c.Close()
		return false
	}
	f.conns[c] = struct{}{}
	return true
}

func (f *forward) untrack(c *net.TCPConn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.conns, c)
}

// close stops the listener and every connection, and waits for them.
func (f *forward) close() {
	f.mu.Lock()
	f.closed = true
	conns := f.conns
	f.conns = nil
	f.mu.Unlock()
	f.cancel()
	f.ln.Close()
	for c := range conns {
		c.Close()
	}
	f.wg.Wait()
}

// Unpublish stops the sandbox's ports published at hostPort on hostIP,
// or on any host address when hostIP is empty: their listeners and
// connections close. It returns what it stopped, or an error that
// matches ErrPortNotPublished when nothing matched.
func (s *Sandbox) Unpublish(hostIP string, hostPort uint16) ([]PublishedPort, error) {
	var ip netip.Addr
	if hostIP != "" {
		var err error
		if ip, err = netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(hostIP, "["), "]")); err != nil {
			return nil, fmt.Errorf("stop a published port: host_ip %q is not an IP address", hostIP)
		}
		ip = ip.Unmap()
	}
	p := &s.ports
	p.mu.Lock()
	var stop []*forward
	p.forwards = slices.DeleteFunc(p.forwards, func(f *forward) bool {
		if f.pub.HostPort == hostPort && (!ip.IsValid() || f.ip == ip) {
			stop = append(stop, f)
			return true
		}
		return false
	})
	var published []string
	for _, f := range p.forwards {
		published = append(published, fmt.Sprintf("%s -> %d", net.JoinHostPort(f.pub.HostIP, fmt.Sprint(f.pub.HostPort)), f.pub.SandboxPort))
	}
	p.mu.Unlock()
	if len(stop) == 0 {
		at := fmt.Sprint(hostPort)
		if ip.IsValid() {
			at = netip.AddrPortFrom(ip, hostPort).String()
		}
		list := "none"
		if len(published) > 0 {
			list = strings.Join(published, ", ")
		}
		return nil, fmt.Errorf("%w: sandbox %s publishes nothing at host port %s (published: %s)", ErrPortNotPublished, s.id, at, list)
	}
	out := make([]PublishedPort, 0, len(stop))
	for _, f := range stop {
		f.close()
		out = append(out, f.pub)
		s.log.Info("port unpublished", "host", f.ln.Addr().String(), "sandbox_port", f.pub.SandboxPort)
	}
	s.notifyPorts()
	return out, nil
}

// Ports lists the sandbox's published ports, by host port.
func (s *Sandbox) Ports() []PublishedPort {
	p := &s.ports
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]PublishedPort, 0, len(p.forwards))
	for _, f := range p.forwards {
		out = append(out, f.pub)
	}
	slices.SortFunc(out, func(a, b PublishedPort) int {
		return cmp.Or(cmp.Compare(a.HostPort, b.HostPort), strings.Compare(a.HostIP, b.HostIP))
	})
	return out
}

// WatchPorts calls fn with the sandbox's published ports (Ports) each
// time they change, until stop is called; calls do not overlap, and the
// last has the ports in force. fn must not call Publish or Unpublish.
func (s *Sandbox) WatchPorts(fn func([]PublishedPort)) (stop func()) {
	p := &s.ports
	p.notifyMu.Lock()
	defer p.notifyMu.Unlock()
	if p.watchers == nil {
		p.watchers = map[int]func([]PublishedPort){}
	}
	id := p.nextID
	p.nextID++
	p.watchers[id] = fn
	return func() {
		p.notifyMu.Lock()
		defer p.notifyMu.Unlock()
		delete(p.watchers, id)
	}
}

func (s *Sandbox) notifyPorts() {
	p := &s.ports
	p.notifyMu.Lock()
	defer p.notifyMu.Unlock()
	if len(p.watchers) == 0 {
		return
	}
	list := s.Ports()
	for _, fn := range p.watchers {
		fn(list)
	}
}

// closePorts stops every published port, for good.
func (s *Sandbox) closePorts() {
	p := &s.ports
	p.mu.Lock()
	p.closed = true
	stop := p.forwards
	p.forwards = nil
	p.mu.Unlock()
	for _, f := range stop {
		f.close()
	}
}

// publishConfigured publishes the ports of Config.Ports, as the sandbox
// starts.
func (s *Sandbox) publishConfigured(ctx context.Context) error {
	for _, m := range s.cfg.Ports {
		m, ip, err := normalizePort(m)
		if err != nil {
			return fmt.Errorf("publish a port: %w", err)
		}
		if _, err := s.publish(ctx, m, ip); err != nil {
			return err
		}
	}
	return nil
}
