package netstack

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/airlock-sandbox/airlock/policy"
)

const (
	// maxDNSQuery bounds a question from the sandbox, over UDP or TCP.
	maxDNSQuery = 1024
	// maxDNSUDPAnswer bounds an answer to the sandbox over UDP (the
	// classic limit, so no EDNS is needed); answers are cut to
	// maxDNSAddrs addresses, which always fit.
	maxDNSUDPAnswer = 512
	// maxDNSAddrs bounds the addresses in one answer.
	maxDNSAddrs = 8
	// maxUpstreamAnswer bounds an upstream answer read over TCP.
	maxUpstreamAnswer = 64 << 10
	// maxDNSInFlight bounds the questions being resolved at once.
	maxDNSInFlight = 64
	// maxAnswerTTL caps the TTL given to the sandbox.
	maxAnswerTTL = 3600
	// hostResolverTTL is the TTL of answers from the host's resolver,
	// which does not report one.
	hostResolverTTL = 60
	dnsTimeout      = 5 * time.Second
)

// errNXDomain is an upstream's "no such name".
var errNXDomain = errors.New("no such name")

// dnsServer answers the sandbox's questions at the gateway.
type dnsServer struct {
	policy *policy.Policy
	pins   *PinSet
	emit   func(Event)
	log    *slog.Logger
	// resolved, when set, hears each name answered with allowed
	// addresses.
	resolved func(name string)
	sem      chan struct{}
	// lookup resolves name (fully qualified, lower case) for qtype (A or
	// AAAA) upstream, with the TTL the answer may be kept for (for an
	// answer without addresses, its negative-caching TTL). It returns
	// errNXDomain, and that TTL, for a name that does not exist.
	lookup func(ctx context.Context, name string, qtype dnsmessage.Type) ([]netip.Addr, uint32, error)
	// cache holds the sandbox's upstream answers; it calls lookup.
	cache *dnsCache
}

func newDNSServer(p *policy.Policy, pins *PinSet, emit func(Event), log *slog.Logger) *dnsServer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := &dnsServer{policy: p, pins: pins, emit: emit, log: log, sem: make(chan struct{}, maxDNSInFlight)}
	if servers := p.DNSServers(); len(servers) > 0 {
		d.lookup = func(ctx context.Context, name string, qtype dnsmessage.Type) ([]netip.Addr, uint32, error) {
			return lookupServers(ctx, servers, name, qtype)
		}
	} else {
		d.lookup = lookupHost
	}
	d.cache = newDNSCache(func(ctx context.Context, name string, qtype dnsmessage.Type) ([]netip.Addr, uint32, error) {
		return d.lookup(ctx, name, qtype)
	})
	return d
}

// tryAcquire takes a slot for one question, or reports that too many are
// in flight.
func (d *dnsServer) tryAcquire() bool {
	select {
	case d.sem <- struct{}{}:
		return true
	default:
		return false
	}
}

func (d *dnsServer) release() { <-d.sem }

// Extended DNS errors (RFC 8914) that answers carry for clients that
// speak EDNS, such as dig, so that a refusal does not pass for a fact of
// DNS. They never name a blocked address: the sandbox is not told what
// an internal name resolves to.
const (
	edeOther   = 0
	edeBlocked = 15

	edeNotAllowed   = "airlock: this name is not among the sandbox's allowed hosts"
	edeAddrsBlocked = "airlock: every address of this name is blocked by the sandbox's network policy (allowed_cidrs, --allow-cidr, can open them); the supervisor's network event names them"
	edeRateLimited  = "airlock: the sandbox asked more DNS questions than its rate allows; retry later"
)

// query is what answer needs of a question from the sandbox.
type query struct {
	hdr dnsmessage.Header
	q   *dnsmessage.Question
	// edns: the query had an OPT record, so the answer may have one.
	edns bool
}

