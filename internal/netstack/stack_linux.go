package netstack

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/fdbased"
	"gvisor.dev/gvisor/pkg/tcpip/network/arp"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/airlock-sandbox/airlock/policy"
)

const (
	nicID = 1
	// GatewayMAC is the gateway's Ethernet address on the sandbox's link.
	GatewayMAC = "02:00:0a:58:00:01"
	// maxTCPInFlight bounds TCP handshakes being decided and dialled.
	maxTCPInFlight = 256
	// maxDNSTCPConns bounds DNS-over-TCP connections at once.
	maxDNSTCPConns = 16
	dnsTCPIdle     = 10 * time.Second
	udpIdle        = 60 * time.Second
	maxDatagram    = 65535
)

// Stack is the running network of one sandbox.
type Stack struct {
	cfg    Config
	s      *stack.Stack
	pins   *PinSet
	dns    *dnsServer
	events *emitter
	limits *limits
	ctx    context.Context
	cancel context.CancelFunc
	// slots bounds the TCP connections and UDP flows forwarded at once.
	slots  chan struct{}
	dnsTCP chan struct{}

	// udpDNS and tcpDNS serve DNS at each of the gateway's addresses.
	udpDNS []*gonet.UDPConn
	tcpDNS []*gonet.TCPListener

	mu     sync.Mutex
	closed bool
	open   map[io.Closer]struct{}
	wg     sync.WaitGroup
	once   sync.Once
}

