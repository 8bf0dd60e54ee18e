package testnet

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// DefaultTTL is the TTL of the answers of names set with Set.
const DefaultTTL = 60

// DNS is a programmable authoritative DNS server, over UDP and TCP, that
// knows only the names it was given. Names are case-insensitive and the
// trailing dot is optional. A name it does not know gets NXDOMAIN; a name
// it knows gets its records of the type asked for, or none (NODATA). It
// sets the AA and RA bits, so that it can stand both for an authoritative
// server and for a recursive one.
//
// Its methods are safe for concurrent use, and take effect at the next
// query.
type DNS struct {
	mu      sync.Mutex
	names   map[string]*rrset
	queries map[string]int
	total   int
}

// rrset is what the server knows of one name.
type rrset struct {
	ttl   uint32
	cname string
	txt   []string
	// seq are the successive answers of SetSequence; Set makes one.
	seq [][]netip.Addr
	// next is, per query type, the index in seq of the next answer.
	next map[dnsmessage.Type]int
}

func newDNS() *DNS {
	return &DNS{names: make(map[string]*rrset), queries: make(map[string]int)}
}

// canonical is the key of a name: lower case, no trailing dot.
func canonical(name string) string {
	return strings.ToLower(strings.TrimSuffix(name, "."))
}

// entry returns name's records, made anew when fresh is set; d.mu is held.
func (d *DNS) entry(name string, fresh bool) *rrset {
	key := canonical(name)
	rs := d.names[key]
	if rs == nil || fresh {
		rs = &rrset{ttl: DefaultTTL, next: make(map[dnsmessage.Type]int)}
		if old := d.names[key]; old != nil {
			rs.txt = old.txt
		}
		d.names[key] = rs
	}
	return rs
}

// Set makes name answer with addrs: the IPv4 ones to A queries, the IPv6
// ones to AAAA queries, with TTL DefaultTTL. It replaces the name's
// addresses and any CNAME; its TXT record stays. With no addrs, the name
// exists but has no address (NODATA).
func (d *DNS) Set(name string, addrs ...netip.Addr) {
	d.SetSequence(name, DefaultTTL, addrs)
}

// SetSequence makes successive queries for name get successive answers,
// the last one repeating, with the given TTL: DNS rebinding. A and AAAA
// queries go through the sequence each at its own pace, so that a client
// that asks for both families once per lookup sees answers[0], then
// answers[1] and so on in both.
func (d *DNS) SetSequence(name string, ttl uint32, answers ...[]netip.Addr) {
	d.mu.Lock()
	defer d.mu.Unlock()
	rs := d.entry(name, true)
	rs.ttl = ttl
	for _, a := range answers {
		rs.seq = append(rs.seq, append([]netip.Addr(nil), a...))
	}
}

// SetTXT gives name a TXT record with txt (split into strings of 255
// bytes as the format needs), in place of any it had. The name's
// addresses stay.
func (d *DNS) SetTXT(name, txt string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	rs := d.entry(name, false)
	rs.txt = nil
	for len(txt) > 255 {
		rs.txt = append(rs.txt, txt[:255])
		txt = txt[255:]
	}
	rs.txt = append(rs.txt, txt)
}

// SetCNAME makes name an alias of target: every query for name is
// answered with the CNAME record and then with target's records of the
// type asked for, if the server knows target. It replaces the name's other
// records.
func (d *DNS) SetCNAME(name, target string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	rs := d.entry(name, true)
	rs.txt = nil
	rs.cname = canonical(target)
}

// Delete forgets name: it gets NXDOMAIN from then on.
func (d *DNS) Delete(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.names, canonical(name))
}

// Queries is the number of questions received for name, of any type,
// whether the server knows the name or not.
func (d *DNS) Queries(name string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.queries[canonical(name)]
}

// Total is the number of questions received, for any name.
func (d *DNS) Total() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.total
}

// answer builds the reply to the query msg for a transport that carries
// at most limit bytes (0: no limit). It returns nil for a message that is
// not a query it can parse.
func (d *DNS) answer(msg []byte, limit int) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(msg)
	if err != nil || h.Response {
		return nil
	}
	h.Truncated = false
	qs, err := p.AllQuestions()
	if err != nil {
		return reply(h, nil, dnsmessage.RCodeFormatError, 0, nil)
	}
	udpSize := 0
	if err := p.SkipAllAnswers(); err == nil {
		if err := p.SkipAllAuthorities(); err == nil {
			for {
				rh, err := p.AdditionalHeader()
				if err != nil {
					break
				}
				if rh.Type == dnsmessage.TypeOPT {
					udpSize = max(int(rh.Class), 512)
				}
				if err := p.SkipAdditional(); err != nil {
					break
				}
			}
		}
	}
	if h.OpCode != 0 || len(qs) != 1 {
		return reply(h, qs, dnsmessage.RCodeNotImplemented, udpSize, nil)
	}
	q := qs[0]
	rcode, answers := d.resolve(q)
	out := reply(h, qs, rcode, udpSize, answers)
	if limit != 0 {
		if udpSize > limit {
			limit = udpSize
		}
		if len(out) > limit {
			h.Truncated = true
			out = reply(h, qs, rcode, udpSize, nil)
		}
	}
	return out
}