// answer returns the answer to one query from the sandbox, or nil when
// nothing is to be sent back. proto is "udp" or "tcp".
func (d *dnsServer) answer(ctx context.Context, msg []byte, proto string) []byte {
	if len(msg) > maxDNSQuery {
		return nil
	}
	var p dnsmessage.Parser
	hdr, err := p.Start(msg)
	if err != nil || hdr.Response {
		return nil
	}
	qr := query{hdr: hdr}
	if hdr.OpCode != 0 {
		return qr.reply(dnsmessage.RCodeNotImplemented, nil, 0, 0, "")
	}
	qs, err := p.AllQuestions()
	if err != nil || len(qs) != 1 {
		return qr.reply(dnsmessage.RCodeFormatError, nil, 0, 0, "")
	}
	q := qs[0]
	qr.q = &q
	qr.edns = hasOPT(&p)
	if q.Class != dnsmessage.ClassINET {
		return qr.reply(dnsmessage.RCodeRefused, nil, 0, 0, "")
	}
	name := normalizeName(q.Name.String())
	ev := Event{Kind: EventDNS, Host: name, Proto: proto, QType: typeName(q.Type)}
	if ok, reason := d.policy.NameResolvable(name); !ok {
		ev.Blocked, ev.Reason = true, reason
		d.emit(ev)
		return qr.reply(dnsmessage.RCodeNameError, nil, 0, edeBlocked, edeNotAllowed)
	}
	if q.Type != dnsmessage.TypeA && q.Type != dnsmessage.TypeAAAA {
		// No upstream query for any other type: an empty answer, so
		// that no data rides on TXT, NULL and the like.
		return qr.reply(dnsmessage.RCodeSuccess, nil, 0, 0, "")
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, dnsTimeout)
	defer cancel()
	res, _, err := d.cache.resolve(ctx, name+".", q.Type)
	ev.DurationMs = time.Since(start).Milliseconds()
	switch {
	case errors.Is(err, errRateLimited):
		ev.Blocked, ev.Reason = true, fmt.Sprintf("%s: %v (%d a second)", policy.ReasonLimit, err, upstreamRate)
		d.emit(ev)
		return qr.reply(dnsmessage.RCodeRefused, nil, 0, edeOther, edeRateLimited)
	case err != nil:
		d.log.Debug("dns lookup failed", "name", name, "type", ev.QType, "err", err)
		ev.Reason = policy.ReasonUpstreamError + ": " + err.Error()
		d.emit(ev)
		return qr.reply(dnsmessage.RCodeServerFailure, nil, 0, 0, "")
	case res.nx:
		ev.Reason = "nxdomain"
		d.emit(ev)
		return qr.reply(dnsmessage.RCodeNameError, nil, res.ttl, 0, "")
	}
	var kept []netip.Addr
	var dropped []string
	for _, a := range res.addrs {
		if ok, reason := d.policy.AddrAllowed(a); !ok {
			dropped = append(dropped, reason)
			continue
		}
		if len(kept) < maxDNSAddrs {
			kept = append(kept, a)
		}
	}
	if len(kept) > 0 {
		// A cached answer pins as a fresh one does, for what remains of
		// its TTL.
		d.pins.Add(name, kept, time.Duration(res.ttl)*time.Second)
		if d.resolved != nil {
			d.resolved(name)
		}
	}
	for _, a := range kept {
		ev.Answers = append(ev.Answers, a.String())
	}
	var ede uint16
	var edeText string
	if len(dropped) > 0 {
		ev.Reason = strings.Join(dropped, "; ")
		// Every answer dropped is a blocked lookup; some dropped is not.
		ev.Blocked = len(kept) == 0
		if ev.Blocked {
			// An empty answer, not NXDOMAIN: the name exists, and has no
			// address that the sandbox may use ("No address associated
			// with hostname" is what getaddrinfo says, and it is true).
			ede, edeText = edeBlocked, edeAddrsBlocked
		}
	}
	d.emit(ev)
	return qr.reply(dnsmessage.RCodeSuccess, kept, res.ttl, ede, edeText)
}

