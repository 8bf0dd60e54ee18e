package intercept

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/policy"
)

// Bounds on what the sandbox can make the interceptor hold.
const (
	// DefaultMaxBody is Config.MaxBody's default.
	DefaultMaxBody = 64 << 20
	// handshakeTimeout bounds the sandbox's TLS handshake. A micro-VM
	// whose CPU is emulated takes seconds over a handshake, and tens of
	// seconds when several of its clients start at once on a busy
	// host (24 at once in three such VMs beside other work took more
	// than 30 s), and what a slow handshake holds is bounded by the
	// sandbox's connection limit anyway.
	handshakeTimeout = time.Minute
	// readHeaderTimeout bounds the reading of one request's header.
	readHeaderTimeout = 30 * time.Second
	// idleTimeout closes a sandbox connection with no request for this
	// long.
	idleTimeout = 2 * time.Minute
	// maxHeaderBytes bounds a request's header, sandbox side.
	maxHeaderBytes = 64 << 10
	// maxConcurrentStreams bounds the HTTP/2 streams of one sandbox
	// connection.
	maxConcurrentStreams = 100
	// smallBody is the longest request body of declared length that is
	// read whole to be rewritten for secrets, so that it keeps an exact
	// Content-Length; longer ones stream.
	smallBody = 64 << 10
)

// Config configures an Interceptor.
type Config struct {
	// Policy decides every request. Required.
	Policy *policy.Policy
	// CA signs the certificates the sandbox sees. Required.
	CA *CA
	// Dial opens a TCP connection to dst, an address the sandbox
	// connected to (the host never resolves names again). names are the
	// names DNS pinned to dst's address. An error that wraps a
	// *policy.BlockError is reported as a block with its reason.
	// Required.
	Dial func(ctx context.Context, dst netip.AddrPort, names []string) (net.Conn, error)
	// OnEvent receives one event per HTTP request, and one per
	// connection refused before any request. It must not block for
	// long; nil discards events.
	OnEvent func(api.NetworkEvent)
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
	// MaxBody bounds a request body that is rewritten for secrets; 0
	// means DefaultMaxBody. A longer body is blocked with
	// policy.ReasonSecretUnrewritable when the policy has secrets.
	MaxBody int64
}

// Interceptor serves the sandbox's HTTP and TLS connections: see the
// package documentation. It is safe for concurrent use.
type Interceptor struct {
	policy  *policy.Policy
	ca      *CA
	dial    func(ctx context.Context, dst netip.AddrPort, names []string) (net.Conn, error)
	onEvent func(api.NetworkEvent)
	log     *slog.Logger
	maxBody int64
	roots   *x509.CertPool

	tlsConfig *tls.Config            // sandbox side
	server    *http.Server           // serves every sandbox connection
	proxy     *httputil.ReverseProxy // forwards every request

	mu     sync.Mutex
	conns  map[*sandboxConn]struct{}
	closed bool

	tmu        sync.Mutex
	transports map[transportKey]*http.Transport
	sessions   tls.ClientSessionCache // upstream TLS sessions, for resumption
}

// New checks cfg and makes an Interceptor.
func New(cfg Config) (*Interceptor, error) {
	switch {
	case cfg.Policy == nil:
		return nil, errors.New("intercept: Config.Policy is required")
	case cfg.CA == nil:
		return nil, errors.New("intercept: Config.CA is required")
	case cfg.Dial == nil:
		return nil, errors.New("intercept: Config.Dial is required")
	case cfg.MaxBody < 0:
		return nil, fmt.Errorf("intercept: Config.MaxBody is negative (%d)", cfg.MaxBody)
	}
	roots, err := cfg.Policy.RootCAs()
	if err != nil {
		return nil, fmt.Errorf("intercept: %w", err)
	}
	i := &Interceptor{
		policy:  cfg.Policy,
		ca:      cfg.CA,
		dial:    cfg.Dial,
		onEvent: cfg.OnEvent,
		log:     cfg.Logger,
		maxBody: cfg.MaxBody,
		roots:   roots,
		conns:   make(map[*sandboxConn]struct{}),

		transports: make(map[transportKey]*http.Transport),
		sessions:   tls.NewLRUClientSessionCache(maxTransports),
	}
	if i.log == nil {
		i.log = slog.New(slog.DiscardHandler)
	}
	if i.maxBody == 0 {
		i.maxBody = DefaultMaxBody
	}
	i.tlsConfig = &tls.Config{
		MinVersion:         tls.VersionTLS12,
		NextProtos:         []string{"h2", "http/1.1"},
		GetConfigForClient: i.checkHello,
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			cert, err := i.ca.Leaf(hello.ServerName)
			if err != nil {
				i.log.Error("no certificate for the sandbox's TLS connection", "name", hello.ServerName, "err", err)
			}
			return cert, err
		},
	}
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetHTTP2(true)
	protocols.SetUnencryptedHTTP2(true) // prior knowledge only: "PRI * HTTP/2.0"
	i.server = &http.Server{
		Handler:           http.HandlerFunc(i.handle),
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		// "OPTIONS *" comes to the handler, which refuses it, rather
		// than being answered here.
		DisableGeneralOptionsHandler: true,
		Protocols:                    &protocols,
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams: maxConcurrentStreams,
		},
		ErrorLog: slog.NewLogLogger(i.log.Handler(), slog.LevelDebug),
		BaseContext: func(l net.Listener) context.Context {
			return l.(*connListener).ctx
		},
		ConnState: func(conn net.Conn, state http.ConnState) {
			if h, ok := conn.(*holdConn); ok {
				h.setState(state)
			}
		},
	}
	i.proxy = i.newProxy()
	return i, nil
}

// Close ends every connection being served and frees idle upstream
// connections. Connections handed to ServeTLS or ServeHTTP afterwards
// are closed at once.
func (i *Interceptor) Close() error {
	i.mu.Lock()
	i.closed = true
	conns := make([]*sandboxConn, 0, len(i.conns))
	for c := range i.conns {
		conns = append(conns, c)
	}
	i.mu.Unlock()
	err := i.server.Close()
	for _, c := range conns {
		c.raw.Close()
	}
	i.closeTransports()
	return err
}

// track registers a connection being served; false means the
// Interceptor is closed.
func (i *Interceptor) track(c *sandboxConn) bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.closed {
		return false
	}
	i.conns[c] = struct{}{}
	return true
}

func (i *Interceptor) untrack(c *sandboxConn) {
	i.mu.Lock()
	defer i.mu.Unlock()
	delete(i.conns, c)
}