// resolve finds the answer to q and counts the question.
func (d *DNS) resolve(q dnsmessage.Question) (dnsmessage.RCode, []dnsmessage.Resource) {
	d.mu.Lock()
	defer d.mu.Unlock()
	name := canonical(q.Name.String())
	d.queries[name]++
	d.total++

	var answers []dnsmessage.Resource
	owner := q.Name
	for hops := 0; ; hops++ {
		rs := d.names[name]
		if rs == nil {
			if hops == 0 {
				return dnsmessage.RCodeNameError, nil
			}
			return dnsmessage.RCodeSuccess, answers
		}
		hdr := dnsmessage.ResourceHeader{Name: owner, Class: dnsmessage.ClassINET, TTL: rs.ttl}
		if rs.cname != "" && q.Type != dnsmessage.TypeCNAME && hops < 8 {
			target, err := dnsmessage.NewName(rs.cname + ".")
			if err != nil {
				return dnsmessage.RCodeServerFailure, nil
			}
			answers = append(answers, dnsmessage.Resource{Header: hdr, Body: &dnsmessage.CNAMEResource{CNAME: target}})
			name, owner = rs.cname, target
			continue
		}
		switch q.Type {
		case dnsmessage.TypeA, dnsmessage.TypeAAAA:
			if len(rs.seq) == 0 {
				break
			}
			i := min(rs.next[q.Type], len(rs.seq)-1)
			rs.next[q.Type] = i + 1
			for _, a := range rs.seq[i] {
				switch {
				case q.Type == dnsmessage.TypeA && a.Is4():
					answers = append(answers, dnsmessage.Resource{Header: hdr, Body: &dnsmessage.AResource{A: a.As4()}})
				case q.Type == dnsmessage.TypeAAAA && a.Is6() && !a.Is4In6():
					answers = append(answers, dnsmessage.Resource{Header: hdr, Body: &dnsmessage.AAAAResource{AAAA: a.As16()}})
				}
			}
		case dnsmessage.TypeTXT:
			if rs.txt != nil {
				answers = append(answers, dnsmessage.Resource{Header: hdr, Body: &dnsmessage.TXTResource{TXT: rs.txt}})
			}
		case dnsmessage.TypeCNAME:
			if rs.cname != "" {
				target, err := dnsmessage.NewName(rs.cname + ".")
				if err != nil {
					return dnsmessage.RCodeServerFailure, nil
				}
				answers = append(answers, dnsmessage.Resource{Header: hdr, Body: &dnsmessage.CNAMEResource{CNAME: target}})
			}
		}
		return dnsmessage.RCodeSuccess, answers
	}
}

// buildError carries a dnsmessage.Builder error out of reply's steps.
type buildError struct{ error }

// reply builds a response to a query with header h and questions qs, or
// returns nil if it cannot (a name too long, say): the client then gets
// no answer rather than the test binary a panic.
func reply(h dnsmessage.Header, qs []dnsmessage.Question, rcode dnsmessage.RCode, udpSize int, answers []dnsmessage.Resource) (out []byte) {
	defer func() {
		if v := recover(); v != nil {
			if _, ok := v.(buildError); !ok {
				panic(v)
			}
			out = nil
		}
	}()
	b := dnsmessage.NewBuilder(make([]byte, 0, 512), dnsmessage.Header{
		ID:                 h.ID,
		Response:           true,
		OpCode:             h.OpCode,
		Authoritative:      true,
		Truncated:          h.Truncated,
		RecursionDesired:   h.RecursionDesired,
		RecursionAvailable: true,
		RCode:              rcode,
	})
	b.EnableCompression()
	must := func(err error) {
		if err != nil {
			panic(buildError{err})
		}
	}
	must(b.StartQuestions())
	for _, q := range qs {
		must(b.Question(q))
	}
	must(b.StartAnswers())
	for _, r := range answers {
		switch body := r.Body.(type) {
		case *dnsmessage.AResource:
			must(b.AResource(r.Header, *body))
		case *dnsmessage.AAAAResource:
			must(b.AAAAResource(r.Header, *body))
		case *dnsmessage.TXTResource:
			must(b.TXTResource(r.Header, *body))
		case *dnsmessage.CNAMEResource:
			must(b.CNAMEResource(r.Header, *body))
		}
	}
	if udpSize != 0 {
		must(b.StartAdditionals())
		var rh dnsmessage.ResourceHeader
		must(rh.SetEDNS0(udpSize, dnsmessage.RCodeSuccess, false))
		must(b.OPTResource(rh, dnsmessage.OPTResource{}))
	}
	out, err := b.Finish()
	must(err)
	return out
}

// serveUDP answers the queries that arrive on pc until it is closed;
// seen is called for each datagram.
func (d *DNS) serveUDP(pc net.PacketConn, seen func()) {
	buf := make([]byte, 65535)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		seen()
		if out := d.answer(buf[:n], 512); out != nil {
			_, _ = pc.WriteTo(out, from)
		}
	}
}

// serveTCP answers the length-prefixed queries of one connection until
// the client closes it or stays idle for a while.
func (d *DNS) serveTCP(c net.Conn) {
	defer c.Close()
	for {
		_ = c.SetDeadline(time.Now().Add(time.Minute))
		var n [2]byte
		if _, err := io.ReadFull(c, n[:]); err != nil {
			return
		}
		msg := make([]byte, binary.BigEndian.Uint16(n[:]))
		if _, err := io.ReadFull(c, msg); err != nil {
			return
		}
		out := d.answer(msg, 0)
		if out == nil {
			return
		}
		framed := append(binary.BigEndian.AppendUint16(nil, uint16(len(out))), out...)
		if _, err := c.Write(framed); err != nil {
			return
		}
	}
}