// hasOPT reports whether the rest of a query, past its questions, has an
// OPT record (EDNS).
func hasOPT(p *dnsmessage.Parser) bool {
	if p.SkipAllAnswers() != nil || p.SkipAllAuthorities() != nil {
		return false
	}
	for {
		h, err := p.AdditionalHeader()
		if err != nil {
			return false
		}
		if h.Type == dnsmessage.TypeOPT {
			return true
		}
		if p.SkipAdditional() != nil {
			return false
		}
	}
}

// maxEDEText bounds the text of an extended error, so that an answer
// always fits in maxDNSUDPAnswer.
const maxEDEText = 200

// reply builds the answer to qr: addrs of the type asked, with ttl, and
// when the query spoke EDNS an OPT record with the extended error ede
// (and text) when text is set. It returns nil when the message cannot
// be built.
func (qr query) reply(rcode dnsmessage.RCode, addrs []netip.Addr, ttl uint32, ede uint16, text string) []byte {
	hdr, q := qr.hdr, qr.q
	b := dnsmessage.NewBuilder(make([]byte, 0, maxDNSUDPAnswer), dnsmessage.Header{
		ID:                 hdr.ID,
		Response:           true,
		OpCode:             hdr.OpCode,
		RecursionDesired:   hdr.RecursionDesired,
		RecursionAvailable: true,
		RCode:              rcode,
	})
	b.EnableCompression()
	if q == nil {
		out, err := b.Finish()
		if err != nil {
			return nil
		}
		return out
	}
	if err := b.StartQuestions(); err != nil {
		return nil
	}
	if err := b.Question(*q); err != nil {
		return nil
	}
	if err := b.StartAnswers(); err != nil {
		return nil
	}
	rh := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: ttl}
	for _, a := range addrs {
		var err error
		switch {
		case q.Type == dnsmessage.TypeA && a.Is4():
			err = b.AResource(rh, dnsmessage.AResource{A: a.As4()})
		case q.Type == dnsmessage.TypeAAAA && a.Is6():
			err = b.AAAAResource(rh, dnsmessage.AAAAResource{AAAA: a.As16()})
		}
		if err != nil {
			return nil
		}
	}
	if qr.edns {
		if err := b.StartAdditionals(); err != nil {
			return nil
		}
		var oh dnsmessage.ResourceHeader
		if err := oh.SetEDNS0(maxDNSUDPAnswer, dnsmessage.RCodeSuccess, false); err != nil {
			return nil
		}
		var opt dnsmessage.OPTResource
		if text != "" {
			text = text[:min(len(text), maxEDEText)]
			data := binary.BigEndian.AppendUint16(nil, ede)
			opt.Options = append(opt.Options, dnsmessage.Option{Code: 15, Data: append(data, text...)})
		}
		if err := b.OPTResource(oh, opt); err != nil {
			return nil
		}
	}
	out, err := b.Finish()
	if err != nil || len(out) > maxDNSUDPAnswer {
		return nil
	}
	return out
}

// typeName names a question type for events. It adds the types that
// dnsmessage does not name, among those a sandbox is likely to ask
// (HTTPS and SVCB come from modern resolvers; NULL is a favourite of DNS
// tunnels), so that events show a name instead of a number.
func typeName(t dnsmessage.Type) string {
	switch t {
	case 10:
		return "NULL"
	case 43:
		return "DS"
	case 46:
		return "RRSIG"
	case 47:
		return "NSEC"
	case 48:
		return "DNSKEY"
	case 52:
		return "TLSA"
	case 64:
		return "SVCB"
	case 65:
		return "HTTPS"
	case 257:
		return "CAA"
	}
	return strings.TrimPrefix(t.String(), "Type")
}

