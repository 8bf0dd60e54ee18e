package intercept

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/netip"
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

// maxTransports bounds the upstream transports an Interceptor keeps,
// one per destination and server name.
const maxTransports = 256

// transportKey names the upstream a sandbox connection's requests go to:
// the address the sandbox connected to, and the TLS server name.
type transportKey struct {
	dst netip.AddrPort
	sni string
	tls bool
}

// transport returns the connection's HTTP client, shared by every
// sandbox connection to the same destination and server name, so that a
// new connection from the sandbox reuses an idle upstream connection (or
// an HTTP/2 one) instead of paying a new handshake. Every connection it
// makes goes to the destination the sandbox chose.
func (c *sandboxConn) transport() *http.Transport {
	c.tOnce.Do(func() { c.t = c.i.transportFor(c) })
	return c.t
}

func (i *Interceptor) transportFor(c *sandboxConn) *http.Transport {
	key := transportKey{dst: c.dst, sni: c.sni, tls: c.tls}
	i.tmu.Lock()
	defer i.tmu.Unlock()
	if t, ok := i.transports[key]; ok {
		return t
	}
	if len(i.transports) >= maxTransports {
		for k, t := range i.transports {
			// Requests under way keep their transport; only its idle
			// connections go.
			t.CloseIdleConnections()
			delete(i.transports, k)
			break
		}
	}
	dst, names := c.dst, c.dialNames
	t := &http.Transport{
		Proxy: nil, // never a proxy from the environment
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			// The address the transport asks for is the request's host:
			// ignore it and dial where the sandbox connected, without
			// resolving anything.
			ctx, cancel := context.WithTimeout(ctx, dialTimeout)
			defer cancel()
			return i.dial(ctx, dst, names)
		},
		TLSHandshakeTimeout:    upstreamTLSTimeout,
		ResponseHeaderTimeout:  i.policy.ResponseHeaderTimeout(),
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
			ServerName:         c.sni,
			RootCAs:            i.roots,
			MinVersion:         tls.VersionTLS12,
			ClientSessionCache: i.sessions,
		}
	}
	i.transports[key] = t
	return t
}

// closeTransports frees every idle upstream connection.
func (i *Interceptor) closeTransports() {
	i.tmu.Lock()
	defer i.tmu.Unlock()
	for k, t := range i.transports {
		t.CloseIdleConnections()
		delete(i.transports, k)
	}
}
