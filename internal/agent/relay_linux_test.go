package agent

import (
	"bytes"
	"encoding/binary"
	"testing"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// ndpFrame is an Ethernet frame from a device without a hardware address
// carrying an ICMPv6 message of type typ (with a target address when it
// is a neighbour message) and one link-layer address option of kind opt,
// all zeros (none when opt is 0), with a correct checksum, and room for
// the relay's additions.
func ndpFrame(t *testing.T, typ header.ICMPv6Type, opt byte) []byte {
	t.Helper()
	src := tcpip.AddrFrom16Slice([]byte{0xfe, 0x80, 14: 0, 15: 2})
	dst := tcpip.AddrFrom16Slice([]byte{0xff, 0x02, 11: 1, 12: 0xff, 15: 1})
	body := 4 // reserved (router solicitation)
	if typ != header.ICMPv6RouterSolicit {
		body = 4 + 16 // reserved or flags, then the target
	}
	icmp := make([]byte, 4+body)
	if opt != 0 {
		icmp = append(icmp, opt, 1, 0, 0, 0, 0, 0, 0)
	}
	icmp[0] = byte(typ)
	if typ != header.ICMPv6RouterSolicit {
		copy(icmp[8:24], []byte{0xfe, 0x80, 15: 1})
	}
	binary.BigEndian.PutUint16(icmp[2:4], header.ICMPv6Checksum(header.ICMPv6ChecksumParams{Header: icmp, Src: src, Dst: dst}))
	ip := make([]byte, header.IPv6MinimumSize)
	header.IPv6(ip).Encode(&header.IPv6Fields{PayloadLength: uint16(len(icmp)), TransportProtocol: header.ICMPv6ProtocolNumber, HopLimit: 255, SrcAddr: src, DstAddr: dst})
	eth := make([]byte, header.EthernetMinimumSize)
	header.Ethernet(eth).Encode(&header.EthernetFields{DstAddr: tcpip.LinkAddress("\x33\x33\xff\x00\x00\x01"), Type: header.IPv6ProtocolNumber})
	f := append(append(eth, ip...), icmp...)
	return append(f, make([]byte, frameRoom)...)[:len(f)]
}

// TestWithSourceMAC: frames of a device without a hardware address get
// the relay's, in the Ethernet header, in ARP and in the link-layer
// options of neighbour discovery, whose checksum stays valid; frames
// with an address, and other packets, are left alone.
func TestWithSourceMAC(t *testing.T) {
	mac := [6]byte{2, 1, 2, 3, 4, 5}
	for _, c := range []struct {
		typ header.ICMPv6Type
		opt byte
	}{
		{header.ICMPv6NeighborSolicit, 1}, {header.ICMPv6NeighborAdvert, 2}, {header.ICMPv6RouterSolicit, 1},
		// As gVisor's Sentry sends them: no option at all.
		{header.ICMPv6NeighborSolicit, 0}, {header.ICMPv6NeighborAdvert, 0}, {header.ICMPv6RouterSolicit, 0},
	} {
		f := ndpFrame(t, c.typ, c.opt)
		f = f[:withSourceMAC(f, mac)]
		if !bytes.Equal(f[6:12], mac[:]) {
			t.Errorf("type %d: source %x", c.typ, f[6:12])
		}
		ip := header.IPv6(f[14:])
		icmp := f[14+40:]
		if int(ip.PayloadLength()) != len(icmp) {
			t.Errorf("type %d: payload length %d, message %d bytes", c.typ, ip.PayloadLength(), len(icmp))
		}
		wantKind := byte(1)
		if c.typ == header.ICMPv6NeighborAdvert {
			wantKind = 2
		}
		if o := icmp[len(icmp)-8:]; o[0] != wantKind || o[1] != 1 || !bytes.Equal(o[2:], mac[:]) {
			t.Errorf("type %d: option %x", c.typ, o)
		}
		got := header.ICMPv6(icmp).Checksum()
		binary.BigEndian.PutUint16(icmp[2:4], 0)
		if want := header.ICMPv6Checksum(header.ICMPv6ChecksumParams{Header: icmp, Src: ip.SourceAddress(), Dst: ip.DestinationAddress()}); got != want {
			t.Errorf("type %d: checksum %#x, want %#x", c.typ, got, want)
		}
	}

	// ARP: the sender's hardware address too.
	arp := make([]byte, 14+28)
	binary.BigEndian.PutUint16(arp[12:14], 0x0806)
	arp[14+4], arp[14+5] = 6, 4
	if n := withSourceMAC(arp, mac); n != len(arp) {
		t.Errorf("ARP: length %d", n)
	}
	if !bytes.Equal(arp[6:12], mac[:]) || !bytes.Equal(arp[14+8:14+14], mac[:]) {
		t.Errorf("ARP: %x", arp)
	}

	// A frame with an address of its own, and a truncated one, stay.
	own := ndpFrame(t, header.ICMPv6NeighborSolicit, 1)
	copy(own[6:12], []byte{2, 9, 9, 9, 9, 9})
	before := bytes.Clone(own)
	if n := withSourceMAC(own, mac); n != len(before) || !bytes.Equal(own, before) {
		t.Error("a frame with a source address was changed")
	}
	short := ndpFrame(t, header.ICMPv6NeighborSolicit, 1)[:14+40+10]
	withSourceMAC(short, mac) // must not panic
	for n := range 14 + 40 + 32 {
		withSourceMAC(ndpFrame(t, header.ICMPv6NeighborSolicit, 1)[:n], mac)
	}
}
