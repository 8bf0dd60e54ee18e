package netstack

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/airlock-sandbox/airlock/policy"
)

// FuzzDNSQuery feeds the gateway's DNS server arbitrary questions from
// the sandbox. Whatever arrives, the server must not fail, must answer
// with a well-formed message for the same ID (or nothing), must never
// send a question for a name that is not allowed upstream, and must only
// give addresses for allowed names.
func FuzzDNSQuery(f *testing.F) {
	for _, q := range []struct {
		name string
		t    dnsmessage.Type
	}{{"api.example.com.", dnsmessage.TypeA}, {"api.example.com.", dnsmessage.TypeAAAA}, {"evil.test.", dnsmessage.TypeA}, {"api.example.com.", dnsmessage.TypeTXT}} {
		m := dnsmessage.Message{Header: dnsmessage.Header{ID: 42, RecursionDesired: true},
			Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName(q.name), Type: q.t, Class: dnsmessage.ClassINET}}}
		b, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	edns := dnsmessage.Message{Header: dnsmessage.Header{ID: 43, RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName("evil.test."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}}}
	var opt dnsmessage.ResourceHeader
	if err := opt.SetEDNS0(1232, dnsmessage.RCodeSuccess, false); err != nil {
		f.Fatal(err)
	}
	edns.Additionals = []dnsmessage.Resource{{Header: opt, Body: &dnsmessage.OPTResource{}}}
	if b, err := edns.Pack(); err == nil {
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{0, 1, 2})
	p, err := policy.New(policy.Config{AllowedHosts: []string{"api.example.com", "*.example.org"}}, policy.Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, query []byte) {
		d := newDNSServer(p, NewPinSet(16), func(Event) {}, nil)
		var asked []string
		d.lookup = func(_ context.Context, name string, qtype dnsmessage.Type) ([]netip.Addr, uint32, error) {
			asked = append(asked, name)
			if qtype == dnsmessage.TypeAAAA {
				return []netip.Addr{netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("::1")}, 30, nil
			}
			return []netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("10.0.0.1")}, 30, nil
		}
		for _, proto := range []string{"udp", "tcp"} {
			asked = asked[:0]
			resp := d.answer(context.Background(), query, proto)
			for _, n := range asked {
				if ok, _ := p.NameResolvable(strings.TrimSuffix(n, ".")); !ok {
					t.Fatalf("asked upstream for %q, which is not allowed", n)
				}
			}
			if resp == nil {
				continue
			}
			if len(resp) > maxDNSUDPAnswer {
				t.Fatalf("answer of %d bytes", len(resp))
			}
			var m dnsmessage.Message
			if err := m.Unpack(resp); err != nil {
				t.Fatalf("malformed answer %x: %v", resp, err)
			}
			if len(query) >= 2 && m.Header.ID != uint16(query[0])<<8|uint16(query[1]) {
				t.Fatalf("answer ID %d for query %x", m.Header.ID, query[:2])
			}
			for _, a := range m.Answers {
				name := strings.TrimSuffix(a.Header.Name.String(), ".")
				if ok, _ := p.NameResolvable(name); !ok {
					t.Fatalf("address answer for %q, which is not allowed", name)
				}
				switch b := a.Body.(type) {
				case *dnsmessage.AResource:
					if netip.AddrFrom4(b.A) != netip.MustParseAddr("192.0.2.1") {
						t.Fatalf("answer %v", b.A)
					}
				case *dnsmessage.AAAAResource:
					if netip.AddrFrom16(b.AAAA) != netip.MustParseAddr("2001:db8::1") {
						t.Fatalf("answer %v", b.AAAA)
					}
				default:
					t.Fatalf("answer of type %T", a.Body)
				}
			}
		}
	})
}

// FuzzParseUpstream feeds the reader of upstream answers arbitrary
// messages: it must not fail, must give addresses only of the type
// asked, and TTLs within the bounds the cache keeps to.
func FuzzParseUpstream(f *testing.F) {
	q := dnsmessage.Question{Name: dnsmessage.MustNewName("www.example.com."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}
	soa := dnsmessage.Resource{
		Header: dnsmessage.ResourceHeader{Name: dnsmessage.MustNewName("example.com."), Class: dnsmessage.ClassINET, TTL: 900},
		Body:   &dnsmessage.SOAResource{NS: dnsmessage.MustNewName("ns.example.com."), MBox: dnsmessage.MustNewName("h.example.com."), MinTTL: 60},
	}
	for _, m := range []dnsmessage.Message{
		{Header: dnsmessage.Header{ID: 5, Response: true}, Questions: []dnsmessage.Question{q}, Answers: []dnsmessage.Resource{
			{Header: dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 30}, Body: &dnsmessage.AResource{A: [4]byte{192, 0, 2, 1}}},
		}},
		{Header: dnsmessage.Header{ID: 5, Response: true, RCode: dnsmessage.RCodeNameError}, Questions: []dnsmessage.Question{q}, Authorities: []dnsmessage.Resource{soa}},
		{Header: dnsmessage.Header{ID: 5, Response: true}, Questions: []dnsmessage.Question{q}, Authorities: []dnsmessage.Resource{soa}},
	} {
		if b, err := m.Pack(); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		addrs, ttl, _, err := parseUpstream(msg, 5, q)
		if err != nil && err != errNXDomain {
			return
		}
		if err == errNXDomain && (len(addrs) != 0 || ttl > 1<<31) {
			t.Fatalf("NXDOMAIN with %v, TTL %d", addrs, ttl)
		}
		for _, a := range addrs {
			if !a.Is4() {
				t.Fatalf("address %v for an A question", a)
			}
		}
		if len(addrs) > 0 && ttl > maxAnswerTTL {
			t.Fatalf("TTL %d past %d", ttl, maxAnswerTTL)
		}
		if res := (dnsResult{addrs: addrs, ttl: ttl, nx: err == errNXDomain}); cacheTTL(res) > maxCacheTTL || (len(addrs) == 0 && cacheTTL(res) > maxNegativeTTL) {
			t.Fatalf("kept for %d s", cacheTTL(res))
		}
	})
}