// Start runs the sandbox's network on linkFD, a file descriptor that
// carries one Ethernet frame per read and write: a TAP device (IFF_TAP |
// IFF_NO_PI), or a SOCK_DGRAM or SOCK_SEQPACKET socket whose peer is the
// sandbox (a socketpair given to QEMU's dgram netdev, for example). The
// caller keeps ownership of linkFD: close it after Close. Cancelling ctx
// closes the Stack.
func Start(ctx context.Context, linkFD int, cfg Config) (*Stack, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	mode := fdbased.Readv
	if isSock, err := fdbased.IsSocketFD(linkFD); err != nil {
		return nil, fmt.Errorf("netstack: inspecting link fd %d: %w", linkFD, err)
	} else if isSock {
		mode = fdbased.RecvMMsg
	}
	mac, err := net.ParseMAC(GatewayMAC)
	if err != nil {
		return nil, err
	}
	ep, err := fdbased.New(&fdbased.Options{
		FDs:                []int{linkFD},
		MTU:                cfg.MTU,
		EthernetHeader:     true,
		Address:            tcpip.LinkAddress(mac),
		PacketDispatchMode: mode,
		ClosedFunc: func(e tcpip.Error) {
			cfg.Logger.Debug("netstack link closed", "err", e)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("netstack: link endpoint on fd %d: %w", linkFD, err)
	}

	s := stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, ipv6.NewProtocol, arp.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol},
	})
	sack := tcpip.TCPSACKEnabled(true)
	if e := s.SetTransportProtocolOption(tcp.ProtocolNumber, &sack); e != nil {
		s.Close()
		s.Wait()
		return nil, fmt.Errorf("netstack: enabling SACK: %s", e)
	}

	// The Stack and its forwarders come before the NIC: once the NIC
	// exists, the link's goroutines deliver the sandbox's packets, and
	// the handlers must be in place, written before those goroutines
	// read them.
	ctx, cancel := context.WithCancel(ctx)
	st := &Stack{
		cfg:    cfg,
		s:      s,
		pins:   NewPinSet(cfg.MaxPins),
		events: newEmitter(cfg.OnEvent),
		ctx:    ctx,
		cancel: cancel,
		slots:  make(chan struct{}, cfg.MaxConns),
		dnsTCP: make(chan struct{}, maxDNSTCPConns),
		open:   make(map[io.Closer]struct{}),
	}
	st.limits = newLimits(st.emit)
	st.dns = newDNSServer(cfg.Policy, st.pins, st.emit, cfg.Logger)
	st.dns.resolved = cfg.OnResolved

	tcpFwd := tcp.NewForwarder(s, 0, maxTCPInFlight, st.handleTCP)
	s.SetTransportProtocolHandler(tcp.ProtocolNumber, st.forwardTCP(tcpFwd))
	udpFwd := udp.NewForwarder(s, st.handleUDP)
	s.SetTransportProtocolHandler(udp.ProtocolNumber, udpFwd.HandlePacket)

	fail := func(what string, e tcpip.Error) (*Stack, error) {
		cancel()
		s.Close()
		s.Wait()
		st.events.close()
		return nil, fmt.Errorf("netstack: %s: %s", what, e)
	}
	if e := s.CreateNIC(nicID, ep); e != nil {
		return fail("creating the NIC", e)
	}
	// Promiscuous: take packets for every destination, to forward them.
	// Spoofing: answer from those destinations.
	if e := s.SetPromiscuousMode(nicID, true); e != nil {
		return fail("promiscuous mode", e)
	}
	if e := s.SetSpoofing(nicID, true); e != nil {
		return fail("spoofing", e)
	}
	gw := tcpip.AddrFrom4(cfg.GatewayV4.As4())
	if e := s.AddProtocolAddress(nicID, tcpip.ProtocolAddress{
		Protocol:          ipv4.ProtocolNumber,
		AddressWithPrefix: tcpip.AddressWithPrefix{Address: gw, PrefixLen: cfg.SandboxV4.Bits()},
	}, stack.AddressProperties{}); e != nil {
		return fail("adding the gateway address", e)
	}
	// A link-local address: the sandbox's IPv6 next hop, so that IPv6
	// packets reach the gateway and are decided like IPv4 ones; and an
	// address in the sandbox's IPv6 network, for DNS.
	for _, a := range []netip.Addr{GatewayV6, NameServerV6} {
		if e := s.AddProtocolAddress(nicID, tcpip.ProtocolAddress{
			Protocol:          ipv6.ProtocolNumber,
			AddressWithPrefix: tcpip.AddressWithPrefix{Address: tcpip.AddrFrom16(a.As16()), PrefixLen: 64},
		}, stack.AddressProperties{}); e != nil {
			return fail("adding the gateway's IPv6 address "+a.String(), e)
		}
	}
	s.SetRouteTable([]tcpip.Route{
		{Destination: header.IPv4EmptySubnet, NIC: nicID},
		{Destination: header.IPv6EmptySubnet, NIC: nicID},
	})

	// DNS at the gateway's IPv4 address and at its address in the
	// sandbox's IPv6 network, with the same server. The link-local next
	// hop serves nothing.
	for _, a := range []netip.Addr{cfg.GatewayV4, NameServerV6} {
		proto := ipv6.ProtocolNumber
		if a.Is4() {
			proto = ipv4.ProtocolNumber
		}
		dnsAddr := tcpip.FullAddress{NIC: nicID, Addr: tcpip.AddrFromSlice(a.AsSlice()), Port: 53}
		uc, err := gonet.DialUDP(s, &dnsAddr, nil, proto)
		if err != nil {
			st.Close()
			return nil, fmt.Errorf("netstack: DNS over UDP at [%s]:53: %w", a, err)
		}
		st.udpDNS = append(st.udpDNS, uc)
		ln, err := gonet.ListenTCP(s, dnsAddr, proto)
		if err != nil {
			st.Close()
			return nil, fmt.Errorf("netstack: DNS over TCP at [%s]:53: %w", a, err)
		}
		st.tcpDNS = append(st.tcpDNS, ln)
	}
	st.wg.Add(1 + len(st.udpDNS) + len(st.tcpDNS))
	for _, uc := range st.udpDNS {
		go st.serveDNSUDP(uc)
	}
	for _, ln := range st.tcpDNS {
		go st.serveDNSTCP(ln)
	}
	go func() {
		defer st.wg.Done()
		<-ctx.Done()
		go st.Close()
	}()
	return st, nil
}

// Pins returns the sandbox's pin set.
func (st *Stack) Pins() *PinSet { return st.pins }

// DNSCache returns the number of answers the sandbox's DNS cache holds,
// and their size in bytes.
func (st *Stack) DNSCache() (entries, bytes int) { return st.dns.cache.stats() }

// DroppedEvents returns how many events were dropped because OnEvent fell
// behind.
func (st *Stack) DroppedEvents() uint64 { return st.events.dropped.Load() }

// Traffic returns the bytes of the frames the sandbox has received and
// sent on its link so far.
func (st *Stack) Traffic() (rx, tx uint64) {
	nic, ok := st.s.NICInfo()[nicID]
	if !ok {
		return 0, 0
	}
	// The stack's transmit is what the sandbox receives.
	return nic.Stats.Tx.Bytes.Value(), nic.Stats.Rx.Bytes.Value()
}

