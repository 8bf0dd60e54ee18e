package intercept

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/policy"
)

// sandboxConn is one TCP connection from the sandbox and what serves it.
type sandboxConn struct {
	i         *Interceptor
	raw       *rawConn
	dst       netip.AddrPort
	names     []string // normalised
	dialNames []string // as given, for Dial
	tls       bool
	sni       string // normalised, once the handshake is done
	refusal   string // why the handshake was refused, if it was
	start     time.Time

	hold *holdConn // the connection the HTTP server reads, once serve runs

	tOnce sync.Once
	t     *http.Transport // see transport

	subMu sync.Mutex
	subs  map[string]*policy.Substituter

	// Handlers running, so that the end of the connection waits for
	// them.
	mu     sync.Mutex
	active int
	ending bool
	idle   chan struct{}
}

type connKey struct{}

func (i *Interceptor) newConn(conn net.Conn, dst netip.AddrPort, names []string, isTLS bool) *sandboxConn {
	c := &sandboxConn{
		i:         i,
		dst:       dst,
		names:     normalizeNames(names),
		dialNames: append([]string(nil), names...),
		tls:       isTLS,
		start:     time.Now(),
	}
	c.raw = &rawConn{Conn: conn, c: c, done: make(chan struct{})}
	return c
}

// begin registers a sandbox connection, closed when ctx ends; end
// releases it. A nil connection means the Interceptor is closed (conn is
// closed then).
func (i *Interceptor) begin(ctx context.Context, conn net.Conn, dst netip.AddrPort, names []string, isTLS bool) (c *sandboxConn, end func()) {
	c = i.newConn(conn, dst, names, isTLS)
	if !i.track(c) {
		conn.Close()
		return nil, nil
	}
	stop := context.AfterFunc(ctx, func() { c.raw.Close() })
	return c, func() {
		stop()
		c.raw.Close()
		i.untrack(c)
	}
}

// ServeTLS serves one TCP connection from the sandbox whose first bytes
// are a TLS ClientHello (conn replays them). dst is where the sandbox
// connected, names the names DNS pinned to dst's address. The handshake
// is refused, with a "tcp" event, when the ClientHello names no server
// or an address, a name not among names, or one the policy does not
// allow. ServeTLS returns when the connection is over, and closes conn.
func (i *Interceptor) ServeTLS(ctx context.Context, conn net.Conn, dst netip.AddrPort, names []string) {
	c, end := i.begin(ctx, conn, dst, names, true)
	if c == nil {
		return
	}
	defer end()

	tc := tls.Server(c.raw, i.tlsConfig)
	hctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	err := tc.HandshakeContext(hctx)
	cancel()
	if err != nil {
		if c.refusal != "" {
			i.log.Debug("TLS connection refused", "dst", dst, "reason", c.refusal)
			return
		}
		i.log.Debug("TLS handshake with the sandbox failed", "dst", dst, "err", err)
		return
	}
	c.sni, _ = normalizeName(tc.ConnectionState().ServerName)
	var out net.Conn = tc
	if ck, ok := conn.(corker); ok {
		out = &corkedConn{Conn: tc, ck: ck}
	}
	c.serve(ctx, out)
}

// ServeHTTP serves one TCP connection from the sandbox whose first bytes
// are a plaintext HTTP/1.x request, or the HTTP/2 prior-knowledge
// preface (conn replays them). dst and names are as for ServeTLS. It
// returns when the connection is over, and closes conn.
func (i *Interceptor) ServeHTTP(ctx context.Context, conn net.Conn, dst netip.AddrPort, names []string) {
	c, end := i.begin(ctx, conn, dst, names, false)
	if c == nil {
		return
	}
	defer end()
	c.serve(ctx, c.raw)
}

// checkHello is the sandbox side's GetConfigForClient: it refuses a
// handshake whose server name is missing, an address, not pinned to the
// destination, or not allowed.
func (i *Interceptor) checkHello(hello *tls.ClientHelloInfo) (*tls.Config, error) {
	raw, ok := hello.Conn.(*rawConn)
	if !ok {
		return nil, errors.New("intercept: handshake on a connection that is not being served")
	}
	c := raw.c
	if reason := c.checkSNI(hello.ServerName); reason != "" {
		c.refusal = reason
		i.emit(api.NetworkEvent{
			Kind:       api.NetTCP,
			Host:       i.policy.RedactName(hello.ServerName),
			IP:         c.dst.Addr().String(),
			Port:       c.dst.Port(),
			Proto:      "tcp",
			DurationMs: time.Since(c.start).Milliseconds(),
			Blocked:    true,
			Reason:     reason,
		})
		return nil, fmt.Errorf("intercept: refusing the handshake: %s", reason)
	}
	return nil, nil
}

