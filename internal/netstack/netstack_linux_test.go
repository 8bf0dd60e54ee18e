package netstack

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"
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

	"github.com/airlock-sandbox/airlock/policy"
)

// testDNS is an upstream DNS server on 127.0.0.1 that answers A questions
// from a table, and counts every question it gets by type.
type testDNS struct {
	addr    string
	mu      sync.Mutex
	records map[string][]netip.Addr
	asked   map[dnsmessage.Type]int
}

func startTestDNS(t *testing.T, records map[string][]netip.Addr) *testDNS {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	d := &testDNS{addr: pc.LocalAddr().String(), records: records, asked: map[dnsmessage.Type]int{}}
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			var m dnsmessage.Message
			if err := m.Unpack(buf[:n]); err != nil || len(m.Questions) != 1 {
				continue
			}
			q := m.Questions[0]
			d.mu.Lock()
			d.asked[q.Type]++
			addrs, ok := d.records[strings.ToLower(q.Name.String())]
			d.mu.Unlock()
			resp := dnsmessage.Message{Header: dnsmessage.Header{ID: m.ID, Response: true}, Questions: m.Questions}
			if !ok {
				resp.RCode = dnsmessage.RCodeNameError
			}
			for _, a := range addrs {
				if q.Type == dnsmessage.TypeA && a.Is4() {
					resp.Answers = append(resp.Answers, dnsmessage.Resource{
						Header: dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 30},
						Body:   &dnsmessage.AResource{A: a.As4()},
					})
				}
			}
			out, err := resp.Pack()
			if err == nil {
				pc.WriteTo(out, from)
			}
		}
	}()
	return d
}

func (d *testDNS) count(t dnsmessage.Type) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.asked[t]
}

// eventLog collects events.
type eventLog struct {
	mu     sync.Mutex
	events []Event
}

func (l *eventLog) add(ev Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, ev)
}

// wait returns the first event that match accepts, waiting for it.
func (l *eventLog) wait(t *testing.T, what string, match func(Event) bool) Event {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		l.mu.Lock()
		for _, ev := range l.events {
			if match(ev) {
				l.mu.Unlock()
				return ev
			}
		}
		l.mu.Unlock()
		time.Sleep(10 * time.Millisecond)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	t.Fatalf("no event %s among %+v", what, l.events)
	return Event{}
}

type harness struct {
	sandbox *stack.Stack
	st      *Stack
	events  *eventLog
}

// start runs Start on one end of a socketpair and a gVisor stack acting as
// the sandbox, configured as SandboxSide says, on the other.
func start(t *testing.T, cfg policy.Config) *harness {
	t.Helper()
	pol, err := policy.New(cfg, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	events := &eventLog{}
	ncfg := Config{Policy: pol, OnEvent: events.add}
	st, err := Start(context.Background(), fds[0], ncfg)
	if err != nil {
		t.Fatal(err)
	}
	sb := sandboxStack(t, fds[1], ncfg.SandboxSide())
	t.Cleanup(func() {
		sb.Close()
		sb.Wait()
		st.Close()
		unix.Close(fds[0])
		unix.Close(fds[1])
	})
	return &harness{sandbox: sb, st: st, events: events}
}

func sandboxStack(t *testing.T, fd int, side SandboxSide) *stack.Stack {
	t.Helper()
	ep, err := fdbased.New(&fdbased.Options{
		FDs:                []int{fd},
		MTU:                side.MTU,
		EthernetHeader:     true,
		Address:            tcpip.LinkAddress("\x02\x00\x0a\x58\x00\x02"),
		PacketDispatchMode: fdbased.RecvMMsg,
	})
	if err != nil {
		t.Fatal(err)
	}
	s := stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, ipv6.NewProtocol, arp.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol},
	})
	if e := s.CreateNIC(1, ep); e != nil {
		t.Fatal(e)
	}
	if e := s.AddProtocolAddress(1, tcpip.ProtocolAddress{
		Protocol:          ipv4.ProtocolNumber,
		AddressWithPrefix: tcpip.AddressWithPrefix{Address: tcpip.AddrFrom4(side.Address.Addr().As4()), PrefixLen: side.Address.Bits()},
	}, stack.AddressProperties{}); e != nil {
		t.Fatal(e)
	}
	s.SetRouteTable([]tcpip.Route{
		{Destination: tcpip.AddressWithPrefix{Address: tcpip.AddrFrom4(side.Address.Addr().As4()), PrefixLen: side.Address.Bits()}.Subnet(), NIC: 1},
		{Destination: header.IPv4EmptySubnet, Gateway: tcpip.AddrFrom4(side.Gateway.As4()), NIC: 1},
	})
	return s
}

