package netstack

import (
	"context"
	"net/netip"
	"testing"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/airlock-sandbox/airlock/policy"
)

func TestParseUpstreamFollowsCNAME(t *testing.T) {
	q := dnsmessage.Question{Name: dnsmessage.MustNewName("www.example.com."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}
	rr := func(name string, body dnsmessage.ResourceBody, ttl uint32) dnsmessage.Resource {
		return dnsmessage.Resource{Header: dnsmessage.ResourceHeader{Name: dnsmessage.MustNewName(name), Class: dnsmessage.ClassINET, TTL: ttl}, Body: body}
	}
	m := dnsmessage.Message{
		Header:    dnsmessage.Header{ID: 7, Response: true},
		Questions: []dnsmessage.Question{q},
		Answers: []dnsmessage.Resource{
			rr("www.example.com.", &dnsmessage.CNAMEResource{CNAME: dnsmessage.MustNewName("edge.cdn.net.")}, 300),
			rr("edge.cdn.net.", &dnsmessage.AResource{A: [4]byte{192, 0, 2, 5}}, 20),
			// Not on the chain: ignored.
			rr("other.net.", &dnsmessage.AResource{A: [4]byte{192, 0, 2, 6}}, 20),
		},
	}
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	addrs, ttl, tc, err := parseUpstream(b, 7, q)
	if err != nil || tc || ttl != 20 || len(addrs) != 1 || addrs[0] != netip.MustParseAddr("192.0.2.5") {
		t.Fatalf("got %v %d %v %v", addrs, ttl, tc, err)
	}
	if _, _, _, err := parseUpstream(b, 8, q); err != errMismatch {
		t.Errorf("wrong id: %v", err)
	}
}

func TestDNSAnswerBounds(t *testing.T) {
	pol, err := policy.New(policy.Config{AllowedHosts: []string{"*.example.com"}}, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var many []netip.Addr
	for i := range 100 {
		many = append(many, netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 15: byte(i)}))
	}
	d := newDNSServer(pol, NewPinSet(0), func(Event) {}, nil)
	d.lookup = func(context.Context, string, dnsmessage.Type) ([]netip.Addr, uint32, error) {
		return many, 1 << 30, nil
	}
	name := "a-rather-long-label-to-fill-the-message-up-to-the-limit.and-another-one-of-the-same-kind-to-be-sure.example.com."
	q := dnsmessage.Message{Header: dnsmessage.Header{ID: 1}, Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName(name), Type: dnsmessage.TypeAAAA, Class: dnsmessage.ClassINET}}}
	b, err := q.Pack()
	if err != nil {
		t.Fatal(err)
	}
	resp := d.answer(context.Background(), b, "udp")
	if len(resp) == 0 || len(resp) > maxDNSUDPAnswer {
		t.Fatalf("answer of %d bytes", len(resp))
	}
	var m dnsmessage.Message
	if err := m.Unpack(resp); err != nil {
		t.Fatal(err)
	}
	if len(m.Answers) != maxDNSAddrs || m.Answers[0].Header.TTL != maxAnswerTTL {
		t.Errorf("%d answers, ttl %d", len(m.Answers), m.Answers[0].Header.TTL)
	}
	// Garbage, responses and oversized queries get nothing.
	for _, bad := range [][]byte{nil, {1, 2, 3}, make([]byte, maxDNSQuery+1)} {
		if resp := d.answer(context.Background(), bad, "udp"); resp != nil {
			t.Errorf("answered %x", bad)
		}
	}
	// Two questions: FORMERR.
	q.Questions = append(q.Questions, q.Questions[0])
	b, _ = q.Pack()
	if err := m.Unpack(d.answer(context.Background(), b, "udp")); err != nil || m.RCode != dnsmessage.RCodeFormatError {
		t.Errorf("two questions: %v %v", m.RCode, err)
	}
}

func TestTypeName(t *testing.T) {
	for typ, want := range map[dnsmessage.Type]string{
		dnsmessage.TypeA: "A", dnsmessage.TypeAAAA: "AAAA", dnsmessage.TypeTXT: "TXT",
		10: "NULL", 65: "HTTPS", 64: "SVCB", 257: "CAA", 12345: "12345",
	} {
		if got := typeName(typ); got != want {
			t.Errorf("typeName(%d) = %q, want %q", typ, got, want)
		}
	}
}