// Close stops the network: every forwarded connection is closed, the
// stack stops reading the link, and the queued events are delivered. It
// does not close the link fd.
func (st *Stack) Close() error {
	st.once.Do(func() {
		st.mu.Lock()
		st.closed = true
		open := st.open
		st.open = nil
		st.mu.Unlock()
		st.cancel()
		for _, uc := range st.udpDNS {
			uc.Close()
		}
		for _, ln := range st.tcpDNS {
			ln.Close()
		}
		for c := range open {
			c.Close()
		}
		st.wg.Wait()
		st.s.Close()
		st.s.Wait()
		st.limits.stop()
		st.events.close()
	})
	return nil
}

// enter registers a goroutine doing work for the stack, unless it is
// closing.
func (st *Stack) enter() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		return false
	}
	st.wg.Add(1)
	return true
}

// track registers connections to close when the stack closes; it reports
// false (and closes them) when the stack is already closing.
func (st *Stack) track(cs ...io.Closer) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		st.open[c] = struct{}{}
	}
	return true
}

func (st *Stack) untrack(cs ...io.Closer) {
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, c := range cs {
		delete(st.open, c)
	}
}

func (st *Stack) trySlot() bool {
	select {
	case st.slots <- struct{}{}:
		return true
	default:
		return false
	}
}

func (st *Stack) releaseSlot() { <-st.slots }

func (st *Stack) emit(ev Event) {
	// A name the sandbox chose may carry a secret's value (a DNS
	// question refused for it, secret_leak): the event does not.
	ev.Host = st.cfg.Policy.RedactName(ev.Host)
	if ev.Blocked {
		st.cfg.Logger.Info("netstack blocked", "type", ev.Kind, "host", ev.Host, "ip", ev.IP, "port", ev.Port, "reason", ev.Reason)
	}
	st.events.emit(ev)
}

func toNetip(a tcpip.Address) netip.Addr {
	ip, _ := netip.AddrFromSlice(a.AsSlice())
	return ip
}

// isGateway reports whether ip is one of the gateway's own addresses.
func (st *Stack) isGateway(ip netip.Addr) bool {
	return ip.Unmap() == st.cfg.GatewayV4 || ip.WithZone("") == GatewayV6 || ip == NameServerV6
}

// decide returns the names pinned to dst and whether a flow to dst:port
// may pass, and if not, why.
func (st *Stack) decide(proto string, dst netip.Addr, port uint16) (names []string, ok bool, reason string) {
	if !dst.IsValid() {
		return nil, false, policy.ReasonBlockedIP + ": invalid destination"
	}
	if st.isGateway(dst) {
		return nil, false, fmt.Sprintf("%s: %s is the gateway, which serves only DNS (port 53 at %s and %s)", policy.ReasonBlockedIP, dst, st.cfg.GatewayV4, NameServerV6)
	}
	names = st.pins.Names(dst)
	ok, reason = st.cfg.Policy.FlowAllowed(proto, names, dst, port)
	return names, ok, reason
}

func firstName(names []string) string {
	if len(names) == 0 {
		return ""
	}
	return names[0]
}

// Waits for a connection's first bytes.
const (
	// sniffWait bounds the wait for the first bytes of a connection that
	// only interception can let through.
	sniffWait = 10 * time.Second
	// serverFirstWait is how long a connection that an egress rule also
	// allows waits for the sandbox to speak first before the upstream's
	// own first bytes (or this wait) send it to plain forwarding.
	serverFirstWait = 2 * time.Second
)

// interceptable reports whether a connection to dst:port, whose address
// DNS pinned to names, may go to the interceptor: the address is allowed
// and one of the names is an allowed host on that port. The interceptor
// then checks the SNI or Host of every request against names and port.
func (st *Stack) interceptable(names []string, dst netip.Addr, port uint16) bool {
	if st.cfg.Interceptor == nil || len(names) == 0 {
		return false
	}
	if ok, _ := st.cfg.Policy.AddrAllowed(dst); !ok {
		return false
	}
	for _, n := range names {
		if st.cfg.Policy.HostPortAllowed(n, port) {
			return true
		}
	}
	return false
}

