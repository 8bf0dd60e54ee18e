package policy

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func newPolicy(t *testing.T, cfg Config, opts Options) *Policy {
	t.Helper()
	p, err := New(cfg, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return p
}

type addrCase struct {
	addr    string
	allowed bool
	// why, when blocked, must appear in the reason.
	why string
}

func checkAddrs(t *testing.T, p *Policy, cases []addrCase) {
	t.Helper()
	for _, c := range cases {
		a, err := netip.ParseAddr(c.addr)
		if err != nil {
			t.Fatalf("bad test address %q: %v", c.addr, err)
		}
		ok, reason := p.AddrAllowed(a)
		if ok != c.allowed {
			t.Errorf("AddrAllowed(%s) = %v (%q), want %v", c.addr, ok, reason, c.allowed)
			continue
		}
		if ok && reason != "" {
			t.Errorf("AddrAllowed(%s) allowed with reason %q", c.addr, reason)
		}
		if !ok {
			if ReasonCode(reason) != ReasonBlockedIP {
				t.Errorf("AddrAllowed(%s) reason %q, want code %s", c.addr, reason, ReasonBlockedIP)
			}
			if !strings.Contains(reason, c.why) {
				t.Errorf("AddrAllowed(%s) reason %q, want it to mention %q", c.addr, reason, c.why)
			}
		}
	}
}

// TestAddrDefaultBlocks walks both edges of every range of DESIGN.md
// and the addresses just outside them.
func TestAddrDefaultBlocks(t *testing.T) {
	p := newPolicy(t, Config{}, Options{})
	checkAddrs(t, p, []addrCase{
		{"0.0.0.0", false, "0.0.0.0/8"},
		{"0.255.255.255", false, "0.0.0.0/8"},
		{"1.0.0.0", true, ""},
		{"9.255.255.255", true, ""},
		{"10.0.0.0", false, "10.0.0.0/8"},
		{"10.255.255.255", false, "10.0.0.0/8"},
		{"11.0.0.0", true, ""},
		{"100.63.255.255", true, ""},
		{"100.64.0.0", false, "100.64.0.0/10"},
		{"100.127.255.255", false, "100.64.0.0/10"},
		{"100.128.0.0", true, ""},
		{"100.100.100.200", false, "100."},
		{"126.255.255.255", true, ""},
		{"127.0.0.0", false, "127.0.0.0/8"},
		{"127.0.0.1", false, "loopback"},
		{"127.255.255.255", false, "127.0.0.0/8"},
		{"128.0.0.0", true, ""},
		{"169.253.255.255", true, ""},
		{"169.254.0.0", false, "169.254.0.0/16"},
		{"169.254.169.254", false, "169.254."},
		{"169.254.170.2", false, "169.254."},
		{"169.254.255.255", false, "169.254.0.0/16"},
		{"169.255.0.0", true, ""},
		{"172.15.255.255", true, ""},
		{"172.16.0.0", false, "172.16.0.0/12"},
		{"172.31.255.255", false, "172.16.0.0/12"},
		{"172.32.0.0", true, ""},
		{"191.255.255.255", true, ""},
		{"192.0.0.0", false, "192.0.0.0/24"},
		{"192.0.0.255", false, "192.0.0.0/24"},
		{"192.0.1.0", true, ""},
		{"192.167.255.255", true, ""},
		{"192.168.0.0", false, "192.168.0.0/16"},
		{"192.168.255.255", false, "192.168.0.0/16"},
		{"192.169.0.0", true, ""},
		{"198.17.255.255", true, ""},
		{"198.18.0.0", false, "198.18.0.0/15"},
		{"198.19.255.255", false, "198.18.0.0/15"},
		{"198.20.0.0", true, ""},
		{"223.255.255.255", true, ""},
		{"224.0.0.0", false, "224.0.0.0/4"},
		{"239.255.255.255", false, "224.0.0.0/4"},
		{"240.0.0.0", false, "240.0.0.0/4"},
		{"255.255.255.255", false, "240.0.0.0/4"},
		{"8.8.8.8", true, ""},
		{"1.1.1.1", true, ""},
		{"93.184.216.34", true, ""},

		{"::", false, "::/128"},
		{"::1", false, "::1/128"},
		{"fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", true, ""},
		{"fc00::", false, "fc00::/7"},
		{"fd12:3456::1", false, "fc00::/7"},
		{"fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", false, "fc00::/7"},
		{"fd00:ec2::254", false, "fd00:ec2::254"},
		{"fe00::", true, ""},
		{"fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff", true, ""},
		{"fe80::", false, "fe80::/10"},
		{"fe80::1", false, "fe80::/10"},
		{"febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", false, "fe80::/10"},
		{"fec0::", false, "fec0::/10"},
		{"feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", false, "fec0::/10"},
		{"ff00::", false, "ff00::/8"},
		{"ff02::1", false, "ff00::/8"},
		{"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", false, "ff00::/8"},
		{"2001:4860:4860::8888", true, ""},
		{"2606:4700:4700::1111", true, ""},
	})
}

func TestAddrMetadataNeedsItsOwnRule(t *testing.T) {
	p := newPolicy(t, Config{AllowedCIDRs: []string{"169.254.0.0/16", "fc00::/7", "100.64.0.0/10"}}, Options{})
	checkAddrs(t, p, []addrCase{
		{"169.254.1.1", true, ""},
		{"169.254.169.254", false, "169.254.169.254/32 (cloud metadata service)"},
		{"169.254.170.2", false, "cloud metadata"},
		{"fd12::1", true, ""},
		{"fd00:ec2::254", false, "fd00:ec2::254/128 (cloud metadata service)"},
		{"100.64.0.1", true, ""},
		{"100.100.100.200", false, "cloud metadata"},
	})
	p = newPolicy(t, Config{AllowedCIDRs: []string{"169.254.169.254/32", "fd00:ec2::254/128"}}, Options{})
	checkAddrs(t, p, []addrCase{
		{"169.254.169.254", true, ""},
		{"169.254.169.253", false, "169.254.0.0/16"},
		{"fd00:ec2::254", true, ""},
		{"fd00:ec2::253", false, "fc00::/7"},
	})
}

// TestAddrEmbeddedV4 checks that an IPv4 address embedded in IPv6, in
// any of the forms that translators and tunnels deliver to, gets the
// policy of the IPv4 address.
func TestAddrEmbeddedV4(t *testing.T) {
	p := newPolicy(t, Config{}, Options{})
	checkAddrs(t, p, []addrCase{
		// IPv4-mapped.
		{"::ffff:10.0.0.1", false, "10.0.0.0/8"},
		{"::ffff:127.0.0.1", false, "127.0.0.0/8"},
		{"::ffff:169.254.169.254", false, "169.254."},
		{"::ffff:0.0.0.0", false, "0.0.0.0/8"},
		{"::ffff:255.255.255.255", false, "240.0.0.0/4"},
		{"::ffff:8.8.8.8", true, ""},
		// IPv4-compatible (deprecated).
		{"::10.0.0.1", false, "embeds 10.0.0.1"},
		{"::127.0.0.1", false, "embeds 127.0.0.1"},
		{"::2", false, "embeds 0.0.0.2"},
		{"::8.8.8.8", true, ""},
		// IPv4-translated (SIIT).
		{"::ffff:0:10.0.0.1", false, "embeds 10.0.0.1"},
		{"::ffff:0:8.8.8.8", true, ""},
		// NAT64, well-known prefix.
		{"64:ff9b::10.0.0.1", false, "embeds 10.0.0.1"},
		{"64:ff9b::127.0.0.1", false, "127.0.0.0/8"},
		{"64:ff9b::169.254.169.254", false, "embeds 169.254.169.254"},
		{"64:ff9b::192.168.1.1", false, "192.168.0.0/16"},
		{"64:ff9b::8.8.8.8", true, ""},
		// NAT64, local-use prefix: every RFC 6052 layout must be public.
		{"64:ff9b:1:0808:0808:0808:0808:0808", true, ""},
		{"64:ff9b:1::808:808", false, "embeds 0.0.0.0"},
		{"64:ff9b:1:0a00:0000:0100::", false, "embeds 10.0.0.1"},  // /48 layout
		{"64:ff9b:1:080a:0000:0001::", false, "embeds 10.0.0.1"},  // /56 layout
		{"64:ff9b:1:0808:080a:0000:0108:0808", false, "10.0.0.1"}, // /64 layout
		{"64:ff9b:1:0808:0808:0808:7f00:1", false, "127.0.0.1"},   // /96 layout
		// 6to4.
		{"2002:0a00:0001::", false, "embeds 10.0.0.1"},
		{"2002:c0a8:0101::1", false, "embeds 192.168.1.1"},
		{"2002:7f00:0001::1", false, "embeds 127.0.0.1"},
		{"2002:a9fe:a9fe::", false, "embeds 169.254.169.254"},
		{"2002:0808:0808::1", true, ""},
		// Teredo: server in bits 32-63, client obfuscated in bits 96-127.
		{"2001:0:4136:e378:8000:63bf:3fff:fdd2", true, ""},
		{"2001:0:4136:e378:8000:63bf:f5ff:fffe", false, "embeds 10.0.0.1"},
		{"2001:0:4136:e378:8000:63bf:80ff:fffe", false, "embeds 127.0.0.1"},
		{"2001:0:0a00:0001:8000:63bf:3fff:fdd2", false, "embeds 10.0.0.1"},
	})
}

func TestAddrZoneAndInvalid(t *testing.T) {
	p := newPolicy(t, Config{BlockPrivateIPs: new(false), AllowedCIDRs: []string{"fe80::/10"}}, Options{})
	for _, s := range []string{"fe80::1%eth0", "2001:4860:4860::8888%eth0", "fd00::1%1"} {
		a := netip.MustParseAddr(s)
		if ok, reason := p.AddrAllowed(a); ok || !strings.Contains(reason, "zone-scoped") {
			t.Errorf("AddrAllowed(%s) = %v, %q; want blocked as zone-scoped", s, ok, reason)
		}
	}
	if ok, _ := p.AddrAllowed(netip.Addr{}); ok {
		t.Error("AddrAllowed(invalid) = true")
	}
}

func TestAddrBlockPrivateOff(t *testing.T) {
	p := newPolicy(t, Config{BlockPrivateIPs: new(false)}, Options{})
	checkAddrs(t, p, []addrCase{
		{"10.0.0.1", true, ""},
		{"172.16.0.1", true, ""},
		{"192.168.1.1", true, ""},
		{"100.64.0.1", true, ""},
		{"fd12::1", true, ""},
		{"fec0::1", true, ""},
		{"::ffff:10.0.0.1", true, ""},
		{"64:ff9b::192.168.1.1", true, ""},
		// What reaches this machine, link-local, metadata and special
		// ranges stay blocked.
		{"127.0.0.1", false, "loopback"},
		{"::1", false, "loopback"},
		{"0.0.0.0", false, "0.0.0.0/8"},
		{"169.254.169.254", false, "169.254."},
		{"100.100.100.200", false, "cloud metadata"},
		{"fd00:ec2::254", false, "cloud metadata"},
		{"fe80::1", false, "link-local"},
		{"224.0.0.1", false, "multicast"},
		{"255.255.255.255", false, "240.0.0.0/4"},
		{"198.18.0.1", false, "198.18.0.0/15"},
		{"192.0.0.8", false, "192.0.0.0/24"},
		{"64:ff9b::127.0.0.1", false, "127.0.0.0/8"},
	})
}

func TestAddrHostAddrs(t *testing.T) {
	host := []netip.Addr{netip.MustParseAddr("203.0.113.7"), netip.MustParseAddr("2001:db8::7"), netip.MustParseAddr("::ffff:198.51.100.9"), netip.MustParseAddr("fe80::7%eth0")}
	p := newPolicy(t, Config{}, Options{HostAddrs: host})
	checkAddrs(t, p, []addrCase{
		{"203.0.113.7", false, "an address of this machine"},
		{"::ffff:203.0.113.7", false, "an address of this machine"},
		{"64:ff9b::203.0.113.7", false, "embeds 203.0.113.7"},
		{"2002:cb00:7107::1", false, "embeds 203.0.113.7"},
		{"203.0.113.8", true, ""},
		{"2001:db8::7", false, "an address of this machine"},
		{"2001:db8::8", true, ""},
		{"198.51.100.9", false, "an address of this machine"},
		{"fe80::7", false, "fe80::"},
	})
	// Only that exact address lifts the block of one of the machine's
	// addresses.
	p = newPolicy(t, Config{AllowedCIDRs: []string{"203.0.113.0/24"}}, Options{HostAddrs: host})
	checkAddrs(t, p, []addrCase{{"203.0.113.7", false, "an address of this machine"}})
	p = newPolicy(t, Config{AllowedCIDRs: []string{"203.0.113.7/32"}}, Options{HostAddrs: host})
	checkAddrs(t, p, []addrCase{{"203.0.113.7", true, ""}})
	// A host address inside a private range: lifting the range does
	// not lift the host.
	p = newPolicy(t, Config{AllowedCIDRs: []string{"10.0.0.0/8"}}, Options{HostAddrs: []netip.Addr{netip.MustParseAddr("10.1.2.3")}})
	checkAddrs(t, p, []addrCase{
		{"10.1.2.4", true, ""},
		{"10.1.2.3", false, "an address of this machine"},
	})
}

func TestAddrAllowedCIDRs(t *testing.T) {
	p := newPolicy(t, Config{AllowedCIDRs: []string{"10.1.0.0/16", "127.0.0.1/32", "fd00:1::/32"}}, Options{})
	checkAddrs(t, p, []addrCase{
		{"10.1.0.0", true, ""},
		{"10.1.255.255", true, ""},
		{"10.0.255.255", false, "10.0.0.0/8"},
		{"10.2.0.0", false, "10.0.0.0/8"},
		{"::ffff:10.1.2.3", true, ""},
		{"64:ff9b::10.1.2.3", true, ""},
		{"2002:0a01:0203::", true, ""},
		{"127.0.0.1", true, ""},
		{"127.0.0.2", false, "127.0.0.0/8"},
		{"fd00:1::5", true, ""},
		{"fd00:2::5", false, "fc00::/7"},
		{"192.168.1.1", false, "192.168.0.0/16"},
	})
}

func TestCheckLiftCIDR(t *testing.T) {
	bad := []string{"0.0.0.0/0", "::/0", "224.0.0.0/3", "10.0.0.0/7", "fc00::/6", "8.0.0.0/6", "2000::/2", "169.254.0.0/15"}
	for _, s := range bad {
		p := netip.MustParsePrefix(s)
		if err := checkLiftCIDR(p); err == nil {
			t.Errorf("checkLiftCIDR(%s) = nil, want an error", s)
		}
	}
	good := []string{"10.0.0.0/8", "10.1.2.3/32", "169.254.0.0/16", "169.254.169.254/32", "8.8.8.0/24", "203.0.113.7/32", "fd00::/8", "fc00::/7", "::1/128", "240.0.0.0/4"}
	for _, s := range good {
		if err := checkLiftCIDR(netip.MustParsePrefix(s)); err != nil {
			t.Errorf("checkLiftCIDR(%s) = %v", s, err)
		}
	}
}

func TestEmbeddedV4Layouts(t *testing.T) {
	got := embeddedV4(netip.MustParseAddr("64:ff9b:1:0102:0304:0506:0708:090a"))
	// bytes 6.. are 01 02 03 04 05 06 07 08 09 0a (byte 8 is 03).
	want := []string{"1.2.4.5", "2.4.5.6", "4.5.6.7", "7.8.9.10"}
	if len(got) != len(want) {
		t.Fatalf("embeddedV4 = %v, want %v", got, want)
	}
	for i := range want {
		if got[i].String() != want[i] {
			t.Errorf("layout %d: %s, want %s", i, got[i], want[i])
		}
	}
	if e := embeddedV4(netip.MustParseAddr("2001:4860::1")); e != nil {
		t.Errorf("embeddedV4 of a plain address = %v", e)
	}
	if e := embeddedV4(netip.MustParseAddr("10.0.0.1")); e != nil {
		t.Errorf("embeddedV4 of IPv4 = %v", e)
	}
}

func TestInterfaceAddrs(t *testing.T) {
	addrs, err := InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if !a.IsValid() || a.Is4In6() || a.Zone() != "" {
			t.Errorf("InterfaceAddrs gave %v", a)
		}
	}
	p := newPolicy(t, Config{BlockPrivateIPs: new(false)}, Options{HostAddrs: addrs})
	for _, a := range addrs {
		if ok, _ := p.AddrAllowed(a); ok {
			t.Errorf("this machine's address %s is allowed", a)
		}
	}
}

