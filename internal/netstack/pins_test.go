package netstack

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"
)

func TestPinSet(t *testing.T) {
	now := time.Unix(1000, 0)
	p := NewPinSet(4)
	p.now = func() time.Time { return now }
	a := netip.MustParseAddr("192.0.2.1")
	b := netip.MustParseAddr("192.0.2.2")
	p.Add("API.Example.com.", []netip.Addr{a, b}, 0)
	p.Add("cdn.example.com", []netip.Addr{a}, 10*time.Minute)
	if got := p.Names(a); !slices.Equal(got, []string{"api.example.com", "cdn.example.com"}) {
		t.Fatalf("names: %v", got)
	}
	if got := p.Names(netip.MustParseAddr("::ffff:192.0.2.1")); len(got) != 0 {
		t.Errorf("a mapped address matched: %v", got)
	}
	// A TTL of 0 is pinned for the minimum.
	now = now.Add(minPinTTL - time.Second)
	if got := p.Names(b); len(got) != 1 {
		t.Errorf("pin expired early: %v", got)
	}
	now = now.Add(2 * time.Second)
	if got := p.Names(b); len(got) != 0 {
		t.Errorf("pin did not expire: %v", got)
	}
	if got := p.Names(a); !slices.Equal(got, []string{"cdn.example.com"}) {
		t.Errorf("after expiry: %v", got)
	}
	// The bound holds: expired pairs go first, then the closest to expiry.
	for i := range 10 {
		p.Add(fmt.Sprintf("n%d.example.com", i), []netip.Addr{netip.AddrFrom4([4]byte{198, 51, 100, byte(i)})}, time.Duration(i+2)*time.Minute)
		if p.Len() > 4 {
			t.Fatalf("pin set grew to %d", p.Len())
		}
	}
	if got := p.Names(netip.AddrFrom4([4]byte{198, 51, 100, 9})); !slices.Equal(got, []string{"n9.example.com"}) {
		t.Errorf("newest evicted: %v", got)
	}
	if got := p.Names(netip.AddrFrom4([4]byte{198, 51, 100, 0})); len(got) != 0 {
		t.Errorf("oldest kept: %v", got)
	}
}
