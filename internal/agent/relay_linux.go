package agent

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"os"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
	"github.com/airlock-sandbox/airlock/internal/tap"
)

// maxFrame bounds a frame relayed either way: an Ethernet header and
// the largest MTU a TAP device takes.
const maxFrame = 14 + 65535

// frameRoom is what the relay may add to a frame (see fixNDP).
const frameRoom = 8

// relayMAC is the sandbox's hardware address on the relayed link. The
// Sentry's TAP devices have none (all zeros), and cannot be given one;
// the host's stack ignores neighbour discovery from a zero address, so
// the relay writes this one in (see withSourceMAC). Locally
// administered, unicast.
var relayMAC = [6]byte{0x02, 0xa1, 0x10, 0xc0, 0x00, 0x02}

// relayLink makes the sandbox's interface where the host cannot take
// its file (inside gVisor's Sentry, whose devices are its own): a TAP
// device of this network stack, whose frames it copies to and from the
// datagram socket l.FD, one frame per datagram, for as long as both
// exist. The host's network stack is at the socket's other end.
func relayLink(l *agentproto.LinkSpec) error {
	c, err := tapConfig(l)
	if err != nil {
		unix.Close(l.FD)
		return err
	}
	if c.AddressV6.IsValid() {
		// The Sentry's stack makes no link-local address of its own,
		// and reaches the gateway, fe80::1, only from one.
		c.LinkLocalV6 = netip.MustParsePrefix("fe80::2/64")
	}
	dev, err := tap.CreateHere(c)
	if err != nil {
		unix.Close(l.FD)
		return err
	}
	if err := unix.SetNonblock(l.FD, true); err != nil {
		dev.Close()
		unix.Close(l.FD)
		return err
	}
	unix.CloseOnExec(l.FD)
	sock := os.NewFile(uintptr(l.FD), "frames")
	go relayFrames(dev, sock, true)
	go relayFrames(sock, dev, false)
	return nil
}

// relayFrames copies frames from src to dst, each read one frame, until
// either ends; each direction has its own, so that a full side stalls
// only the frames bound for it. A frame the socket refuses for its size
// is dropped, as a link drops a frame over its MTU. outbound frames get
// relayMAC as their source.
func relayFrames(src, dst *os.File, outbound bool) {
	buf := make([]byte, maxFrame+frameRoom)
	for {
		n, err := src.Read(buf[:maxFrame])
		if err != nil {
			return
		}
		if outbound {
			n = withSourceMAC(buf[:n:n+frameRoom], relayMAC)
		}
		if _, err := dst.Write(buf[:n]); err != nil && !errors.Is(err, unix.ENOBUFS) && !errors.Is(err, unix.EMSGSIZE) {
			return
		}
	}
}

// withSourceMAC gives a frame sent from a device without a hardware
// address (all zeros) mac as its source, and returns its length: in the
// Ethernet header, in an ARP packet's sender address, and in IPv6
// neighbour discovery, whose solicitations and advertisements from such
// a device carry no link-layer address option at all (see fixNDP). f
// must have room for 8 more bytes past its length. Any other frame, or
// one too short to hold what it claims, is left as it is.
func withSourceMAC(f []byte, mac [6]byte) int {
	const eth = 14
	if len(f) < eth || !zeroMAC(f[6:12]) {
		return len(f)
	}
	copy(f[6:12], mac[:])
	switch binary.BigEndian.Uint16(f[12:14]) {
	case unix.ETH_P_ARP:
		// htype, ptype, hlen, plen, oper, then the sender's address.
		if len(f) >= eth+14 && f[eth+4] == 6 && zeroMAC(f[eth+8:eth+14]) {
			copy(f[eth+8:eth+14], mac[:])
		}
	case unix.ETH_P_IPV6:
		return eth + fixNDP(f[eth:], mac)
	}
	return len(f)
}

// fixNDP gives a router or neighbour solicitation, or a neighbour
// advertisement, in IPv6 packet p the link-layer address option it must
// carry to be answered (RFC 4861: the source's for a solicitation, the
// target's for an advertisement): a zero one is filled in, a missing one
// is appended (p has room for it past its length), and the ICMPv6
// checksum corrected. It returns p's length.
func fixNDP(p []byte, mac [6]byte) int {
	const ip6 = 40
	if len(p) < ip6+8 || p[6] != unix.IPPROTO_ICMPV6 {
		return len(p)
	}
	plen := int(binary.BigEndian.Uint16(p[4:6]))
	if plen < 8 || ip6+plen != len(p) {
		return len(p)
	}
	var opts int      // where the options start
	var want byte = 1 // source link-layer address
	switch p[ip6] {
	case 133: // router solicitation: type, code, checksum, reserved
		opts = 8
	case 135: // neighbour solicitation: ... and a target address
		opts = 24
	case 136: // neighbour advertisement
		opts, want = 24, 2 // target link-layer address
	default:
		return len(p)
	}
	if plen < opts {
		return len(p)
	}
	icmp := p[ip6 : ip6+plen]
	found := false
	for i := opts; i < len(icmp); {
		if i+2 > len(icmp) {
			return len(p)
		}
		n := int(icmp[i+1]) * 8
		if n == 0 || i+n > len(icmp) {
			return len(p)
		}
		if icmp[i] == want && n == 8 {
			found = true
			if zeroMAC(icmp[i+2 : i+8]) {
				copy(icmp[i+2:i+8], mac[:])
			}
		}
		i += n
	}
	if !found {
		if cap(p) < len(p)+8 || plen+8 > 0xffff {
			return len(p)
		}
		p = p[:len(p)+8]
		o := p[ip6+plen:]
		o[0], o[1] = want, 1
		copy(o[2:8], mac[:])
		plen += 8
		binary.BigEndian.PutUint16(p[4:6], uint16(plen))
		icmp = p[ip6 : ip6+plen]
	}
	icmp[2], icmp[3] = 0, 0
	binary.BigEndian.PutUint16(icmp[2:4], icmpv6Checksum(p[8:24], p[24:40], icmp))
	return len(p)
}

// icmpv6Checksum is the checksum of ICMPv6 message m from src to dst
// (RFC 4443, with the IPv6 pseudo-header), its own checksum field zero.
func icmpv6Checksum(src, dst, m []byte) uint16 {
	var sum uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(b[i])<<8 | uint32(b[i+1])
		}
		if len(b)%2 == 1 {
			sum += uint32(b[len(b)-1]) << 8
		}
	}
	add(src)
	add(dst)
	var pseudo [8]byte
	binary.BigEndian.PutUint32(pseudo[0:4], uint32(len(m)))
	pseudo[7] = unix.IPPROTO_ICMPV6
	add(pseudo[:])
	add(m)
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

func zeroMAC(b []byte) bool {
	return len(b) == 6 && b[0]|b[1]|b[2]|b[3]|b[4]|b[5] == 0
}