var gatewayAddr = tcpip.AddrFrom4(DefaultGatewayV4.As4())

// query asks the gateway's DNS over UDP, from the sandbox.
func (h *harness) query(t *testing.T, name string, qtype dnsmessage.Type) (dnsmessage.RCode, []netip.Addr) {
	t.Helper()
	q := dnsmessage.Message{
		Header:    dnsmessage.Header{ID: 4242, RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName(name + "."), Type: qtype, Class: dnsmessage.ClassINET}},
	}
	msg, err := q.Pack()
	if err != nil {
		t.Fatal(err)
	}
	c, err := gonet.DialUDP(h.sandbox, nil, &tcpip.FullAddress{NIC: 1, Addr: gatewayAddr, Port: 53}, ipv4.ProtocolNumber)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 1500)
	for range 3 {
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		n, err := c.Read(buf)
		if err != nil {
			continue // the first datagram may be lost to ARP
		}
		return parseAnswer(t, buf[:n])
	}
	t.Fatalf("no DNS answer for %s", name)
	return 0, nil
}

// queryTCP asks the gateway's DNS over TCP.
func (h *harness) queryTCP(t *testing.T, name string, qtype dnsmessage.Type) (dnsmessage.RCode, []netip.Addr) {
	t.Helper()
	q := dnsmessage.Message{
		Header:    dnsmessage.Header{ID: 77, RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName(name + "."), Type: qtype, Class: dnsmessage.ClassINET}},
	}
	msg, err := q.Pack()
	if err != nil {
		t.Fatal(err)
	}
	c, err := h.dial(gatewayAddr, 53)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(append([]byte{byte(len(msg) >> 8), byte(len(msg))}, msg...)); err != nil {
		t.Fatal(err)
	}
	resp, err := readFramed(c, 65535)
	if err != nil {
		t.Fatal(err)
	}
	return parseAnswer(t, resp)
}

func parseAnswer(t *testing.T, b []byte) (dnsmessage.RCode, []netip.Addr) {
	t.Helper()
	var m dnsmessage.Message
	if err := m.Unpack(b); err != nil {
		t.Fatal(err)
	}
	var addrs []netip.Addr
	for _, rr := range m.Answers {
		switch b := rr.Body.(type) {
		case *dnsmessage.AResource:
			addrs = append(addrs, netip.AddrFrom4(b.A))
		case *dnsmessage.AAAAResource:
			addrs = append(addrs, netip.AddrFrom16(b.AAAA))
		default:
			t.Errorf("unexpected record %v", rr)
		}
	}
	return m.RCode, addrs
}

func (h *harness) dial(addr tcpip.Address, port uint16) (*gonet.TCPConn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	proto := ipv4.ProtocolNumber
	if addr.Len() == 16 {
		proto = ipv6.ProtocolNumber
	}
	return gonet.DialContextTCP(ctx, h.sandbox, tcpip.FullAddress{NIC: 1, Addr: addr, Port: port}, proto)
}

func addr4(s string) tcpip.Address {
	return tcpip.AddrFrom4(netip.MustParseAddr(s).As4())
}

func refused(err error) bool {
	return err != nil && strings.Contains(err.Error(), "refused")
}

var (
	publicIP  = netip.MustParseAddr("192.0.2.10")
	privateIP = netip.MustParseAddr("10.1.2.3")
	localIP   = netip.MustParseAddr("127.0.0.1")
)

func testRecords() map[string][]netip.Addr {
	return map[string][]netip.Addr{
		"public.example.com.":  {publicIP},
		"private.example.com.": {privateIP},
		"local.example.com.":   {localIP},
		"mixed.example.com.":   {privateIP, publicIP},
		"blocked.example.org.": {publicIP},
	}
}