// TestAddrLiftHint checks that every refusal of an address names the
// allowed_cidrs entry that would open it, and that the entry does.
func TestAddrLiftHint(t *testing.T) {
	host := []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("10.1.2.3")}
	for _, c := range []struct {
		lifts []string
		addr  string
		want  string
	}{
		// A range around an address of this machine does not open it.
		{[]string{"127.0.0.0/8"}, "127.0.0.1", "only an allowed_cidrs entry of exactly 127.0.0.1/32 opens it (--allow-cidr 127.0.0.1/32)"},
		{nil, "127.0.0.1", "exactly 127.0.0.1/32"},
		{nil, "127.0.0.2", "allow it with --allow-cidr 127.0.0.2/32 (allowed_cidrs), or a range inside 127.0.0.0/8"},
		{[]string{"10.0.0.0/8"}, "10.1.2.3", "exactly 10.1.2.3/32"},
		{nil, "10.77.0.5", "allow it with --allow-cidr 10.77.0.5/32"},
		{nil, "169.254.169.254", "exactly 169.254.169.254/32"},
		{nil, "::1", "--allow-cidr ::1/128"},
		{nil, "64:ff9b::a00:1", "embeds 10.0.0.1, which is in 10.0.0.0/8 (private network): allow it with --allow-cidr 10.0.0.1/32"},
	} {
		p := newPolicy(t, Config{AllowedCIDRs: c.lifts}, Options{HostAddrs: host})
		a := netip.MustParseAddr(c.addr)
		ok, reason := p.AddrAllowed(a)
		if ok || !strings.Contains(reason, c.want) {
			t.Errorf("lifts %v: AddrAllowed(%s) = %v, %q; want it refused, saying %q", c.lifts, a, ok, reason, c.want)
			continue
		}
		// The entries the hints name open the address (::1 also embeds
		// 0.0.0.1, which the second hint names).
		lifts := slices.Clone(c.lifts)
		for range 3 {
			hinted := reason[strings.Index(reason, "--allow-cidr ")+len("--allow-cidr "):]
			lifts = append(lifts, strings.TrimRight(strings.Fields(hinted)[0], "),"))
			p = newPolicy(t, Config{AllowedCIDRs: lifts}, Options{HostAddrs: host})
			if ok, reason = p.AddrAllowed(a); ok {
				break
			}
		}
		if !ok {
			t.Errorf("lifts %v (with the hints): %s still refused: %s", lifts, a, reason)
		}
	}
}