// checkSNI returns why a TLS server name is refused, or "".
func (c *sandboxConn) checkSNI(sni string) string {
	if sni == "" {
		return policy.ReasonNoSNI + ": the TLS ClientHello names no server"
	}
	if _, err := netip.ParseAddr(sni); err == nil {
		return fmt.Sprintf("%s: the TLS ClientHello names an address (%s), not a server", policy.ReasonNoSNI, sni)
	}
	n, ok := normalizeName(sni)
	if !ok || !containsName(c.names, n) {
		return fmt.Sprintf("%s: the TLS server name %q is not among the names DNS gave for %s", policy.ReasonSNIMismatch, sni, c.dst.Addr())
	}
	if ok, reason := c.i.policy.HostPortDecision(n, c.dst.Port()); !ok {
		return reason
	}
	return ""
}

// serve runs the HTTP server on conn (the TLS connection, or the raw one
// for plain HTTP) until the connection is over, then waits for its
// handlers. Its upstream connections stay, idle, for the sandbox's next
// connection to the same destination.
func (c *sandboxConn) serve(ctx context.Context, conn net.Conn) {
	ctx, cancel := context.WithCancel(ctx)
	c.hold = newHoldConn(conn, c.raw.done)
	l := &connListener{
		ctx:    context.WithValue(ctx, connKey{}, c),
		conn:   c.hold,
		raw:    c.raw,
		closed: make(chan struct{}),
	}
	err := c.i.server.Serve(l)
	if err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, http.ErrServerClosed) {
		c.i.log.Debug("serving a sandbox connection", "dst", c.dst, "err", err)
	}
	c.raw.Close()
	cancel()
	c.drain()
}

// enter registers a handler; false means the connection is over.
func (c *sandboxConn) enter() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ending {
		return false
	}
	c.active++
	return true
}

func (c *sandboxConn) leave() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.active--
	if c.active == 0 && c.idle != nil {
		close(c.idle)
		c.idle = nil
	}
}

// drain refuses new handlers and waits for the running ones.
func (c *sandboxConn) drain() {
	c.mu.Lock()
	c.ending = true
	if c.active == 0 {
		c.mu.Unlock()
		return
	}
	idle := make(chan struct{})
	c.idle = idle
	c.mu.Unlock()
	<-idle
}

func (c *sandboxConn) scheme() string {
	if c.tls {
		return "https"
	}
	return "http"
}

// substituter returns the policy's Substituter for host, over TLS or
// not as the connection is, made once per connection and host (the
// hosts of one connection are among its pinned names, so there are
// few).
func (c *sandboxConn) substituter(host string) *policy.Substituter {
	c.subMu.Lock()
	defer c.subMu.Unlock()
	if s, ok := c.subs[host]; ok {
		return s
	}
	if c.subs == nil {
		c.subs = make(map[string]*policy.Substituter, 1)
	}
	s := c.i.policy.SubstituterFor(host, c.tls)
	c.subs[host] = s
	return s
}

// rawConn is the sandbox's connection as the interceptor holds it: its
// Close is idempotent and marks the connection over.
type rawConn struct {
	net.Conn
	c    *sandboxConn
	once sync.Once
	done chan struct{}
}

func (r *rawConn) Close() error {
	err := net.ErrClosed
	r.once.Do(func() {
		err = r.Conn.Close()
		close(r.done)
	})
	return err
}

// CloseWrite passes a half-close on (a WebSocket whose server finished
// sending) when the underlying connection can do it.
func (r *rawConn) CloseWrite() error {
	if cw, ok := r.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// connListener hands one connection to http.Server.Serve, then blocks
// until that connection is closed (or the listener is), so that Serve
// returns when the connection is over.
type connListener struct {
	ctx       context.Context // requests' base context; carries the sandboxConn
	conn      net.Conn
	raw       *rawConn
	mu        sync.Mutex
	handed    bool
	closed    chan struct{}
	closeOnce sync.Once
}

func (l *connListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	first := !l.handed
	l.handed = true
	l.mu.Unlock()
	if first {
		return l.conn, nil
	}
	select {
	case <-l.raw.done:
	case <-l.closed:
	}
	return nil, net.ErrClosed
}

func (l *connListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return nil
}

func (l *connListener) Addr() net.Addr { return l.raw.LocalAddr() }

// corker is a sandbox connection that can hold back partial segments
// (the netstack's connections can).
type corker interface{ SetCork(on bool) }

// corkedConn makes each Write of the TLS connection, which sends one
// record per 16 KiB, leave as full segments: the records are held while
// the Write runs and sent together when it returns. Nothing is delayed
// past the Write.
type corkedConn struct {
	net.Conn
	ck corker
}

func (c *corkedConn) Write(b []byte) (int, error) {
	if len(b) <= maxPlainRecord {
		return c.Conn.Write(b)
	}
	c.ck.SetCork(true)
	defer c.ck.SetCork(false)
	return c.Conn.Write(b)
}

// maxPlainRecord is the most plaintext one TLS record carries: a write
// that fits in one record gains nothing from corking.
const maxPlainRecord = 16 << 10