// refusal says why a connection to dst:port that neither interception
// nor an egress rule takes is refused: when DNS pinned names to an
// allowed address, why those names are not allowed there (a port that
// their patterns do not open, or a host removed or denied while the
// sandbox runs); otherwise the egress rules' reason.
func (st *Stack) refusal(names []string, dst netip.Addr, port uint16, ruleReason string) string {
	if len(names) == 0 || st.cfg.Interceptor == nil || st.isGateway(dst) {
		return ruleReason
	}
	if ok, _ := st.cfg.Policy.AddrAllowed(dst); !ok {
		return ruleReason
	}
	first := ""
	for _, n := range names {
		ok, reason := st.cfg.Policy.HostPortDecision(n, port)
		if ok {
			continue
		}
		if policy.ReasonCode(reason) == policy.ReasonPortNotAllowed {
			// The most useful reason: the name is allowed, and the
			// reason says how to open the port, to HTTP and TLS; the
			// connection has not spoken yet, so it may be another
			// protocol, which needs an egress rule.
			return fmt.Sprintf("%s; for a protocol other than HTTP and TLS, add an egress rule (--egress %s)", reason, net.JoinHostPort(n, strconv.Itoa(int(port))))
		}
		if first == "" {
			first = reason
		}
	}
	if first != "" {
		return first
	}
	return ruleReason
}

// forwardTCP hands the sandbox's TCP segments to the forwarder, and
// reports a connection attempt that the forwarder drops because
// maxTCPInFlight handshakes are being decided already (the sandbox's
// client retries it, silently otherwise).
func (st *Stack) forwardTCP(fwd *tcp.Forwarder) func(stack.TransportEndpointID, *stack.PacketBuffer) bool {
	drops := st.s.Stats().TCP.ForwardMaxInFlightDrop
	return func(id stack.TransportEndpointID, pkt *stack.PacketBuffer) bool {
		before := drops.Value()
		handled := fwd.HandlePacket(id, pkt)
		if drops.Value() != before {
			dst := toNetip(id.LocalAddress)
			st.limits.report(limitTCPHandshake, Event{
				Kind: EventConnect, Host: firstName(st.pins.Names(dst)), IP: dst.String(), Port: id.LocalPort, Proto: "tcp",
				Reason: fmt.Sprintf("%s: too many connections being opened at once (%d): the connection attempt was dropped", policy.ReasonLimit, maxTCPInFlight),
			})
		}
		return handled
	}
}

func (st *Stack) handleTCP(r *tcp.ForwarderRequest) {
	if !st.enter() {
		r.Complete(true)
		return
	}
	defer st.wg.Done()
	id := r.ID()
	dst := toNetip(id.LocalAddress)
	port := id.LocalPort
	names, ruleOK, reason := st.decide("tcp", dst, port)
	interceptOK := !st.isGateway(dst) && st.interceptable(names, dst, port)
	ev := Event{Kind: EventConnect, Host: firstName(names), IP: dst.String(), Port: port, Proto: "tcp"}
	if !ruleOK && !interceptOK {
		r.Complete(true)
		ev.Blocked, ev.Reason = true, st.refusal(names, dst, port, reason)
		st.emit(ev)
		return
	}
	if !st.trySlot() {
		r.Complete(true)
		ev.Reason = fmt.Sprintf("%s: too many connections and flows open at once (%d)", policy.ReasonLimit, st.cfg.MaxConns)
		st.limits.report(limitTCPConns, ev)
		return
	}
	defer st.releaseSlot()
	start := time.Now()
	dstAP := netip.AddrPortFrom(dst, port)
	var up net.Conn
	if ruleOK {
		// Dialled before the handshake completes, so that the sandbox
		// sees a refused connection when upstream refuses it.
		var err error
		up, err = dialUpstream(st.ctx, st.cfg.Policy, "tcp", names, dstAP)
		if err != nil {
			r.Complete(true)
			ev.Blocked, ev.Reason = dialFailure(err)
			ev.DurationMs = time.Since(start).Milliseconds()
			st.emit(ev)
			return
		}
	}
	var wq waiter.Queue
	tep, terr := r.CreateEndpoint(&wq)
	if terr != nil {
		r.Complete(true)
		if up != nil {
			up.Close()
		}
		ev.Reason = policy.ReasonLimit + ": the sandbox side of the connection: " + terr.String()
		st.limits.report(limitEndpoint, ev)
		return
	}
	r.Complete(false)
	tep.SocketOptions().SetKeepAlive(true)
	conn := gonet.NewTCPConn(&wq, tep)
	closers := []io.Closer{conn}
	if up != nil {
		closers = append(closers, up)
	}
	if !st.track(closers...) {
		return
	}
	defer st.untrack(closers...)

	var sandbox halfCloser = conn
	if interceptOK {
		wait := sniffWait
		if ruleOK {
			wait = serverFirstWait
		}
		kind, prefix, upFirst := st.sniffFirst(conn, up, wait)
		if kind != sniffOther {
			if up != nil {
				up.Close()
			}
			pc := &prefixConn{halfCloser: conn, prefix: prefix, opts: tep.SocketOptions()}
			if kind == sniffTLS {
				st.cfg.Interceptor.ServeTLS(st.ctx, pc, dstAP, names)
			} else {
				st.cfg.Interceptor.ServeHTTP(st.ctx, pc, dstAP, names)
			}
			conn.Close()
			return
		}
		if !ruleOK {
			conn.Close()
			ev.Blocked = true
			ev.Reason = fmt.Sprintf("%s: the connection carries neither HTTP nor TLS, and no egress rule allows tcp to %s", policy.ReasonNoEgressRule, net.JoinHostPort(cmp.Or(ev.Host, dst.String()), fmt.Sprint(port)))
			ev.DurationMs = time.Since(start).Milliseconds()
			st.emit(ev)
			return
		}
		if len(prefix) > 0 {
			sandbox = &prefixConn{halfCloser: conn, prefix: prefix}
		}
		if len(upFirst) > 0 {
			if _, err := conn.Write(upFirst); err != nil {
				conn.Close()
				up.Close()
				return
			}
			ev.ResponseBytes += int64(len(upFirst))
		}
	}
	sent, received := splice(sandbox, up.(*net.TCPConn))
	ev.RequestBytes += sent
	ev.ResponseBytes += received
	ev.DurationMs = time.Since(start).Milliseconds()
	st.emit(ev)
}

