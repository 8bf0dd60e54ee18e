package intercept

import (
	"container/list"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// defaultLeafCacheSize bounds the leaves kept.
	defaultLeafCacheSize = 2048
	// leafValidity is how long a leaf is valid, at most (never past the
	// CA certificate).
	leafValidity = 7 * 24 * time.Hour
	// leafBackdate is how far back a leaf's validity starts, for clocks
	// that lag.
	leafBackdate = time.Hour
	// leafRenewBefore is how close to its end a cached leaf is replaced.
	leafRenewBefore = time.Hour
	// maxPrewarms bounds the leaves minted in the background at once;
	// a Prewarm past it is dropped (the first connection mints).
	maxPrewarms = 4
)

// leafCache holds minted leaves, least recently used first out, and the
// mints in flight so that concurrent first uses of a name mint once.
type leafCache struct {
	mu       sync.Mutex
	max      int
	order    *list.List // of *leafEntry, most recent first
	byName   map[string]*list.Element
	inflight map[string]*mintCall
	minted   atomic.Uint64
	prewarm  chan struct{} // semaphore for Prewarm
}

type leafEntry struct {
	name  string
	cert  *tls.Certificate
	renew time.Time // when to mint again
}

type mintCall struct {
	done chan struct{}
	cert *tls.Certificate
	err  error
}

func newLeafCache(max int) *leafCache {
	return &leafCache{
		max:      max,
		order:    list.New(),
		byName:   make(map[string]*list.Element),
		inflight: make(map[string]*mintCall),
		prewarm:  make(chan struct{}, maxPrewarms),
	}
}

// Leaf returns a certificate for name (a DNS name, matched without case
// and trailing dot), minted on first use and then cached: ECDSA P-256,
// the name as its only subject alternative name, valid from an hour ago
// for seven days but never past the CA certificate. The cache is a
// bounded LRU; concurrent first uses of a name mint it once.
func (c *CA) Leaf(name string) (*tls.Certificate, error) {
	n, ok := leafName(name)
	if !ok {
		return nil, fmt.Errorf("intercept CA: no certificate for %q: not a DNS name", name)
	}
	return c.leaves.get(n, c.mint)
}

// Prewarm mints name's leaf in the background if it is neither cached
// nor being minted, so that the first connection does not wait for it.
// It never blocks; when too many mints are already running in the
// background, it does nothing.
func (c *CA) Prewarm(name string) {
	n, ok := leafName(name)
	if !ok || c.leaves.has(n) {
		return
	}
	select {
	case c.leaves.prewarm <- struct{}{}:
	default:
		return
	}
	go func() {
		defer func() { <-c.leaves.prewarm }()
		_, _ = c.leaves.get(n, c.mint)
	}()
}

// Minted counts the leaves minted so far.
func (c *CA) Minted() uint64 { return c.leaves.minted.Load() }

// has reports whether name is cached and fresh, or being minted.
func (lc *leafCache) has(name string) bool {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if _, ok := lc.inflight[name]; ok {
		return true
	}
	if el, ok := lc.byName[name]; ok {
		return time.Now().Before(el.Value.(*leafEntry).renew)
	}
	return false
}

func (lc *leafCache) get(name string, mint func(string) (*tls.Certificate, error)) (*tls.Certificate, error) {
	lc.mu.Lock()
	if el, ok := lc.byName[name]; ok {
		e := el.Value.(*leafEntry)
		if time.Now().Before(e.renew) {
			lc.order.MoveToFront(el)
			lc.mu.Unlock()
			return e.cert, nil
		}
	}
	if call, ok := lc.inflight[name]; ok {
		lc.mu.Unlock()
		<-call.done
		return call.cert, call.err
	}
	call := &mintCall{done: make(chan struct{})}
	lc.inflight[name] = call
	lc.mu.Unlock()

	call.cert, call.err = mint(name)

	lc.mu.Lock()
	delete(lc.inflight, name)
	if call.err == nil {
		lc.minted.Add(1)
		lc.put(name, call.cert)
	}
	lc.mu.Unlock()
	close(call.done)
	return call.cert, call.err
}

// put caches a leaf, evicting the least recently used past the bound.
// lc.mu is held.
func (lc *leafCache) put(name string, cert *tls.Certificate) {
	e := &leafEntry{name: name, cert: cert, renew: cert.Leaf.NotAfter.Add(-leafRenewBefore)}
	if el, ok := lc.byName[name]; ok {
		el.Value = e
		lc.order.MoveToFront(el)
		return
	}
	lc.byName[name] = lc.order.PushFront(e)
	for lc.order.Len() > lc.max {
		old := lc.order.Back()
		lc.order.Remove(old)
		delete(lc.byName, old.Value.(*leafEntry).name)
	}
}

// mint signs a new leaf for a normalised name.
func (c *CA) mint(name string) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("intercept CA: generating a key for %s: %w", name, err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, fmt.Errorf("intercept CA: minting %s: %w", name, err)
	}
	now := time.Now()
	notBefore := now.Add(-leafBackdate)
	if notBefore.Before(c.cert.NotBefore) {
		notBefore = c.cert.NotBefore
	}
	notAfter := now.Add(leafValidity)
	if notAfter.After(c.cert.NotAfter) {
		notAfter = c.cert.NotAfter
	}
	if !notAfter.After(now.Add(leafRenewBefore)) {
		return nil, fmt.Errorf("intercept CA: the CA certificate expires on %s, too soon to sign for %s: make a new CA", c.cert.NotAfter.Format(time.DateOnly), name)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		DNSNames:              []string{name},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	if len(name) <= 64 { // the longest common name X.509 allows
		tmpl.Subject = pkix.Name{CommonName: name}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		return nil, fmt.Errorf("intercept CA: signing %s: %w", name, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("intercept CA: parsing the leaf for %s: %w", name, err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}
