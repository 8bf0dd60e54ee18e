package testnet

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// World is a set of servers that stands in for the internet: see the
// package documentation for its names, addresses and ports. Start makes
// one; the test's cleanup stops it. Only one World runs at a time in a
// test binary, since they share fixed addresses: a Start while another
// World runs waits for it to stop.
//
// Every HTTP and HTTPS site (not the private servers) serves:
//
//	/                 "hello from <name>\n"
//	/echo             the request as JSON (see Echo), body included;
//	                  ?gzip=1 compresses it whatever the client accepts
//	/sse?n=3&gap_ms=200
//	                  text/event-stream: "data: 1\n\n" to "data: n\n\n",
//	                  each flushed, gap_ms apart
//	/hold             text/event-stream: "data: held\n\n", flushed, then
//	                  nothing until Release ("data: released\n\n", end) or
//	                  until the client goes
//	/chunked?n=5      a body of n flushed pieces "chunk i\n" (chunked on
//	                  HTTP/1.1)
//	/bytes?n=N        N bytes of Pattern, with Content-Length
//	/discard          reads the body and answers {"bytes": <count>}
//	/ws               WebSocket echo (HTTP/1.1): each frame comes back as
//	                  it was sent, pings get pongs, a close is returned;
//	                  each message is recorded (Request.Messages)
//	/status/NNN       status NNN (200 to 599), body "status NNN\n"
//	/store/KEY        a store: PUT or POST keeps the body, GET gives it
//	                  back with Range support, or transformed (?offset=
//	                  &len=, ?reverse=1, ?partial=A-B: see World.store)
//	/deflate?raw=1    a body with Content-Encoding: deflate, zlib-wrapped,
//	                  or bare with raw=1
//	/slow             no response at all until the client goes
//
// and 404 for anything else. Every request to any HTTP server is recorded
// (see Requests); every TCP connection and UDP datagram any server gets is
// counted (see Reached).
type World struct {
	// CAFile is a PEM file with the certificate of the CA that signed
	// every server certificate but untrusted.example.com's: what
	// network.extra_root_cas needs.
	CAFile string
	// CAPEM is the content of CAFile.
	CAPEM []byte
	// DNS is the World's DNS server, authoritative for every name of the
	// package documentation, and programmable.
	DNS *DNS
	// DNSAddr is the DNS server's address, "203.0.113.53:53": what
	// network.dns_servers needs.
	DNSAddr string

	pool *x509.CertPool

	mu    sync.Mutex
	conns map[netip.AddrPort]int
	reqs  []*Request
	holds map[chan struct{}]bool
	// stored is what /store keeps, by site name and key.
	stored map[string][]byte

	closing chan struct{}
	wg      sync.WaitGroup
	closers []func() // run in reverse order when the World stops
	live    map[net.Conn]bool
	clients []*http.Transport
}

// site is one public server: its names and addresses, and which of the
// services it runs.
type site struct {
	name  string   // primary name, for "hello from"
	names []string // names in the certificate
	addrs []string
	full  bool // every service; otherwise HTTPS on 443 only
	cert  tls.Certificate
}

// privateName maps the names of the private servers to their address.
var privateNames = map[string]string{
	Private:  PrivateAddr,
	Loop:     LoopAddr,
	Metadata: MetadataAddr,
}

// worldSlot holds the running World's place: the addresses are fixed, so
// two cannot run at once.
var worldSlot = make(chan struct{}, 1)

// Start starts a World, skipping the test when !Available. The World
// stops in t's cleanup. Start fails the test if a server cannot start.
func Start(t testing.TB) *World {
	t.Helper()
	Skip(t)
	select {
	case worldSlot <- struct{}{}:
	default:
		t.Logf("testnet: waiting for another World to stop")
		select {
		case worldSlot <- struct{}{}:
		case <-time.After(10 * time.Minute):
			t.Fatalf("testnet: another World has been running for 10 minutes (is Start called in a subtest of a test that has one?)")
		}
	}
	w := newWorld()
	t.Cleanup(func() {
		w.stop()
		<-worldSlot
	})
	if err := w.start(t.TempDir()); err != nil {
		t.Fatalf("testnet: %v", err)
	}
	return w
}

