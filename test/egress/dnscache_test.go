package egress_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/testnet"
	"github.com/airlock-sandbox/airlock/policy"
)

// dnsqPy asks DNS questions as the tests of this file need: to any
// server, IPv4 or IPv6 (a zone too), with EDNS, and in a flood.
//
//	dnsq.py SERVER NAME TYPE [tcp] [edns]
//	        rcode=N answers=N [ede=CODE TEXT]
//	dnsq.py flood SERVER ZONE COUNT
//	        asks COUNT names made up under ZONE, 50 at a time:
//	        answered=N refused=N
const dnsqPy = `
import random, socket, struct, sys

TYPES = {"A": 1, "AAAA": 28}

def question(name, qtype, edns):
    qid = random.randrange(65536)
    q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 1 if edns else 0)
    for label in name.rstrip(".").split("."):
        q += bytes([len(label)]) + label.encode()
    q += b"\0" + struct.pack(">HH", TYPES[qtype], 1)
    if edns:
        q += b"\0" + struct.pack(">HHIH", 41, 1232, 0, 0)
    return qid, q

def skip_name(r, i):
    while True:
        n = r[i]
        if n == 0:
            return i + 1
        if n & 0xC0 == 0xC0:
            return i + 2
        i += 1 + n

def parse(r):
    qid, flags, qd, an, ns, ar = struct.unpack(">HHHHHH", r[:12])
    i = 12
    for _ in range(qd):
        i = skip_name(r, i) + 4
    for _ in range(an + ns):
        i = skip_name(r, i)
        rdlen = struct.unpack(">H", r[i + 8:i + 10])[0]
        i += 10 + rdlen
    ede = ""
    for _ in range(ar):
        i = skip_name(r, i)
        rtype, _, _, rdlen = struct.unpack(">HHIH", r[i:i + 10])
        data = r[i + 10:i + 10 + rdlen]
        i += 10 + rdlen
        while rtype == 41 and len(data) >= 4:
            code, olen = struct.unpack(">HH", data[:4])
            if code == 15:
                ede = " ede=%d %s" % (struct.unpack(">H", data[4:6])[0], data[6:4 + olen].decode())
            data = data[4 + olen:]
    return qid, flags & 0xF, an, ede

def family(server):
    return socket.AF_INET6 if ":" in server else socket.AF_INET

def ask(server, name, qtype, tcp, edns):
    qid, q = question(name, qtype, edns)
    addr = socket.getaddrinfo(server, 53, family(server))[0][4]
    if tcp:
        s = socket.socket(family(server), socket.SOCK_STREAM)
        s.settimeout(10)
        s.connect(addr)
        s.sendall(struct.pack(">H", len(q)) + q)
        n = struct.unpack(">H", s.recv(2))[0]
        r = b""
        while len(r) < n:
            r += s.recv(n - len(r))
    else:
        s = socket.socket(family(server), socket.SOCK_DGRAM)
        s.settimeout(10)
        s.sendto(q, addr)
        r, _ = s.recvfrom(4096)
    rid, rcode, an, ede = parse(r)
    if rid != qid:
        print("error: answer id %d for question %d" % (rid, qid))
        return
    print("rcode=%d answers=%d%s" % (rcode, an, ede))

def flood(server, zone, count):
    s = socket.socket(family(server), socket.SOCK_DGRAM)
    s.settimeout(2)
    addr = socket.getaddrinfo(server, 53, family(server))[0][4]
    answered = refused = 0
    for start in range(0, count, 50):
        ids = set()
        for _ in range(min(50, count - start)):
            qid, q = question("%08x.%s" % (random.getrandbits(32), zone), "A", False)
            ids.add(qid)
            s.sendto(q, addr)
        try:
            while ids:
                r, _ = s.recvfrom(4096)
                qid, rcode, _, _ = parse(r)
                if qid in ids:
                    ids.discard(qid)
                    answered += 1
                    refused += rcode == 5
        except socket.timeout:
            pass
    print("answered=%d refused=%d" % (answered, refused))

if sys.argv[1] == "flood":
    flood(sys.argv[2], sys.argv[3], int(sys.argv[4]))
else:
    ask(sys.argv[1], sys.argv[2], sys.argv[3], "tcp" in sys.argv[4:], "edns" in sys.argv[4:])
`

const dnsqPath = "/tmp/dnsq.py"

