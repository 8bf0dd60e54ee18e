package policy

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
)

// blockClass says when a blocked range applies.
type blockClass uint8

const (
	// always: blocked whatever block_private_ips says (the machine
	// itself, link-local and cloud metadata, multicast, reserved).
	always blockClass = iota
	// private: private networks, blocked while block_private_ips is
	// true (the default).
	private
)

// A block is an address range that upstream connections may not reach
// unless a CIDR rule inside it lifts it.
type block struct {
	prefix netip.Prefix
	what   string
	class  blockClass
}

func mustBlock(cidr, what string, class blockClass) block {
	return block{prefix: netip.MustParsePrefix(cidr), what: what, class: class}
}

// builtinBlocks is the range list of DESIGN.md, plus IPv6 multicast, the
// deprecated IPv6 site-local range and the cloud metadata addresses (the
// latter as their own blocks, so that lifting the range around one of
// them does not expose it: only a rule for that exact address does).
var builtinBlocks = []block{
	mustBlock("0.0.0.0/8", "this network", always),
	mustBlock("10.0.0.0/8", "private network", private),
	mustBlock("100.64.0.0/10", "shared address space (carrier-grade NAT)", private),
	mustBlock("100.100.100.200/32", "cloud metadata service", always),
	mustBlock("127.0.0.0/8", "loopback", always),
	mustBlock("169.254.0.0/16", "link-local", always),
	mustBlock("169.254.169.254/32", "cloud metadata service", always),
	mustBlock("169.254.170.2/32", "cloud metadata service", always),
	mustBlock("172.16.0.0/12", "private network", private),
	mustBlock("192.0.0.0/24", "IETF protocol assignments", always),
	mustBlock("192.168.0.0/16", "private network", private),
	mustBlock("198.18.0.0/15", "benchmarking", always),
	mustBlock("224.0.0.0/4", "multicast", always),
	mustBlock("240.0.0.0/4", "reserved and broadcast", always),
	mustBlock("::/128", "unspecified", always),
	mustBlock("::1/128", "loopback", always),
	mustBlock("fc00::/7", "unique local (private network)", private),
	mustBlock("fd00:ec2::254/128", "cloud metadata service", always),
	mustBlock("fe80::/10", "link-local", always),
	mustBlock("fec0::/10", "site-local (private network)", private),
	mustBlock("ff00::/8", "multicast", always),
}

// Ranges whose addresses carry an IPv4 address that the traffic ends up
// at (through a translator or a tunnel). The embedded address gets the
// same policy as if it had been the destination.
var (
	nat64WellKnown = netip.MustParsePrefix("64:ff9b::/96")    // RFC 6052
	nat64Local     = netip.MustParsePrefix("64:ff9b:1::/48")  // RFC 8215
	sixToFour      = netip.MustParsePrefix("2002::/16")       // RFC 3056
	teredo         = netip.MustParsePrefix("2001::/32")       // RFC 4380
	v4Compatible   = netip.MustParsePrefix("::/96")           // RFC 4291, deprecated
	v4Translated   = netip.MustParsePrefix("::ffff:0:0:0/96") // RFC 2765 (SIIT)
)

// embeddedV4 returns the IPv4 addresses that an IPv6 address carries,
// in every form that some translator or tunnel would deliver to. For
// the local-use NAT64 prefix, whose layout depends on the prefix length
// the operator picked, every RFC 6052 layout that fits inside it (/48,
// /56, /64, /96) is returned.
func embeddedV4(a netip.Addr) []netip.Addr {
	if !a.Is6() || a.Is4In6() {
		return nil
	}
	b := a.As16()
	at := func(off int) netip.Addr { return netip.AddrFrom4([4]byte(b[off : off+4])) }
	switch {
	case nat64WellKnown.Contains(a), v4Compatible.Contains(a), v4Translated.Contains(a):
		return []netip.Addr{at(12)}
	case nat64Local.Contains(a):
		// RFC 6052 section 2.2: bits 64..71 are always zero, and skipped.
		return []netip.Addr{
			netip.AddrFrom4([4]byte{b[6], b[7], b[9], b[10]}),   // /48
			netip.AddrFrom4([4]byte{b[7], b[9], b[10], b[11]}),  // /56
			netip.AddrFrom4([4]byte{b[9], b[10], b[11], b[12]}), // /64
			at(12), // /96
		}
	case sixToFour.Contains(a):
		return []netip.Addr{at(2)}
	case teredo.Contains(a):
		server := at(4)
		var client [4]byte
		binary.BigEndian.PutUint32(client[:], ^binary.BigEndian.Uint32(b[12:16]))
		return []netip.Addr{server, netip.AddrFrom4(client)}
	}
	return nil
}

// addrPolicy decides which upstream addresses may be reached.
type addrPolicy struct {
	blocks []block
	// lifts are the allowed_cidrs entries.
	lifts []netip.Prefix
}