// newWorld is a World that serves nothing yet.
func newWorld() *World {
	return &World{
		DNS:     newDNS(),
		DNSAddr: DNSAddr,
		conns:   make(map[netip.AddrPort]int),
		holds:   make(map[chan struct{}]bool),
		stored:  make(map[string][]byte),
		closing: make(chan struct{}),
		live:    make(map[net.Conn]bool),
	}
}

func (w *World) start(dir string) error {
	ca, err := newAuthority("airlock testnet CA")
	if err != nil {
		return err
	}
	other, err := newAuthority("airlock testnet untrusted CA")
	if err != nil {
		return err
	}
	w.CAPEM = ca.pem
	w.CAFile = filepath.Join(dir, "testnet-ca.pem")
	if err := os.WriteFile(w.CAFile, ca.pem, 0o644); err != nil {
		return err
	}
	w.pool = x509.NewCertPool()
	w.pool.AddCert(ca.cert)

	now := time.Now()
	valid := [2]time.Time{now.Add(-time.Hour), now.Add(7 * 24 * time.Hour)}
	sites := []*site{
		{name: API, names: []string{API, "*." + API}, addrs: []string{APIAddr, APIAddr6}, full: true},
		{name: Other, names: []string{Other}, addrs: []string{OtherAddr}, full: true},
		{name: Files, names: []string{Files}, addrs: []string{FilesAddr}, full: true},
		{name: Untrusted, names: []string{Untrusted}, addrs: []string{UntrustedAddr}},
		{name: Expired, names: []string{Expired}, addrs: []string{ExpiredAddr}},
	}
	for _, s := range sites {
		issuer, from, to := ca, valid[0], valid[1]
		switch s.name {
		case Untrusted:
			issuer = other
		case Expired:
			from, to = now.Add(-48*time.Hour), now.Add(-24*time.Hour)
		}
		if s.cert, err = issuer.issue(s.names, s.addrs, from, to); err != nil {
			return err
		}
	}

	// DNS first, so that its records are there when anything can ask.
	for _, s := range sites {
		var addrs []netip.Addr
		for _, a := range s.addrs {
			addrs = append(addrs, netip.MustParseAddr(a))
		}
		w.DNS.Set(s.name, addrs...)
	}
	w.DNS.Set(WrongName, netip.MustParseAddr(APIAddr))
	for name, addr := range privateNames {
		w.DNS.Set(name, netip.MustParseAddr(addr))
	}
	if err := w.serveDNS(); err != nil {
		return err
	}

	for _, s := range sites {
		h := w.siteHandler(s)
		tlsConf := &tls.Config{Certificates: []tls.Certificate{s.cert}, MinVersion: tls.VersionTLS12}
		for _, a := range s.addrs {
			if !s.full {
				if err := w.serveHTTP(hostPort(a, PortHTTPS), h, tlsConf); err != nil {
					return err
				}
				continue
			}
			for _, port := range []int{PortHTTPS, PortHTTPSAlt} {
				if err := w.serveHTTP(hostPort(a, port), h, tlsConf); err != nil {
					return err
				}
			}
			for _, port := range []int{PortHTTP, PortHTTPAlt} {
				if err := w.serveHTTP(hostPort(a, port), h, nil); err != nil {
					return err
				}
			}
			if err := w.serveTCPEcho(hostPort(a, PortEcho)); err != nil {
				return err
			}
			if err := w.serveUDPEcho(hostPort(a, PortUDPEcho)); err != nil {
				return err
			}
		}
	}

	for _, addr := range []string{
		hostPort(PrivateAddr, PortHTTP),
		hostPort(MetadataAddr, PortHTTP),
		hostPort(LoopAddr, PortLoop),
	} {
		if err := w.serveHTTP(addr, w.privateHandler(addr), nil); err != nil {
			return err
		}
	}
	// Best effort: port 80 may be taken, and the namespace may have no
	// IPv6.
	for _, addr := range []string{hostPort(LoopAddr, PortHTTP), hostPort(LoopAddr6, PortLoop)} {
		_ = w.serveHTTP(addr, w.privateHandler(addr), nil)
	}
	return nil
}

func hostPort(ip string, port int) string {
	return net.JoinHostPort(ip, strconv.Itoa(port))
}