// sniffFirst waits up to wait for the sandbox's first bytes on conn, and
// classifies them. When up is set (an egress rule allows the flow), bytes
// that upstream sends first end the wait: a server-first protocol is
// forwarded as is, and upFirst holds what upstream sent.
func (st *Stack) sniffFirst(conn *gonet.TCPConn, up net.Conn, wait time.Duration) (kind sniffKind, prefix, upFirst []byte) {
	deadline := time.Now().Add(wait)
	_ = conn.SetReadDeadline(deadline)
	defer conn.SetReadDeadline(time.Time{})
	if up == nil {
		prefix, kind, _ = sniff(conn)
		return kind, prefix, nil
	}
	type upRead struct {
		b   []byte
		err error
	}
	upCh := make(chan upRead, 1)
	go func() {
		buf := make([]byte, 4096)
		_ = up.SetReadDeadline(deadline)
		n, err := up.Read(buf)
		upCh <- upRead{buf[:n], err}
	}()
	sandboxCh := make(chan []byte, 1)
	kindCh := make(chan sniffKind, 1)
	go func() {
		p, k, _ := sniff(conn)
		kindCh <- k
		sandboxCh <- p
	}()
	select {
	case k := <-kindCh:
		prefix = <-sandboxCh
		// Stop the upstream read, and keep whatever it got.
		_ = up.SetReadDeadline(time.Now())
		r := <-upCh
		_ = up.SetReadDeadline(time.Time{})
		return k, prefix, r.b
	case r := <-upCh:
		// Upstream spoke first: stop the sniff and forward.
		_ = conn.SetReadDeadline(time.Now())
		<-kindCh
		prefix = <-sandboxCh
		_ = up.SetReadDeadline(time.Time{})
		return sniffOther, prefix, r.b
	}
}

func (st *Stack) handleUDP(r *udp.ForwarderRequest) bool {
	id := r.ID()
	dst := toNetip(id.LocalAddress)
	port := id.LocalPort
	names, ok, reason := st.decide("udp", dst, port)
	ev := Event{Kind: EventUDP, Host: firstName(names), IP: dst.String(), Port: port, Proto: "udp"}
	if !ok {
		ev.Blocked, ev.Reason = true, reason
		st.emit(ev)
		return true // dropped, silently for the sandbox
	}
	if !st.trySlot() {
		ev.Reason = fmt.Sprintf("%s: too many connections and flows open at once (%d)", policy.ReasonLimit, st.cfg.MaxConns)
		st.limits.report(limitUDPFlows, ev)
		return true
	}
	if !st.enter() {
		st.releaseSlot()
		return true
	}
	var wq waiter.Queue
	uep, terr := r.CreateEndpoint(&wq)
	if terr != nil {
		st.releaseSlot()
		st.wg.Done()
		ev.Reason = policy.ReasonLimit + ": the sandbox side of the connection: " + terr.String()
		st.limits.report(limitEndpoint, ev)
		return true
	}
	conn := gonet.NewUDPConn(&wq, uep)
	go func() {
		defer st.wg.Done()
		defer st.releaseSlot()
		st.relayUDP(conn, names, netip.AddrPortFrom(dst, port), ev)
	}()
	return true
}