func newAddrPolicy(blockPrivate bool, hostAddrs []netip.Addr, lifts []netip.Prefix) addrPolicy {
	var ap addrPolicy
	for _, b := range builtinBlocks {
		if b.class == private && !blockPrivate {
			continue
		}
		ap.blocks = append(ap.blocks, b)
	}
	for _, a := range hostAddrs {
		a = a.Unmap().WithZone("")
		if !a.IsValid() {
			continue
		}
		ap.blocks = append(ap.blocks, block{prefix: netip.PrefixFrom(a, a.BitLen()), what: "an address of this machine", class: always})
	}
	ap.lifts = lifts
	return ap
}

// lifted reports whether a rule in lifts, or in extra, lifts block b for
// address a: the rule must contain a and lie inside b's range, so that a
// rule such as 0.0.0.0/0 lifts nothing and 169.254.0.0/16 does not lift
// the metadata address inside it.
func lifted(b block, a netip.Addr, lifts, extra []netip.Prefix) bool {
	for _, set := range [2][]netip.Prefix{lifts, extra} {
		for _, l := range set {
			if l.Contains(a) && l.Bits() >= b.prefix.Bits() && b.prefix.Contains(l.Addr()) {
				return true
			}
		}
	}
	return false
}

// check returns "" when a may be reached, or why not. extra are CIDR
// rules that apply to this decision only (the destination of an egress
// rule).
func (ap *addrPolicy) check(a netip.Addr, extra []netip.Prefix) string {
	if !a.IsValid() {
		return ReasonBlockedIP + ": no address"
	}
	if a.Zone() != "" {
		return ReasonBlockedIP + ": " + a.String() + " is zone-scoped"
	}
	a = a.Unmap()
	if why := ap.checkOne(a, a, extra); why != "" {
		return why
	}
	for _, v4 := range embeddedV4(a) {
		if why := ap.checkOne(a, v4, extra); why != "" {
			return why
		}
	}
	return ""
}

func (ap *addrPolicy) checkOne(outer, a netip.Addr, extra []netip.Prefix) string {
	for _, b := range ap.blocks {
		if !b.prefix.Contains(a) || lifted(b, a, ap.lifts, extra) {
			continue
		}
		what := fmt.Sprintf("%s is in %s (%s)", a, b.prefix, b.what)
		if outer != a {
			what = fmt.Sprintf("%s embeds %s, which is in %s (%s)", outer, a, b.prefix, b.what)
		}
		return fmt.Sprintf("%s: %s: %s", ReasonBlockedIP, what, ap.liftHint(b, a))
	}
	return ""
}

// liftHint says which allowed_cidrs entry would open a, refused first by
// block b: the address alone always does; a range does only inside
// every block that holds a, so an address of this machine or a metadata
// address (blocks of their own) opens only by itself, whatever range
// around it is allowed.
func (ap *addrPolicy) liftHint(b block, a netip.Addr) string {
	single := netip.PrefixFrom(a, a.BitLen())
	for _, o := range ap.blocks {
		if o.prefix.Contains(a) && o.prefix.IsSingleIP() {
			return fmt.Sprintf("only an allowed_cidrs entry of exactly %s opens it (--allow-cidr %s), not a range around it", single, single)
		}
	}
	return fmt.Sprintf("allow it with --allow-cidr %s (allowed_cidrs), or a range inside %s", single, b.prefix)
}

// checkLiftCIDR checks an allowed_cidrs entry: it must either lie inside
// one blocked range (and then lifts that part of it) or touch none.
func checkLiftCIDR(p netip.Prefix) error {
	overlaps := false
	for _, b := range builtinBlocks {
		if !b.prefix.Overlaps(p) {
			continue
		}
		if p.Bits() >= b.prefix.Bits() {
			return nil
		}
		overlaps = true
	}
	if overlaps {
		return fmt.Errorf("%s is wider than the blocked ranges it covers: give each range to allow on its own, inside one blocked range (such as 10.0.0.0/8 or 192.168.1.0/24)", p)
	}
	return nil
}

// parseCIDR parses a CIDR in canonical form. A bare address is taken as
// a single-address prefix when single is true.
func parseCIDR(s string, single bool) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		a, aerr := netip.ParseAddr(s)
		if aerr != nil || !single {
			return netip.Prefix{}, fmt.Errorf("%q is not a CIDR such as 10.1.0.0/16 or fd00::/8", s)
		}
		if a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("%q is zone-scoped", s)
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	if p.Addr().Is4In6() {
		return netip.Prefix{}, fmt.Errorf("%q is an IPv4-mapped prefix: write it as IPv4", s)
	}
	if m := p.Masked(); m != p {
		return netip.Prefix{}, fmt.Errorf("%q has bits set past its length: did you mean %s?", s, m)
	}
	return p, nil
}

// InterfaceAddrs lists the addresses of this machine's network
// interfaces (without zones), for Options.HostAddrs: the supervisor's
// netstack dials from the host, so these reach the host itself.
func InterfaceAddrs() ([]netip.Addr, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("listing interface addresses: %w", err)
	}
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		var ip net.IP
		switch v := a.(type) {
		case *net.IPNet:
			ip = v.IP
		case *net.IPAddr:
			ip = v.IP
		default:
			continue
		}
		if na, ok := netip.AddrFromSlice(ip); ok {
			out = append(out, na.Unmap())
		}
	}
	return out, nil
}