func TestDNS(t *testing.T) {
	dns := startTestDNS(t, testRecords())
	h := start(t, policy.Config{
		AllowedHosts: []string{"*.example.com"},
		DNSServers:   []string{dns.addr},
	})

	rcode, addrs := h.query(t, "public.example.com", dnsmessage.TypeA)
	if rcode != dnsmessage.RCodeSuccess || !slices.Equal(addrs, []netip.Addr{publicIP}) {
		t.Fatalf("public: %v %v", rcode, addrs)
	}
	if got := h.st.Pins().Names(publicIP); !slices.Equal(got, []string{"public.example.com"}) {
		t.Errorf("pins for %s: %v", publicIP, got)
	}
	h.events.wait(t, "dns public", func(ev Event) bool {
		return ev.Kind == EventDNS && ev.Host == "public.example.com" && !ev.Blocked && slices.Equal(ev.Answers, []string{publicIP.String()})
	})

	// A name that policy does not allow: NXDOMAIN, and no upstream query.
	before := dns.count(dnsmessage.TypeA)
	if rcode, addrs := h.query(t, "blocked.example.org", dnsmessage.TypeA); rcode != dnsmessage.RCodeNameError || len(addrs) != 0 {
		t.Fatalf("blocked: %v %v", rcode, addrs)
	}
	if dns.count(dnsmessage.TypeA) != before {
		t.Error("a name not allowed was resolved upstream")
	}
	h.events.wait(t, "dns blocked", func(ev Event) bool {
		return ev.Kind == EventDNS && ev.Host == "blocked.example.org" && ev.Blocked && policy.ReasonCode(ev.Reason) == policy.ReasonHostNotAllowed
	})

	// Private and loopback answers are dropped, and not pinned.
	for _, name := range []string{"private.example.com", "local.example.com"} {
		rcode, addrs := h.query(t, name, dnsmessage.TypeA)
		if rcode != dnsmessage.RCodeSuccess || len(addrs) != 0 {
			t.Errorf("%s: %v %v", name, rcode, addrs)
		}
		h.events.wait(t, "dns "+name, func(ev Event) bool {
			return ev.Kind == EventDNS && ev.Host == name && ev.Blocked && policy.ReasonCode(ev.Reason) == policy.ReasonBlockedIP
		})
	}
	if got := h.st.Pins().Names(privateIP); len(got) != 0 {
		t.Errorf("private address pinned: %v", got)
	}
	rcode, addrs = h.query(t, "mixed.example.com", dnsmessage.TypeA)
	if rcode != dnsmessage.RCodeSuccess || !slices.Equal(addrs, []netip.Addr{publicIP}) {
		t.Errorf("mixed: %v %v", rcode, addrs)
	}

	// Other types: an empty answer, never an upstream query.
	for _, qt := range []dnsmessage.Type{dnsmessage.TypeTXT, dnsmessage.TypeMX, dnsmessage.TypeSRV} {
		rcode, addrs := h.query(t, "public.example.com", qt)
		if rcode != dnsmessage.RCodeSuccess || len(addrs) != 0 {
			t.Errorf("%v: %v %v", qt, rcode, addrs)
		}
		if n := dns.count(qt); n != 0 {
			t.Errorf("%v asked upstream %d times", qt, n)
		}
	}
	if rcode, _ := h.query(t, "tunnel-data.blocked.example.org", dnsmessage.TypeTXT); rcode != dnsmessage.RCodeNameError {
		t.Errorf("TXT for a name not allowed: %v", rcode)
	}

	// Over TCP, the same answers.
	rcode, addrs = h.queryTCP(t, "public.example.com", dnsmessage.TypeA)
	if rcode != dnsmessage.RCodeSuccess || !slices.Equal(addrs, []netip.Addr{publicIP}) {
		t.Errorf("tcp public: %v %v", rcode, addrs)
	}
	if rcode, _ := h.queryTCP(t, "blocked.example.org", dnsmessage.TypeA); rcode != dnsmessage.RCodeNameError {
		t.Errorf("tcp blocked: %v", rcode)
	}
}

func TestDNSLiftedLoopback(t *testing.T) {
	dns := startTestDNS(t, testRecords())
	h := start(t, policy.Config{
		AllowedHosts: []string{"*.example.com"},
		AllowedCIDRs: []string{"127.0.0.1/32"},
		DNSServers:   []string{dns.addr},
	})
	rcode, addrs := h.query(t, "local.example.com", dnsmessage.TypeA)
	if rcode != dnsmessage.RCodeSuccess || !slices.Equal(addrs, []netip.Addr{localIP}) {
		t.Fatalf("local: %v %v", rcode, addrs)
	}
	if got := h.st.Pins().Names(localIP); !slices.Equal(got, []string{"local.example.com"}) {
		t.Errorf("pins: %v", got)
	}
	// 10/8 is not lifted.
	if rcode, addrs := h.query(t, "private.example.com", dnsmessage.TypeA); rcode != dnsmessage.RCodeSuccess || len(addrs) != 0 {
		t.Errorf("private: %v %v", rcode, addrs)
	}
}

