package netstack

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/airlock-sandbox/airlock/policy"
)

// cacheHarness is a DNS server with a counting upstream and a clock of
// its own, shared by the cache and the pins.
type cacheHarness struct {
	d      *dnsServer
	pins   *PinSet
	now    time.Time
	mu     sync.Mutex
	asked  map[string]int
	events []Event
	// answer is what upstream says of a name.
	answer func(name string, qtype dnsmessage.Type) ([]netip.Addr, uint32, error)
}

func newCacheHarness(t *testing.T, cfg policy.Config) *cacheHarness {
	t.Helper()
	pol, err := policy.New(cfg, policy.Options{HostAddrs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}})
	if err != nil {
		t.Fatal(err)
	}
	h := &cacheHarness{pins: NewPinSet(0), now: time.Unix(1_800_000_000, 0), asked: map[string]int{}}
	h.pins.now = h.clock
	h.d = newDNSServer(pol, h.pins, func(ev Event) {
		h.mu.Lock()
		h.events = append(h.events, ev)
		h.mu.Unlock()
	}, nil)
	h.d.cache.now = h.clock
	h.answer = func(string, dnsmessage.Type) ([]netip.Addr, uint32, error) {
		return []netip.Addr{netip.MustParseAddr("192.0.2.1")}, 30, nil
	}
	h.d.lookup = func(_ context.Context, name string, qtype dnsmessage.Type) ([]netip.Addr, uint32, error) {
		h.mu.Lock()
		h.asked[fmt.Sprintf("%s %s", name, typeName(qtype))]++
		h.mu.Unlock()
		return h.answer(name, qtype)
	}
	return h
}

func (h *cacheHarness) clock() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.now
}

func (h *cacheHarness) advance(d time.Duration) {
	h.mu.Lock()
	h.now = h.now.Add(d)
	h.mu.Unlock()
}

func (h *cacheHarness) upstream(name string, qtype dnsmessage.Type) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.asked[name+". "+typeName(qtype)]
}

func (h *cacheHarness) lastEvent() Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.events[len(h.events)-1]
}

// dnsReply is what the tests read of an answer.
type dnsReply struct {
	rcode dnsmessage.RCode
	addrs []netip.Addr
	ttl   uint32
	// ede and edeText are the extended error, if any.
	ede     int
	edeText string
	raw     []byte
}

func (h *cacheHarness) ask(t *testing.T, name string, qtype dnsmessage.Type, edns bool) dnsReply {
	t.Helper()
	m := dnsmessage.Message{
		Header:    dnsmessage.Header{ID: 99, RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName(name + "."), Type: qtype, Class: dnsmessage.ClassINET}},
	}
	if edns {
		var rh dnsmessage.ResourceHeader
		if err := rh.SetEDNS0(1232, dnsmessage.RCodeSuccess, false); err != nil {
			t.Fatal(err)
		}
		m.Additionals = []dnsmessage.Resource{{Header: rh, Body: &dnsmessage.OPTResource{}}}
	}
	q, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	raw := h.d.answer(context.Background(), q, "udp")
	var r dnsmessage.Message
	if err := r.Unpack(raw); err != nil {
		t.Fatalf("answer for %s: %v", name, err)
	}
	out := dnsReply{rcode: r.RCode, ede: -1, raw: raw}
	for _, a := range r.Answers {
		out.ttl = a.Header.TTL
		switch b := a.Body.(type) {
		case *dnsmessage.AResource:
			out.addrs = append(out.addrs, netip.AddrFrom4(b.A))
		case *dnsmessage.AAAAResource:
			out.addrs = append(out.addrs, netip.AddrFrom16(b.AAAA))
		}
	}
	for _, a := range r.Additionals {
		if opt, ok := a.Body.(*dnsmessage.OPTResource); ok {
			if !edns {
				t.Errorf("an OPT record in the answer to a query without one")
			}
			for _, o := range opt.Options {
				if o.Code == 15 && len(o.Data) >= 2 {
					out.ede, out.edeText = int(binary.BigEndian.Uint16(o.Data)), string(o.Data[2:])
				}
			}
		}
	}
	return out
}

