package intercept

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"time"
)

// Upstream timeouts and bounds.
const (
	dialTimeout            = 30 * time.Second
	upstreamTLSTimeout     = 10 * time.Second
	upstreamIdleTimeout    = 90 * time.Second
	expectContinueTimeout  = time.Second
	maxIdlePerHost         = 8
	maxResponseHeaderBytes = 1 << 20
	// upstreamBufferSize is the size of each upstream connection's read
	// and write buffers: a chunk of a streamed body goes out in one write.
	upstreamBufferSize = 64 << 10
)

// upstream is a sandbox connection's HTTP client: one http.Transport,
// made on first use and reused by every request of the connection, whose
// every connection goes to the destination the sandbox chose.
type upstream struct {
	c    *sandboxConn
	once sync.Once
	mu   sync.Mutex
	t    *http.Transport
}

func (u *upstream) transport() *http.Transport {
	u.once.Do(func() {
		c := u.c
		t := &http.Transport{
			Proxy: nil, // never a proxy from the environment
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				// The address the transport asks for is the request's
				// host: ignore it and dial where the sandbox connected,
				// without resolving anything.
				ctx, cancel := context.WithTimeout(ctx, dialTimeout)
				defer cancel()
				return c.i.dial(ctx, c.dst, c.dialNames)
			},
			TLSHandshakeTimeout:    upstreamTLSTimeout,
			ForceAttemptHTTP2:      true,
			DisableCompression:     true, // Accept-Encoding passes as the sandbox sent it
			MaxIdleConnsPerHost:    maxIdlePerHost,
			IdleConnTimeout:        upstreamIdleTimeout,
			ExpectContinueTimeout:  expectContinueTimeout,
			MaxResponseHeaderBytes: maxResponseHeaderBytes,
			WriteBufferSize:        upstreamBufferSize,
			ReadBufferSize:         upstreamBufferSize,
		}
		if c.tls {
			t.TLSClientConfig = &tls.Config{
				ServerName: c.sni,
				RootCAs:    c.i.roots,
				MinVersion: tls.VersionTLS12,
			}
		}
		u.mu.Lock()
		u.t = t
		u.mu.Unlock()
	})
	return u.t
}

// closeIdle closes the connection's idle upstream connections.
func (c *sandboxConn) closeIdle() {
	c.upstream.mu.Lock()
	t := c.upstream.t
	c.upstream.mu.Unlock()
	if t != nil {
		t.CloseIdleConnections()
	}
}