func TestEmptyPolicyAllowsNothing(t *testing.T) {
	dns := startTestDNS(t, testRecords())
	h := start(t, policy.Config{DNSServers: []string{dns.addr}})
	if rcode, _ := h.query(t, "public.example.com", dnsmessage.TypeA); rcode != dnsmessage.RCodeNameError {
		t.Errorf("empty allowlist answered: %v", rcode)
	}
	if _, err := h.dial(addr4(publicIP.String()), 443); !refused(err) {
		t.Errorf("empty allowlist connected: %v", err)
	}
}

func TestTCPRefused(t *testing.T) {
	dns := startTestDNS(t, testRecords())
	h := start(t, policy.Config{
		AllowedHosts: []string{"*.example.com"},
		DNSServers:   []string{dns.addr},
		Egress:       []policy.EgressRule{{Destination: "public.example.com", Ports: []uint16{22}}},
	})
	// A raw IP, never answered by DNS: refused even on the rule's port.
	raw := netip.MustParseAddr("192.0.2.99")
	if _, err := h.dial(addr4(raw.String()), 22); !refused(err) {
		t.Errorf("raw IP: %v", err)
	}
	h.events.wait(t, "raw connect", func(ev Event) bool {
		return ev.Kind == EventConnect && ev.IP == raw.String() && ev.Port == 22 && ev.Blocked &&
			policy.ReasonCode(ev.Reason) == policy.ReasonNoEgressRule
	})
	// A pinned name on a port that no rule names: refused (HTTP and TLS
	// interception are not there yet).
	h.query(t, "public.example.com", dnsmessage.TypeA)
	if _, err := h.dial(addr4(publicIP.String()), 443); !refused(err) {
		t.Errorf("port 443 without a rule: %v", err)
	}
	h.events.wait(t, "443", func(ev Event) bool {
		return ev.Kind == EventConnect && ev.Host == "public.example.com" && ev.Port == 443 && ev.Blocked
	})
	// The gateway serves DNS only.
	for _, port := range []uint16{22, 80, 8080} {
		if _, err := h.dial(gatewayAddr, port); !refused(err) {
			t.Errorf("gateway port %d: %v", port, err)
		}
	}
	h.events.wait(t, "gateway", func(ev Event) bool {
		return ev.Kind == EventConnect && ev.IP == DefaultGatewayV4.String() && ev.Blocked
	})
	// Private addresses, raw.
	for _, ip := range []string{"10.1.2.3", "169.254.169.254", "192.168.1.1"} {
		if _, err := h.dial(addr4(ip), 22); !refused(err) {
			t.Errorf("%s: %v", ip, err)
		}
	}
	// IPv6 gets the same decisions: refused, with an event.
	v6 := netip.MustParseAddr("2001:db8::1")
	h.sandbox.AddProtocolAddress(1, tcpip.ProtocolAddress{
		Protocol:          ipv6.ProtocolNumber,
		AddressWithPrefix: tcpip.AddressWithPrefix{Address: tcpip.AddrFrom16(netip.MustParseAddr("fd00::2").As16()), PrefixLen: 64},
	}, stack.AddressProperties{})
	h.sandbox.AddRoute(tcpip.Route{Destination: header.IPv6EmptySubnet, Gateway: tcpip.AddrFrom16(GatewayV6.As16()), NIC: 1})
	if c, err := h.dial(tcpip.AddrFrom16(v6.As16()), 22); err == nil {
		c.Close()
		t.Errorf("IPv6 connected")
	}
	h.events.wait(t, "v6 connect", func(ev Event) bool {
		return ev.Kind == EventConnect && ev.IP == v6.String() && ev.Blocked
	})
}

func TestUDPDropped(t *testing.T) {
	dns := startTestDNS(t, testRecords())
	h := start(t, policy.Config{AllowedHosts: []string{"*.example.com"}, DNSServers: []string{dns.addr}})
	h.query(t, "public.example.com", dnsmessage.TypeA)
	c, err := gonet.DialUDP(h.sandbox, nil, &tcpip.FullAddress{NIC: 1, Addr: addr4(publicIP.String()), Port: 9999}, ipv4.ProtocolNumber)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("exfiltrate")); err != nil {
		t.Fatal(err)
	}
	h.events.wait(t, "udp blocked", func(ev Event) bool {
		return ev.Kind == EventUDP && ev.IP == publicIP.String() && ev.Port == 9999 && ev.Blocked && ev.Host == "public.example.com"
	})
	c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, err := c.Read(make([]byte, 100)); err == nil {
		t.Errorf("UDP answered with %d bytes", n)
	}
}