// stop stops every server and waits for their goroutines.
func (w *World) stop() {
	close(w.closing)
	for i := len(w.closers) - 1; i >= 0; i-- {
		w.closers[i]()
	}
	w.mu.Lock()
	for c := range w.live {
		c.Close()
	}
	clients := w.clients
	w.mu.Unlock()
	w.wg.Wait()
	for _, tr := range clients {
		tr.CloseIdleConnections()
	}
}

// goServe runs f in a goroutine that stop waits for.
func (w *World) goServe(f func()) {
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		f()
	}()
}

// track registers a connection that no http.Server owns, so that stop
// can close it; untrack forgets it.
func (w *World) track(c net.Conn) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case <-w.closing:
		return false
	default:
	}
	w.live[c] = true
	return true
}

func (w *World) untrack(c net.Conn) {
	w.mu.Lock()
	delete(w.live, c)
	w.mu.Unlock()
}

// count counts a connection or datagram that arrived at addr.
func (w *World) count(addr net.Addr) {
	ap := addrPort(addr)
	w.mu.Lock()
	w.conns[ap]++
	w.mu.Unlock()
}

func addrPort(a net.Addr) netip.AddrPort {
	var ap netip.AddrPort
	switch a := a.(type) {
	case *net.TCPAddr:
		ap = a.AddrPort()
	case *net.UDPAddr:
		ap = a.AddrPort()
	default:
		ap, _ = netip.ParseAddrPort(a.String())
	}
	return netip.AddrPortFrom(ap.Addr().Unmap().WithZone(""), ap.Port())
}

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	w *World
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.w.count(c.LocalAddr())
	}
	return c, err
}

func (w *World) listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	w.closers = append(w.closers, func() { ln.Close() })
	return countingListener{ln, w}, nil
}

func (w *World) serveDNS() error {
	pc, err := net.ListenPacket("udp", DNSAddr)
	if err != nil {
		return err
	}
	w.closers = append(w.closers, func() { pc.Close() })
	w.goServe(func() { w.DNS.serveUDP(pc, func() { w.count(pc.LocalAddr()) }) })
	ln, err := w.listen(DNSAddr)
	if err != nil {
		return err
	}
	w.goServe(func() {
		w.acceptLoop(ln, w.DNS.serveTCP)
	})
	return nil
}

// acceptLoop hands each connection of ln to serve, in a goroutine of its
// own, until ln is closed.
func (w *World) acceptLoop(ln net.Listener, serve func(net.Conn)) {
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if !w.track(c) {
			c.Close()
			return
		}
		w.goServe(func() {
			defer w.untrack(c)
			serve(c)
		})
	}
}

func (w *World) serveTCPEcho(addr string) error {
	ln, err := w.listen(addr)
	if err != nil {
		return err
	}
	w.goServe(func() {
		w.acceptLoop(ln, func(c net.Conn) {
			defer c.Close()
			if _, err := io.WriteString(c, EchoBanner); err != nil {
				return
			}
			_, _ = io.Copy(c, c)
		})
	})
	return nil
}

func (w *World) serveUDPEcho(addr string) error {
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return err
	}
	w.closers = append(w.closers, func() { pc.Close() })
	w.goServe(func() {
		buf := make([]byte, 65535)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				continue
			}
			w.count(pc.LocalAddr())
			_, _ = pc.WriteTo(buf[:n], from)
		}
	})
	return nil
}

// serveHTTP serves h on addr: HTTPS with HTTP/2 and HTTP/1.1 when
// tlsConf is set, otherwise HTTP/1.1 and h2c with prior knowledge.
func (w *World) serveHTTP(addr string, h http.Handler, tlsConf *tls.Config) error {
	ln, err := w.listen(addr)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           h,
		TLSConfig:         tlsConf.Clone(), // the server changes it
		ErrorLog:          log.New(io.Discard, "", 0),
		ReadHeaderTimeout: time.Minute,
		Protocols:         new(http.Protocols),
	}
	srv.Protocols.SetHTTP1(true)
	if tlsConf != nil {
		srv.Protocols.SetHTTP2(true)
	} else {
		srv.Protocols.SetUnencryptedHTTP2(true)
	}
	w.closers = append(w.closers, func() { srv.Close() })
	w.goServe(func() {
		if tlsConf != nil {
			_ = srv.ServeTLS(ln, "", "")
		} else {
			_ = srv.Serve(ln)
		}
	})
	return nil
}