// dnsBox is e.box with dnsq.py in /tmp.
func (e *env) dnsBox(t *testing.T, n *policy.Config) *airlock.Sandbox {
	t.Helper()
	sb := e.box(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sb.WriteFile(ctx, dnsqPath, []byte(dnsqPy), 0o644); err != nil {
		t.Fatalf("write %s: %v", dnsqPath, err)
	}
	return sb
}

func dnsq(t *testing.T, sb *airlock.Sandbox, args string) string {
	t.Helper()
	return strings.TrimSpace(ok(t, sb, "python3 "+dnsqPath+" "+args))
}

// TestDNSCacheRepeatedQuestions proves that the gateway asks upstream
// once for a name and type within the answer's TTL, however often and
// at whichever of its addresses and over whichever transport the
// sandbox asks, and that what it answers from the cache still serves
// connections.
func TestDNSCacheRepeatedQuestions(t *testing.T) {
	e := start(t)
	const name = "cached.api.example.com" // in api.example.com's certificate
	e.w.DNS.Set(name, netip.MustParseAddr(testnet.APIAddr), netip.MustParseAddr(testnet.APIAddr6))
	sb := e.dnsBox(t, e.network(name))

	for _, args := range []string{
		"10.88.0.1 " + name + " A",
		"10.88.0.1 " + name + " A",
		"10.88.0.1 " + name + " A tcp",
		"fd88::1 " + name + " A",
		"fd88::1 " + name + " A tcp",
		"10.88.0.1 " + name + " AAAA",
		"fd88::1 " + name + " AAAA",
	} {
		if out := dnsq(t, sb, args); out != "rcode=0 answers=1" {
			t.Fatalf("dnsq %s: %q, want one answer", args, out)
		}
	}
	if n := e.w.DNS.Queries(name); n != 2 {
		t.Errorf("the World's DNS got %d questions for %s, want 2 (one A, one AAAA)", n, name)
	}
	// getaddrinfo, then a connection through the pins, without asking
	// upstream again.
	m := e.mark()
	ok(t, sb, "curl -sS --max-time 10 https://"+name+"/echo")
	e.allowed(t, m, "GET", "https://"+name+"/echo", name, 200)
	if n := e.w.DNS.Queries(name); n != 2 {
		t.Errorf("after curl, the World's DNS got %d questions for %s, want still 2", n, name)
	}
	st, err := sb.NetworkStats()
	if err != nil || st.DNSCached < 2 {
		t.Errorf("NetworkStats: %+v, %v; want the two answers cached", st, err)
	}
}

// TestDNSMadeUpNames proves what a cache cannot do and what bounds it
// then: under a wildcard allow, every distinct name is a new question
// and goes upstream (once), as it must, since the sandbox may make up
// names; a flood of them reaches upstream only at the sandbox's rate,
// the rest being refused (REFUSED, a limit event), the cache stays
// within its bounds, and a name cached before the flood still answers
// during it without going upstream.
func TestDNSMadeUpNames(t *testing.T) {
	e := start(t)
	sb := e.dnsBox(t, e.network("*.api.example.com"))
	if out := dnsq(t, sb, "10.88.0.1 known.api.example.com A"); out != "rcode=3 answers=0" {
		t.Fatalf("known.api.example.com: %q", out)
	}
	var names []string
	for i := range 20 {
		names = append(names, fmt.Sprintf("n%d.api.example.com", i))
		e.w.DNS.Set(names[i], netip.MustParseAddr(testnet.APIAddr))
	}
	for range 2 {
		for _, n := range names {
			if out := dnsq(t, sb, "10.88.0.1 "+n+" A"); out != "rcode=0 answers=1" {
				t.Fatalf("%s: %q", n, out)
			}
		}
	}
	for _, n := range names {
		if q := e.w.DNS.Queries(n); q != 1 {
			t.Errorf("%s went upstream %d times, want once", n, q)
		}
	}

	before := e.w.DNS.Total()
	m := e.mark()
	const flood = 2000
	out := dnsq(t, sb, fmt.Sprintf("flood 10.88.0.1 flood.api.example.com %d", flood))
	var answered, refused int
	if _, err := fmt.Sscanf(out, "answered=%d refused=%d", &answered, &refused); err != nil {
		t.Fatalf("flood: %q", out)
	}
	upstream := e.w.DNS.Total() - before
	t.Logf("flood of %d made-up names: %d answered, %d refused, %d went upstream", flood, answered, refused, upstream)
	if refused == 0 || upstream >= flood || upstream+refused > flood {
		t.Errorf("%d of %d made-up names went upstream and %d were refused: want the rate to hold some back", upstream, flood, refused)
	}
	ev := e.since(t, m, "a limit event", func(ev api.NetworkEvent) bool {
		return ev.Kind == api.NetDNS && policy.ReasonCode(ev.Reason) == policy.ReasonLimit
	})
	if !ev.Blocked || !strings.HasSuffix(ev.Host, ".flood.api.example.com") {
		t.Errorf("limit event %+v", ev)
	}
	st, err := sb.NetworkStats()
	if err != nil || st.DNSCached > 1024 || st.DNSCachedBytes > 256<<10 {
		t.Errorf("after the flood: %+v, %v; want the cache within 1024 answers and 256 KiB", st, err)
	}
	// The cache still works: a name asked for after the flood (again,
	// if the flood's answers pushed it out, as more than the cache holds
	// may have gone upstream on a slow machine) is answered from it the
	// next time.
	if out := dnsq(t, sb, "10.88.0.1 "+names[0]+" A"); out != "rcode=0 answers=1" {
		t.Errorf("a name after the flood: %q", out)
	}
	total := e.w.DNS.Total()
	if out := dnsq(t, sb, "10.88.0.1 "+names[0]+" A"); out != "rcode=0 answers=1" {
		t.Errorf("a cached name after the flood: %q", out)
	}
	if n := e.w.DNS.Total(); n != total {
		t.Errorf("a cached name after the flood went upstream")
	}
}

// TestDNSIPv6Gateway proves that the gateway answers DNS over UDP and
// TCP at its IPv6 address (fd88::1, which resolv.conf lists), with the
// same policy, and serves nothing else there.
func TestDNSIPv6Gateway(t *testing.T) {
	e := start(t)
	sb := e.dnsBox(t, e.network(testnet.API))
	if rc := ok(t, sb, "cat /etc/resolv.conf"); !strings.Contains(rc, "nameserver 10.88.0.1\n") || !strings.Contains(rc, "nameserver fd88::1\n") {
		t.Errorf("resolv.conf:\n%s\nwant both of the gateway's addresses", rc)
	}
	for _, server := range []string{"fd88::1"} {
		for _, proto := range []string{"udp", "tcp"} {
			for _, qt := range []string{"A", "AAAA"} {
				args := fmt.Sprintf("%s %s %s %s", server, testnet.API, qt, proto)
				if out := dnsq(t, sb, args); out != "rcode=0 answers=1" {
					t.Errorf("dnsq %s: %q, want one answer", args, out)
				}
			}
			m := e.mark()
			args := fmt.Sprintf("%s %s A %s edns", server, testnet.Other, proto)
			if out := dnsq(t, sb, args); !strings.HasPrefix(out, "rcode=3 answers=0 ede=15 ") {
				t.Errorf("dnsq %s: %q, want NXDOMAIN saying why", args, out)
			}
			e.blockedDNS(t, m, testnet.Other, "A", policy.ReasonHostNotAllowed)
		}
	}
	// The gateway's IPv6 address serves DNS only.
	m := e.mark()
	if out := tool(t, sb, "tcp fd88::1 80 hello"); !strings.HasPrefix(out, "connect:") {
		t.Errorf("tcp to [fd88::1]:80: %q, want it refused", out)
	}
	e.blocked(t, m, api.NetTCP, policy.ReasonBlockedIP, "fd88::1", 80)
}

// TestDNSBlockedAddressExplained proves that a name whose every address
// the address policy refuses does not pass for a name that DNS cannot
// resolve: getaddrinfo says it has no address (an empty answer, not
// NXDOMAIN), an EDNS client is told the policy blocked it (without the
// address), and the event names the address and the allowed_cidrs entry
// that opens it. Allowing 127.0.0.0/8 does not open 127.0.0.1, one of
// this machine's addresses; the entry the event names does.
func TestDNSBlockedAddressExplained(t *testing.T) {
	e := start(t)
	n := e.network(testnet.Loop)
	n.AllowedCIDRs = []string{"127.0.0.0/8"}
	sb := e.dnsBox(t, n)

	m := e.mark()
	if out := tool(t, sb, "resolve "+testnet.Loop+" 4"); !strings.Contains(out, "No address associated with hostname") {
		t.Errorf("getaddrinfo(%s): %q, want no address, not an unknown name", testnet.Loop, out)
	}
	ev := e.blockedDNS(t, m, testnet.Loop, "A", policy.ReasonBlockedIP)
	for _, want := range []string{"127.0.0.1 is in 127.0.0.1/32 (an address of this machine)", "--allow-cidr 127.0.0.1/32"} {
		if !strings.Contains(ev.Reason, want) {
			t.Errorf("event reason %q does not say %q", ev.Reason, want)
		}
	}
	out := dnsq(t, sb, "10.88.0.1 "+testnet.Loop+" A edns")
	if !strings.HasPrefix(out, "rcode=0 answers=0 ede=15 ") || !strings.Contains(out, "blocked by the sandbox's network policy") {
		t.Errorf("EDNS question: %q, want an empty answer with the policy's extended error", out)
	}
	if strings.Contains(out, "127.0.0.1") {
		t.Errorf("the sandbox was told the blocked address: %q", out)
	}
	fails(t, sb, "curl -sS --max-time 10 http://"+testnet.Loop+"/")
	e.unreached(t, testnet.LoopAddr)

	// The entry the event names opens it: DNS answers with the address
	// (which, being loopback, leads the sandbox to its own loopback).
	n = e.network(testnet.Loop)
	n.AllowedCIDRs = []string{"127.0.0.1/32"}
	sb = e.dnsBox(t, n)
	m = e.mark()
	if out := tool(t, sb, "resolve "+testnet.Loop+" 4"); out != testnet.LoopAddr {
		t.Errorf("with 127.0.0.1/32 allowed, getaddrinfo(%s): %q, want %s", testnet.Loop, out, testnet.LoopAddr)
	}
	ev = e.since(t, m, "dns A "+testnet.Loop, func(ev api.NetworkEvent) bool {
		return ev.Kind == api.NetDNS && ev.Host == testnet.Loop && ev.QType == "A"
	})
	if ev.Blocked || len(ev.Answers) != 1 || ev.Answers[0] != testnet.LoopAddr {
		t.Errorf("with 127.0.0.1/32 allowed: %+v, want the address answered", ev)
	}
}