// TestForward runs in a network namespace of its own (re-executing the
// test binary under unshare -n), where 198.51.100.1 is an address of the
// namespace's loopback: a public-looking upstream that never leaves this
// machine.
func TestForward(t *testing.T) {
	if os.Getenv("AIRLOCK_NETSTACK_NETNS") == "" {
		if os.Geteuid() != 0 {
			t.Skip("needs root to create a network namespace")
		}
		unshare, err := exec.LookPath("unshare")
		if err != nil {
			t.Skip("no unshare")
		}
		cmd := exec.Command(unshare, "-n", "--", os.Args[0], "-test.run=^TestForward$", "-test.v")
		cmd.Env = append(os.Environ(), "AIRLOCK_NETSTACK_NETNS=1")
		out, err := cmd.CombinedOutput()
		t.Logf("in a network namespace:\n%s", out)
		if err != nil {
			t.Fatal(err)
		}
		return
	}
	for _, args := range [][]string{{"link", "set", "lo", "up"}, {"addr", "add", "198.51.100.1/32", "dev", "lo"}} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	upstream := netip.MustParseAddr("198.51.100.1")
	ln, err := net.Listen("tcp", "198.51.100.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	pc, err := net.ListenPacket("udp", "198.51.100.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo(append([]byte("echo:"), buf[:n]...), from)
		}
	}()
	udpPort := uint16(pc.LocalAddr().(*net.UDPAddr).Port)

	dns := startTestDNS(t, map[string][]netip.Addr{
		"echo.example.com.":  {upstream},
		"other.example.com.": {upstream},
	})
	h := start(t, policy.Config{
		AllowedHosts: []string{"*.example.com"},
		DNSServers:   []string{dns.addr},
		Egress: []policy.EgressRule{
			{Destination: "echo.example.com", Ports: []uint16{port}},
			{Destination: "echo.example.com", Ports: []uint16{udpPort}, Protocol: "udp"},
		},
	})
	if rcode, addrs := h.query(t, "echo.example.com", dnsmessage.TypeA); rcode != dnsmessage.RCodeSuccess || !slices.Equal(addrs, []netip.Addr{upstream}) {
		t.Fatalf("echo: %v %v", rcode, addrs)
	}
	c, err := h.dial(addr4(upstream.String()), port)
	if err != nil {
		t.Fatal(err)
	}
	msg := strings.Repeat("hello through the gateway ", 10000)
	go func() {
		c.Write([]byte(msg))
		c.CloseWrite()
	}()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(c)
	c.Close()
	if err != nil || string(got) != msg {
		t.Fatalf("echo: %d bytes of %d, %v", len(got), len(msg), err)
	}
	ev := h.events.wait(t, "connect", func(ev Event) bool {
		return ev.Kind == EventConnect && ev.Port == port && !ev.Blocked
	})
	if ev.Host != "echo.example.com" || ev.RequestBytes != int64(len(msg)) || ev.ResponseBytes != int64(len(msg)) {
		t.Errorf("event: %+v", ev)
	}

	// The same address on another port: refused.
	if _, err := h.dial(addr4(upstream.String()), port+1); !refused(err) {
		t.Errorf("other port: %v", err)
	}

	// UDP allowed by a rule: echoed.
	u, err := gonet.DialUDP(h.sandbox, nil, &tcpip.FullAddress{NIC: 1, Addr: addr4(upstream.String()), Port: udpPort}, ipv4.ProtocolNumber)
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	var answered atomic.Bool
	buf := make([]byte, 100)
	for range 3 {
		u.Write([]byte("ping"))
		u.SetReadDeadline(time.Now().Add(2 * time.Second))
		n, err := u.Read(buf)
		if err == nil {
			if string(buf[:n]) != "echo:ping" {
				t.Errorf("udp echo %q", buf[:n])
			}
			answered.Store(true)
			break
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) && !strings.Contains(err.Error(), "timeout") {
			t.Fatal(err)
		}
	}
	if !answered.Load() {
		t.Error("no UDP echo")
	}
}
