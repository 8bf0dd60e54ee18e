package netstack

import (
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"
)

// Bounds on how long an answer stays pinned, whatever its TTL: clients
// often keep an answer past its TTL, and a TTL of 0 must still let the
// connection that follows the answer through.
const (
	minPinTTL = time.Minute
	maxPinTTL = 24 * time.Hour
)

// PinSet records, for one sandbox, which names DNS answered with which
// addresses, so that a connection to an address can be matched to the
// names the sandbox asked for. Entries expire; the number of (name,
// address) pairs is bounded, and when it is reached the pair closest to
// expiry is evicted. It is safe for concurrent use.
type PinSet struct {
	mu   sync.Mutex
	max  int
	n    int
	byIP map[netip.Addr]map[string]time.Time
	now  func() time.Time
}

// NewPinSet returns an empty pin set holding at most max (name, address)
// pairs (DefaultMaxPins when max <= 0).
func NewPinSet(max int) *PinSet {
	if max <= 0 {
		max = DefaultMaxPins
	}
	return &PinSet{max: max, byIP: make(map[netip.Addr]map[string]time.Time), now: time.Now}
}

// Add pins name to each address for ttl (clamped to [1 minute, 24 hours]).
// The name is normalised: lower case, without a trailing dot.
func (p *PinSet) Add(name string, ips []netip.Addr, ttl time.Duration) {
	name = normalizeName(name)
	if name == "" {
		return
	}
	ttl = min(max(ttl, minPinTTL), maxPinTTL)
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	exp := now.Add(ttl)
	for _, ip := range ips {
		if !ip.IsValid() {
			continue
		}
		names := p.byIP[ip]
		if names == nil {
			names = make(map[string]time.Time)
			p.byIP[ip] = names
		}
		if old, ok := names[name]; ok {
			if exp.After(old) {
				names[name] = exp
			}
			continue
		}
		if p.n >= p.max {
			p.expireLocked(now)
		}
		if p.n >= p.max {
			p.evictLocked()
		}
		// evictLocked may have removed this address's map.
		if names = p.byIP[ip]; names == nil {
			names = make(map[string]time.Time)
			p.byIP[ip] = names
		}
		names[name] = exp
		p.n++
	}
}

// Names returns the unexpired names pinned to ip, sorted. The address is
// matched exactly: an IPv4-mapped IPv6 address does not match its IPv4
// form.
func (p *PinSet) Names(ip netip.Addr) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	var out []string
	for name, exp := range p.byIP[ip] {
		if now.Before(exp) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// Len returns the number of (name, address) pairs held, expired or not.
func (p *PinSet) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

func (p *PinSet) expireLocked(now time.Time) {
	for ip, names := range p.byIP {
		for name, exp := range names {
			if !now.Before(exp) {
				delete(names, name)
				p.n--
			}
		}
		if len(names) == 0 {
			delete(p.byIP, ip)
		}
	}
}

func (p *PinSet) evictLocked() {
	var (
		victimIP   netip.Addr
		victimName string
		victimExp  time.Time
	)
	for ip, names := range p.byIP {
		for name, exp := range names {
			if victimName == "" || exp.Before(victimExp) {
				victimIP, victimName, victimExp = ip, name, exp
			}
		}
	}
	if victimName == "" {
		return
	}
	names := p.byIP[victimIP]
	delete(names, victimName)
	p.n--
	if len(names) == 0 {
		delete(p.byIP, victimIP)
	}
}

func normalizeName(name string) string {
	return strings.ToLower(strings.TrimSuffix(name, "."))
}
