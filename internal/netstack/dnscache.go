package netstack

import (
	"container/list"
	"context"
	"errors"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/time/rate"
)

// Bounds of a sandbox's DNS cache.
const (
	// maxCacheEntries and maxCacheBytes bound one sandbox's cache; past
	// either, the least recently used answers go first.
	maxCacheEntries = 1024
	maxCacheBytes   = 256 << 10
	// maxCachedAddrs bounds the addresses kept of one answer: more than
	// the sandbox is ever given (maxDNSAddrs), for those the policy
	// drops.
	maxCachedAddrs = 32
	// maxCacheTTL caps how long a positive answer is kept (and the TTL
	// the sandbox is told), maxNegativeTTL a negative one (NXDOMAIN, or
	// no address of the type asked), whose TTL comes from the SOA record
	// of the answer's authority section (RFC 2308) or, without one, is
	// noSOANegativeTTL.
	maxCacheTTL      = maxAnswerTTL
	maxNegativeTTL   = 300
	noSOANegativeTTL = 10
	// upstreamRate and upstreamBurst bound the questions per second that
	// one sandbox sends upstream (the cache answers the rest).
	upstreamRate  = 100
	upstreamBurst = 200
	// cacheEntryOverhead is what an entry costs besides its name and
	// addresses.
	cacheEntryOverhead = 128
)

// errRateLimited is the error of a question refused for the sandbox's
// upstream rate.
var errRateLimited = errors.New("more than the DNS questions per second that a sandbox may send upstream")

// dnsKey identifies a cached answer.
type dnsKey struct {
	name  string // fully qualified, lower case
	qtype dnsmessage.Type
}

// dnsResult is an upstream answer as the cache keeps it.
type dnsResult struct {
	addrs []netip.Addr
	// ttl is what remains of the answer's TTL, in seconds.
	ttl uint32
	// nx: the name does not exist.
	nx bool
}

type cacheEntry struct {
	key     dnsKey
	res     dnsResult
	expires time.Time
	size    int
}

// dnsCall is an upstream question in flight, which the same question
// asked meanwhile waits for instead of asking again.
type dnsCall struct {
	done chan struct{}
	res  dnsResult
	err  error
}

// dnsCache keeps one sandbox's upstream answers for their TTL, positive
// and negative, bounded in entries and bytes, and sends each question
// upstream at most once at a time and within the sandbox's rate. It
// caches what upstream said, before policy: the caller decides on each
// answer, cached or not, as on a fresh one (and pins what it gives).
type dnsCache struct {
	lookup  func(ctx context.Context, name string, qtype dnsmessage.Type) ([]netip.Addr, uint32, error)
	now     func() time.Time
	limiter *rate.Limiter

	mu       sync.Mutex
	entries  map[dnsKey]*list.Element // of *cacheEntry
	lru      list.List                // most recently used first
	bytes    int
	inflight map[dnsKey]*dnsCall
}

func newDNSCache(lookup func(context.Context, string, dnsmessage.Type) ([]netip.Addr, uint32, error)) *dnsCache {
	return &dnsCache{
		lookup:   lookup,
		now:      time.Now,
		limiter:  rate.NewLimiter(upstreamRate, upstreamBurst),
		entries:  make(map[dnsKey]*list.Element),
		inflight: make(map[dnsKey]*dnsCall),
	}
}

// resolve answers name (fully qualified, lower case) for qtype from the
// cache, or from upstream. fresh reports that this call asked upstream.
// An upstream NXDOMAIN is a result with nx set, not an error; errors
// (upstream failures, the rate) are not cached.
func (c *dnsCache) resolve(ctx context.Context, name string, qtype dnsmessage.Type) (res dnsResult, fresh bool, err error) {
	key := dnsKey{name, qtype}
	c.mu.Lock()
	now := c.now()
	if el, ok := c.entries[key]; ok {
		e := el.Value.(*cacheEntry)
		if left := e.expires.Sub(now); left > 0 {
			c.lru.MoveToFront(el)
			c.mu.Unlock()
			res = e.res
			res.ttl = uint32((left + time.Second - 1) / time.Second)
			return res, false, nil
		}
		c.removeLocked(el)
	}
	if call, ok := c.inflight[key]; ok {
		c.mu.Unlock()
		select {
		case <-call.done:
			return call.res, false, call.err
		case <-ctx.Done():
			return dnsResult{}, false, ctx.Err()
		}
	}
	if !c.limiter.AllowN(now, 1) {
		c.mu.Unlock()
		return dnsResult{}, false, errRateLimited
	}
	call := &dnsCall{done: make(chan struct{})}
	c.inflight[key] = call
	c.mu.Unlock()

	addrs, ttl, err := c.lookup(ctx, name, qtype)
	switch {
	case errors.Is(err, errNXDomain):
		call.res = dnsResult{ttl: ttl, nx: true}
	case err != nil:
		call.err = err
	default:
		if len(addrs) > maxCachedAddrs {
			addrs = addrs[:maxCachedAddrs]
		}
		call.res = dnsResult{addrs: addrs, ttl: ttl}
	}
	if call.err == nil {
		call.res.ttl = cacheTTL(call.res)
	}

	c.mu.Lock()
	delete(c.inflight, key)
	if call.err == nil && call.res.ttl > 0 {
		c.storeLocked(key, call.res, c.now())
	}
	c.mu.Unlock()
	close(call.done)
	return call.res, true, call.err
}

// cacheTTL clamps an answer's TTL: a positive one to maxCacheTTL, a
// negative one to maxNegativeTTL. A TTL of 0 stays 0: the answer serves
// only the question in progress (RFC 1035 section 3.2.1), and is not
// kept.
func cacheTTL(res dnsResult) uint32 {
	if res.nx || len(res.addrs) == 0 {
		return min(res.ttl, maxNegativeTTL)
	}
	return min(res.ttl, maxCacheTTL)
}

func (c *dnsCache) storeLocked(key dnsKey, res dnsResult, now time.Time) {
	if el, ok := c.entries[key]; ok {
		c.removeLocked(el)
	}
	e := &cacheEntry{
		key:     key,
		res:     res,
		expires: now.Add(time.Duration(res.ttl) * time.Second),
		size:    cacheEntryOverhead + len(key.name) + 24*len(res.addrs),
	}
	c.entries[key] = c.lru.PushFront(e)
	c.bytes += e.size
	for len(c.entries) > maxCacheEntries || c.bytes > maxCacheBytes {
		c.removeLocked(c.lru.Back())
	}
}

func (c *dnsCache) removeLocked(el *list.Element) {
	e := c.lru.Remove(el).(*cacheEntry)
	delete(c.entries, e.key)
	c.bytes -= e.size
}

// stats returns the number of cached answers and their size.
func (c *dnsCache) stats() (entries, bytes int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries), c.bytes
}