// lookupHost resolves with the host's resolver.
func lookupHost(ctx context.Context, name string, qtype dnsmessage.Type) ([]netip.Addr, uint32, error) {
	network := "ip4"
	if qtype == dnsmessage.TypeAAAA {
		network = "ip6"
	}
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, network, name)
	if err != nil {
		var de *net.DNSError
		if errors.As(err, &de) && de.IsNotFound {
			// No such name, or no address of this family: answer an
			// empty NOERROR, as a name with only the other family has.
			// The host's resolver gives no SOA to keep it by.
			return nil, noSOANegativeTTL, nil
		}
		return nil, 0, err
	}
	for i, a := range addrs {
		if qtype == dnsmessage.TypeA {
			addrs[i] = a.Unmap()
		}
	}
	return addrs, hostResolverTTL, nil
}

// lookupServers asks each server in turn, until one answers.
func lookupServers(ctx context.Context, servers []netip.AddrPort, name string, qtype dnsmessage.Type) ([]netip.Addr, uint32, error) {
	var errs []error
	for _, s := range servers {
		addrs, ttl, err := lookupServer(ctx, s, name, qtype)
		if err == nil || errors.Is(err, errNXDomain) {
			return addrs, ttl, err
		}
		errs = append(errs, fmt.Errorf("%s: %w", s, err))
		if ctx.Err() != nil {
			break
		}
	}
	return nil, 0, errors.Join(errs...)
}

// lookupServer asks one server over UDP, and over TCP when the UDP answer
// is truncated.
func lookupServer(ctx context.Context, server netip.AddrPort, name string, qtype dnsmessage.Type) ([]netip.Addr, uint32, error) {
	qname, err := dnsmessage.NewName(name)
	if err != nil {
		return nil, 0, err
	}
	var idb [2]byte
	if _, err := rand.Read(idb[:]); err != nil {
		return nil, 0, err
	}
	id := binary.BigEndian.Uint16(idb[:])
	q := dnsmessage.Question{Name: qname, Type: qtype, Class: dnsmessage.ClassINET}
	msg := dnsmessage.Message{Header: dnsmessage.Header{ID: id, RecursionDesired: true}, Questions: []dnsmessage.Question{q}}
	query, err := msg.Pack()
	if err != nil {
		return nil, 0, err
	}
	var d net.Dialer
	deadline, _ := ctx.Deadline()

	conn, err := d.DialContext(ctx, "udp", server.String())
	if err != nil {
		return nil, 0, err
	}
	defer conn.Close()
	if !deadline.IsZero() {
		_ = conn.SetDeadline(deadline)
	}
	if _, err := conn.Write(query); err != nil {
		return nil, 0, err
	}
	buf := make([]byte, 4096)
	for {
		n, err := conn.Read(buf)
		if err != nil {
			return nil, 0, err
		}
		addrs, ttl, truncated, err := parseUpstream(buf[:n], id, q)
		if errors.Is(err, errMismatch) {
			continue // a stray datagram: keep waiting
		}
		if err != nil || !truncated {
			return addrs, ttl, err
		}
		break
	}

	tc, err := d.DialContext(ctx, "tcp", server.String())
	if err != nil {
		return nil, 0, err
	}
	defer tc.Close()
	if !deadline.IsZero() {
		_ = tc.SetDeadline(deadline)
	}
	framed := binary.BigEndian.AppendUint16(nil, uint16(len(query)))
	if _, err := tc.Write(append(framed, query...)); err != nil {
		return nil, 0, err
	}
	resp, err := readFramed(tc, maxUpstreamAnswer)
	if err != nil {
		return nil, 0, err
	}
	addrs, ttl, _, err := parseUpstream(resp, id, q)
	return addrs, ttl, err
}

var errMismatch = errors.New("answer does not match the question")