func TestDNSCacheWithinTTL(t *testing.T) {
	h := newCacheHarness(t, policy.Config{AllowedHosts: []string{"*.example.com"}})
	for i := range 5 {
		r := h.ask(t, "api.example.com", dnsmessage.TypeA, false)
		if r.rcode != dnsmessage.RCodeSuccess || len(r.addrs) != 1 || r.ttl != uint32(30-2*i) {
			t.Fatalf("question %d: %+v, want 192.0.2.1 with TTL %d", i, r, 30-2*i)
		}
		h.advance(2 * time.Second)
	}
	if n := h.upstream("api.example.com", dnsmessage.TypeA); n != 1 {
		t.Errorf("5 questions within the TTL went upstream %d times, want once", n)
	}
	// Each type is its own answer.
	h.ask(t, "api.example.com", dnsmessage.TypeAAAA, false)
	if n := h.upstream("api.example.com", dnsmessage.TypeAAAA); n != 1 {
		t.Errorf("AAAA went upstream %d times, want once", n)
	}
	// Past the TTL, upstream is asked again.
	h.advance(30 * time.Second)
	h.ask(t, "api.example.com", dnsmessage.TypeA, false)
	if n := h.upstream("api.example.com", dnsmessage.TypeA); n != 2 {
		t.Errorf("after the TTL, %d questions upstream, want 2", n)
	}
	// The case and the trailing dot of the question do not matter.
	h.ask(t, "API.Example.COM", dnsmessage.TypeA, false)
	if n := h.upstream("api.example.com", dnsmessage.TypeA); n != 2 {
		t.Errorf("another spelling went upstream: %d questions, want 2", n)
	}
}

// TestDNSCachedAnswerPins checks that an answer from the cache pins its
// addresses as a fresh one does: once the first pin has expired, the
// cached answer makes the name reachable again.
func TestDNSCachedAnswerPins(t *testing.T) {
	h := newCacheHarness(t, policy.Config{AllowedHosts: []string{"*.example.com"}})
	h.answer = func(string, dnsmessage.Type) ([]netip.Addr, uint32, error) {
		return []netip.Addr{netip.MustParseAddr("192.0.2.7")}, 3000, nil
	}
	ip := netip.MustParseAddr("192.0.2.7")
	h.ask(t, "pinned.example.com", dnsmessage.TypeA, false)
	if got := h.pins.Names(ip); len(got) != 1 || got[0] != "pinned.example.com" {
		t.Fatalf("pins after the first answer: %v", got)
	}
	// Within the answer's TTL the pin holds; past the pins' own bound
	// (the TTL, here) it is gone until DNS answers again.
	h.advance(2999 * time.Second)
	if got := h.pins.Names(ip); len(got) != 1 {
		t.Fatalf("pins within the TTL: %v", got)
	}
	h.d.pins = NewPinSet(0) // as if every pin had been evicted
	h.d.pins.now = h.clock
	r := h.ask(t, "pinned.example.com", dnsmessage.TypeA, false)
	if len(r.addrs) != 1 || r.ttl != 1 {
		t.Fatalf("cached answer: %+v, want the address with 1 s left", r)
	}
	if n := h.upstream("pinned.example.com", dnsmessage.TypeA); n != 1 {
		t.Fatalf("%d questions upstream, want the cache to answer", n)
	}
	if got := h.d.pins.Names(ip); len(got) != 1 || got[0] != "pinned.example.com" {
		t.Errorf("an answer from the cache pinned %v, want the name", got)
	}
	if ev := h.lastEvent(); ev.Blocked || len(ev.Answers) != 1 {
		t.Errorf("event of a cached answer: %+v", ev)
	}
}

func TestDNSCacheNegative(t *testing.T) {
	h := newCacheHarness(t, policy.Config{AllowedHosts: []string{"*.example.com"}})
	h.answer = func(name string, qtype dnsmessage.Type) ([]netip.Addr, uint32, error) {
		switch {
		case strings.HasPrefix(name, "nx."):
			return nil, 20, errNXDomain
		case strings.HasPrefix(name, "long-nx."):
			return nil, 86400, errNXDomain
		case strings.HasPrefix(name, "nodata."):
			return nil, 15, nil
		case strings.HasPrefix(name, "zero."):
			return []netip.Addr{netip.MustParseAddr("192.0.2.9")}, 0, nil
		}
		return nil, 0, fmt.Errorf("upstream failed")
	}
	for _, c := range []struct {
		name  string
		rcode dnsmessage.RCode
		kept  time.Duration // how long upstream is not asked again
	}{
		{"nx.example.com", dnsmessage.RCodeNameError, 20 * time.Second},
		{"long-nx.example.com", dnsmessage.RCodeNameError, maxNegativeTTL * time.Second},
		{"nodata.example.com", dnsmessage.RCodeSuccess, 15 * time.Second},
		// TTL 0: for the question in progress only (RFC 1035).
		{"zero.example.com", dnsmessage.RCodeSuccess, 0},
		// Failures are not kept.
		{"fail.example.com", dnsmessage.RCodeServerFailure, 0},
	} {
		r := h.ask(t, c.name, dnsmessage.TypeA, false)
		if r.rcode != c.rcode {
			t.Errorf("%s: rcode %v, want %v", c.name, r.rcode, c.rcode)
		}
		if c.kept > 0 {
			h.advance(c.kept - time.Second)
			h.ask(t, c.name, dnsmessage.TypeA, false)
			if n := h.upstream(c.name, dnsmessage.TypeA); n != 1 {
				t.Errorf("%s: asked upstream %d times within %v, want once", c.name, n, c.kept)
			}
			h.advance(time.Second)
		}
		h.ask(t, c.name, dnsmessage.TypeA, false)
		if n := h.upstream(c.name, dnsmessage.TypeA); n != 2 {
			t.Errorf("%s: asked upstream %d times once %v passed, want twice", c.name, n, c.kept)
		}
	}
}