// relayUDP passes datagrams between the sandbox's flow and upstream until
// the flow has been idle for udpIdle.
func (st *Stack) relayUDP(conn *gonet.UDPConn, names []string, dst netip.AddrPort, ev Event) {
	start := time.Now()
	up, err := dialUpstream(st.ctx, st.cfg.Policy, "udp", names, dst)
	if err != nil {
		conn.Close()
		ev.Blocked, ev.Reason = dialFailure(err)
		st.emit(ev)
		return
	}
	if !st.track(conn, up) {
		return
	}
	defer st.untrack(conn, up)
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	var sent, received atomic.Int64
	pump := func(dst, src net.Conn, count *atomic.Int64) {
		buf := make([]byte, maxDatagram)
		for {
			_ = src.SetReadDeadline(time.Now().Add(udpIdle))
			n, err := src.Read(buf)
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() && time.Since(time.Unix(0, last.Load())) < udpIdle {
					continue
				}
				break
			}
			last.Store(time.Now().UnixNano())
			if _, err := dst.Write(buf[:n]); err == nil {
				count.Add(int64(n))
			}
		}
		src.Close()
		dst.Close()
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		pump(up, conn, &sent)
	}()
	pump(conn, up, &received)
	wg.Wait()
	ev.RequestBytes, ev.ResponseBytes = sent.Load(), received.Load()
	ev.DurationMs = time.Since(start).Milliseconds()
	st.emit(ev)
}

func (st *Stack) serveDNSUDP(uc *gonet.UDPConn) {
	defer st.wg.Done()
	buf := make([]byte, maxDatagram)
	for {
		n, from, err := uc.ReadFrom(buf)
		if err != nil {
			if st.ctx.Err() == nil {
				st.cfg.Logger.Debug("netstack DNS over UDP stopped", "err", err)
			}
			return
		}
		if n > maxDNSQuery {
			continue
		}
		if !st.dns.tryAcquire() {
			st.dnsLimit(limitDNSQuestions, "udp", fmt.Sprintf("too many DNS questions being resolved at once (%d): the question was dropped", maxDNSInFlight))
			continue
		}
		if !st.enter() {
			st.dns.release()
			return
		}
		query := append([]byte(nil), buf[:n]...)
		go func() {
			defer st.wg.Done()
			defer st.dns.release()
			if resp := st.dns.answer(st.ctx, query, "udp"); resp != nil {
				_, _ = uc.WriteTo(resp, from)
			}
		}()
	}
}

func (st *Stack) serveDNSTCP(ln *gonet.TCPListener) {
	defer st.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		select {
		case st.dnsTCP <- struct{}{}:
		default:
			c.Close()
			st.dnsLimit(limitDNSTCPConns, "tcp", fmt.Sprintf("too many DNS-over-TCP connections at once (%d): the connection was closed", maxDNSTCPConns))
			continue
		}
		if !st.enter() || !st.track(c) {
			c.Close()
			<-st.dnsTCP
			return
		}
		go func() {
			defer st.wg.Done()
			defer func() { <-st.dnsTCP }()
			defer st.untrack(c)
			defer c.Close()
			st.serveDNSConn(c)
		}()
	}
}

func (st *Stack) serveDNSConn(c net.Conn) {
	for {
		_ = c.SetDeadline(time.Now().Add(dnsTCPIdle))
		query, err := readFramed(c, maxDNSQuery)
		if err != nil {
			return
		}
		if !st.dns.tryAcquire() {
			st.dnsLimit(limitDNSQuestions, "tcp", fmt.Sprintf("too many DNS questions being resolved at once (%d): the connection was closed", maxDNSInFlight))
			return
		}
		resp := st.dns.answer(st.ctx, query, "tcp")
		st.dns.release()
		if resp == nil {
			return
		}
		framed := make([]byte, 2, 2+len(resp))
		framed[0], framed[1] = byte(len(resp)>>8), byte(len(resp))
		if _, err := c.Write(append(framed, resp...)); err != nil {
			return
		}
	}
}

// dnsLimit reports a DNS question or connection refused by a cap.
func (st *Stack) dnsLimit(kind limitKind, proto, why string) {
	st.limits.report(kind, Event{Kind: EventDNS, IP: st.cfg.GatewayV4.String(), Port: 53, Proto: proto, Reason: policy.ReasonLimit + ": " + why})
}