// parseUpstream extracts the addresses of type q.Type that an upstream
// answer gives for q.Name, following the CNAME chain within the answer.
func parseUpstream(msg []byte, id uint16, q dnsmessage.Question) (addrs []netip.Addr, ttl uint32, truncated bool, err error) {
	var p dnsmessage.Parser
	hdr, err := p.Start(msg)
	if err != nil {
		return nil, 0, false, err
	}
	if !hdr.Response || hdr.ID != id {
		return nil, 0, false, errMismatch
	}
	qs, err := p.AllQuestions()
	if err != nil || len(qs) != 1 || qs[0].Type != q.Type || !strings.EqualFold(qs[0].Name.String(), q.Name.String()) {
		return nil, 0, false, errMismatch
	}
	if hdr.Truncated {
		return nil, 0, true, nil
	}
	switch hdr.RCode {
	case dnsmessage.RCodeSuccess, dnsmessage.RCodeNameError:
	default:
		return nil, 0, false, fmt.Errorf("upstream answered %s", hdr.RCode)
	}
	answers, err := p.AllAnswers()
	if err != nil {
		if hdr.RCode == dnsmessage.RCodeNameError {
			return nil, noSOANegativeTTL, false, errNXDomain
		}
		return nil, 0, false, err
	}
	if hdr.RCode == dnsmessage.RCodeNameError {
		return nil, negativeTTL(&p), false, errNXDomain
	}
	// The names that stand for the question: itself and its aliases.
	chain := map[string]bool{strings.ToLower(q.Name.String()): true}
	for range 8 {
		grew := false
		for _, rr := range answers {
			c, ok := rr.Body.(*dnsmessage.CNAMEResource)
			if ok && chain[strings.ToLower(rr.Header.Name.String())] && !chain[strings.ToLower(c.CNAME.String())] {
				chain[strings.ToLower(c.CNAME.String())] = true
				grew = true
			}
		}
		if !grew {
			break
		}
	}
	ttl = maxAnswerTTL
	for _, rr := range answers {
		if !chain[strings.ToLower(rr.Header.Name.String())] {
			continue
		}
		switch b := rr.Body.(type) {
		case *dnsmessage.AResource:
			if q.Type == dnsmessage.TypeA {
				addrs = append(addrs, netip.AddrFrom4(b.A))
				ttl = min(ttl, rr.Header.TTL)
			}
		case *dnsmessage.AAAAResource:
			if q.Type == dnsmessage.TypeAAAA {
				addrs = append(addrs, netip.AddrFrom16(b.AAAA))
				ttl = min(ttl, rr.Header.TTL)
			}
		}
	}
	if len(addrs) == 0 {
		ttl = negativeTTL(&p)
	}
	return addrs, ttl, false, nil
}

// negativeTTL is how long an answer without addresses may be kept: the
// smaller of the TTL and the MINIMUM field of the SOA record in its
// authority section (RFC 2308 section 5), or noSOANegativeTTL without
// one. p is past the answers.
func negativeTTL(p *dnsmessage.Parser) uint32 {
	for {
		h, err := p.AuthorityHeader()
		if err != nil {
			return noSOANegativeTTL
		}
		if h.Type != dnsmessage.TypeSOA {
			if p.SkipAuthority() != nil {
				return noSOANegativeTTL
			}
			continue
		}
		soa, err := p.SOAResource()
		if err != nil {
			return noSOANegativeTTL
		}
		ttl := min(h.TTL, soa.MinTTL)
		if ttl >= 1<<31 {
			// RFC 2181, 8: a TTL with its top bit set means zero.
			ttl = 0
		}
		return ttl
	}
}

// readFramed reads one DNS message with a two-byte length prefix, of at
// most limit bytes.
func readFramed(r io.Reader, limit int) ([]byte, error) {
	var lb [2]byte
	if _, err := io.ReadFull(r, lb[:]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint16(lb[:]))
	if n == 0 || n > limit {
		return nil, fmt.Errorf("dns message of %d bytes (limit %d)", n, limit)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, err
	}
	return buf, nil
}