// TestDNSCacheFlood asks for more distinct names than the cache holds,
// at the rate a sandbox may: the cache stays within its bounds in
// entries (small answers) and in bytes (large ones), and keeps the most
// recently used.
func TestDNSCacheFlood(t *testing.T) {
	for _, c := range []struct {
		what  string
		label string
		addrs int
		names int
	}{
		{"entries", "n", 1, maxCacheEntries + 100},
		// More addresses than the cache keeps of one answer; all but
		// one private, so that the pins stay few.
		{"bytes", strings.Repeat("x", 60), 100, 2 * maxCacheBytes / (cacheEntryOverhead + 24*maxCachedAddrs)},
	} {
		t.Run(c.what, func(t *testing.T) {
			h := newCacheHarness(t, policy.Config{AllowedHosts: []string{"*.example.com"}})
			h.answer = func(string, dnsmessage.Type) ([]netip.Addr, uint32, error) {
				many := []netip.Addr{netip.MustParseAddr("192.0.2.1")}
				for i := range c.addrs - 1 {
					many = append(many, netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}))
				}
				return many, 600, nil
			}
			name := func(i int) string { return fmt.Sprintf("%s%d.example.com", c.label, i) }
			full := false
			for i := range c.names {
				h.ask(t, name(i), dnsmessage.TypeA, false)
				h.advance(time.Second / upstreamRate)
				entries, bytes := h.d.cache.stats()
				if entries > maxCacheEntries || bytes > maxCacheBytes {
					t.Fatalf("after %d names: %d entries, %d bytes; bounds %d and %d", i+1, entries, bytes, maxCacheEntries, maxCacheBytes)
				}
				full = full || entries == maxCacheEntries || bytes > maxCacheBytes-(cacheEntryOverhead+100+24*maxCachedAddrs)
			}
			if !full {
				t.Fatalf("the flood never filled the cache's %s", c.what)
			}
			// The most recent name is still cached, the first long gone.
			last := name(c.names - 1)
			h.ask(t, last, dnsmessage.TypeA, false)
			if n := h.upstream(last, dnsmessage.TypeA); n != 1 {
				t.Errorf("the last name went upstream %d times, want once", n)
			}
			h.ask(t, name(0), dnsmessage.TypeA, false)
			if n := h.upstream(name(0), dnsmessage.TypeA); n != 2 {
				t.Errorf("the first name went upstream %d times, want twice (evicted)", n)
			}
		})
	}
}

// TestDNSUpstreamRate checks that the names a sandbox makes up (random
// subdomains of a wildcard-allowed zone, which no cache can answer) go
// upstream at most at the sandbox's rate, that the questions beyond it
// are refused and evented as a limit, and that cached names still
// answer meanwhile.
func TestDNSUpstreamRate(t *testing.T) {
	h := newCacheHarness(t, policy.Config{AllowedHosts: []string{"*.example.com"}})
	h.ask(t, "known.example.com", dnsmessage.TypeA, false)
	refused := 0
	const asked = 3 * upstreamBurst
	for i := range asked {
		r := h.ask(t, fmt.Sprintf("r%d.example.com", i), dnsmessage.TypeA, true)
		if r.rcode == dnsmessage.RCodeRefused {
			refused++
			ev := h.lastEvent()
			if !ev.Blocked || policy.ReasonCode(ev.Reason) != policy.ReasonLimit {
				t.Fatalf("event of a refused question: %+v", ev)
			}
			if r.ede != edeOther || !strings.Contains(r.edeText, "retry later") {
				t.Errorf("refused answer's extended error: %d %q", r.ede, r.edeText)
			}
		}
	}
	// The clock did not move: the burst, less the first question, went
	// upstream.
	if want := asked - (upstreamBurst - 1); refused != want {
		t.Errorf("%d of %d questions refused, want %d", refused, asked, want)
	}
	if r := h.ask(t, "known.example.com", dnsmessage.TypeA, false); r.rcode != dnsmessage.RCodeSuccess || len(r.addrs) != 1 {
		t.Errorf("a cached name while the rate is spent: %+v", r)
	}
	// A second later, the rate allows more.
	h.advance(time.Second)
	if r := h.ask(t, "later.example.com", dnsmessage.TypeA, false); r.rcode != dnsmessage.RCodeSuccess {
		t.Errorf("a new name a second later: %+v", r)
	}
}