// Reached is how many TCP connections and UDP datagrams the World's
// servers got at addr, which is "ip:port" (IPv6 in brackets), a bare IP
// (every port of it), or one of the package's names, with or without
// ":port" (the addresses the name has by default, not what DNS says now).
// Every TCP connection counts, whether or not a request came through it.
func (w *World) Reached(addr string) int {
	match := matcher(addr)
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for ap, c := range w.conns {
		if match(ap) {
			n += c
		}
	}
	return n
}

// matcher returns the test of a server address against a description in
// the form Reached takes; a description it cannot read matches nothing.
func matcher(server string) func(netip.AddrPort) bool {
	if ap, err := netip.ParseAddrPort(server); err == nil {
		ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
		return func(x netip.AddrPort) bool { return x == ap }
	}
	host, port := server, 0
	if h, p, err := net.SplitHostPort(server); err == nil {
		n, err := strconv.Atoi(p)
		if err != nil {
			return func(netip.AddrPort) bool { return false }
		}
		host, port = h, n
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = append(addrs, a.Unmap())
	} else {
		addrs = defaultAddrs(host)
	}
	return func(x netip.AddrPort) bool {
		if port != 0 && int(x.Port()) != port {
			return false
		}
		for _, a := range addrs {
			if x.Addr() == a {
				return true
			}
		}
		return false
	}
}

// defaultAddrs is the addresses the World's DNS gives name by default.
func defaultAddrs(name string) []netip.Addr {
	var ss []string
	switch canonical(name) {
	case API, WrongName:
		ss = []string{APIAddr, APIAddr6}
	case Other:
		ss = []string{OtherAddr}
	case Files:
		ss = []string{FilesAddr}
	case Untrusted:
		ss = []string{UntrustedAddr}
	case Expired:
		ss = []string{ExpiredAddr}
	case Loop:
		ss = []string{LoopAddr, LoopAddr6}
	default:
		if a, ok := privateNames[canonical(name)]; ok {
			ss = []string{a}
		}
	}
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

// URL is the URL of path on name (a name or an IP address) at port:
// https for 443 and 8443, http otherwise, with the port left out when it
// is the scheme's default.
func (w *World) URL(name string, port int, path string) string {
	scheme := "http"
	if port == PortHTTPS || port == PortHTTPSAlt {
		scheme = "https"
	}
	host := name
	if strings.Contains(name, ":") {
		host = "[" + name + "]"
	}
	if !(scheme == "https" && port == PortHTTPS || scheme == "http" && port == PortHTTP) {
		host = hostPort(name, port)
	}
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	return scheme + "://" + host + path
}

// CertPool is a pool with the World's CA alone.
func (w *World) CertPool() *x509.CertPool { return w.pool }

// TLSConfig is a client configuration that trusts the World's CA (and
// nothing else).
func (w *World) TLSConfig() *tls.Config {
	return &tls.Config{RootCAs: w.pool, MinVersion: tls.VersionTLS12}
}

// Resolver is a resolver that asks the World's DNS server, over UDP, and
// TCP when an answer is truncated.
func (w *World) Resolver() *net.Resolver {
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, DNSAddr)
		},
	}
}

// Dialer is a dialer that resolves names through the World's DNS server.
func (w *World) Dialer() *net.Dialer {
	return &net.Dialer{Resolver: w.Resolver(), Timeout: 30 * time.Second}
}

// Client is an HTTP client for direct baselines: it dials from the test
// process itself, resolves through the World's DNS server (those lookups
// count in DNS.Queries), trusts the World's CA, speaks HTTP/2 where the
// server offers it, uses no proxy, and keeps connections alive. Its idle
// connections are closed when the World stops.
func (w *World) Client() *http.Client {
	tr := &http.Transport{
		DialContext:         w.Dialer().DialContext,
		TLSClientConfig:     w.TLSConfig(),
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     time.Minute,
	}
	w.mu.Lock()
	w.clients = append(w.clients, tr)
	w.mu.Unlock()
	return &http.Client{Transport: tr, Timeout: 5 * time.Minute}
}