// TestDNSRefusalsExplained checks what a client that speaks EDNS learns
// of a refusal, and what the event says: a name not allowed is NXDOMAIN;
// a name whose every address is blocked is an empty answer (the name
// exists and has no address the sandbox may use), whose extended error
// says so without naming the address, while the event names the address
// and the allowed_cidrs entry that would open it.
func TestDNSRefusalsExplained(t *testing.T) {
	h := newCacheHarness(t, policy.Config{AllowedHosts: []string{"*.example.com"}, AllowedCIDRs: []string{"127.0.0.0/8"}})
	h.answer = func(name string, _ dnsmessage.Type) ([]netip.Addr, uint32, error) {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, 30, nil
	}
	r := h.ask(t, "evil.test", dnsmessage.TypeA, true)
	if r.rcode != dnsmessage.RCodeNameError || r.ede != edeBlocked || r.edeText != edeNotAllowed {
		t.Errorf("a name not allowed: %+v", r)
	}
	for _, edns := range []bool{true, false} {
		r = h.ask(t, "loop.example.com", dnsmessage.TypeA, edns)
		if r.rcode != dnsmessage.RCodeSuccess || len(r.addrs) != 0 {
			t.Errorf("edns %v: a name whose addresses are blocked: %+v, want an empty answer", edns, r)
		}
		if edns && (r.ede != edeBlocked || r.edeText != edeAddrsBlocked) {
			t.Errorf("extended error %d %q, want %d %q", r.ede, r.edeText, edeBlocked, edeAddrsBlocked)
		}
		if strings.Contains(string(r.raw), "127.0.0.1") || strings.Contains(string(r.raw), "\x7f\x00\x00\x01") {
			t.Errorf("the answer names the blocked address: %q", r.raw)
		}
		ev := h.lastEvent()
		if !ev.Blocked || policy.ReasonCode(ev.Reason) != policy.ReasonBlockedIP || !strings.Contains(ev.Reason, "127.0.0.1 is in 127.0.0.1/32 (an address of this machine)") || !strings.Contains(ev.Reason, "--allow-cidr 127.0.0.1/32") {
			t.Errorf("event: %+v, want it blocked, naming the address and the rule that opens it", ev)
		}
	}
}

func TestParseUpstreamNegativeTTL(t *testing.T) {
	q := dnsmessage.Question{Name: dnsmessage.MustNewName("gone.example.com."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}
	soa := func(ttl, minimum uint32) dnsmessage.Resource {
		return dnsmessage.Resource{
			Header: dnsmessage.ResourceHeader{Name: dnsmessage.MustNewName("example.com."), Class: dnsmessage.ClassINET, TTL: ttl},
			Body: &dnsmessage.SOAResource{NS: dnsmessage.MustNewName("ns.example.com."), MBox: dnsmessage.MustNewName("h.example.com."),
				Serial: 1, Refresh: 1, Retry: 1, Expire: 1, MinTTL: minimum},
		}
	}
	for _, c := range []struct {
		rcode dnsmessage.RCode
		auth  []dnsmessage.Resource
		want  uint32
		nx    bool
	}{
		{dnsmessage.RCodeNameError, []dnsmessage.Resource{soa(900, 60)}, 60, true},
		{dnsmessage.RCodeNameError, []dnsmessage.Resource{soa(40, 600)}, 40, true},
		{dnsmessage.RCodeNameError, nil, noSOANegativeTTL, true},
		{dnsmessage.RCodeSuccess, []dnsmessage.Resource{soa(900, 45)}, 45, false},
		{dnsmessage.RCodeSuccess, nil, noSOANegativeTTL, false},
	} {
		m := dnsmessage.Message{Header: dnsmessage.Header{ID: 3, Response: true, RCode: c.rcode}, Questions: []dnsmessage.Question{q}, Authorities: c.auth}
		b, err := m.Pack()
		if err != nil {
			t.Fatal(err)
		}
		addrs, ttl, _, err := parseUpstream(b, 3, q)
		if (err == errNXDomain) != c.nx || len(addrs) != 0 || ttl != c.want {
			t.Errorf("%v with %d SOA: %v %d %v, want TTL %d", c.rcode, len(c.auth), addrs, ttl, err, c.want)
		}
	}
}
