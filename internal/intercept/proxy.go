package intercept

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/textproto"
	"strings"
	"sync"

	"github.com/airlock-sandbox/airlock/policy"
)

// newProxy makes the reverse proxy that forwards every request. It is
// shared: what differs per connection and per request (the transport,
// the prepared request) travels in the request's context.
func (i *Interceptor) newProxy() *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite:        i.rewrite,
		Transport:      roundTripper{},
		FlushInterval:  -1, // stream: SSE and chunked responses are never held back
		BufferPool:     copyBuffers,
		ErrorHandler:   i.proxyError,
		ModifyResponse: i.modifyResponse,
		ErrorLog:       slog.NewLogLogger(i.log.Handler(), slog.LevelDebug),
	}
}

// rewrite puts the prepared request in place of the one the reverse
// proxy cloned. It keeps the hop-by-hop fields the proxy set for
// trailers (Te) and for a WebSocket upgrade (Connection, Upgrade); any
// other upgrade (such as h2c, which would carry further requests past
// every check) is dropped, and the request goes as it is. A WebSocket
// whose frames will be rewritten offers no extension (permessage-deflate
// would compress them). It drops the sandbox's request trailers, which
// could carry placeholders past the substitution.
func (i *Interceptor) rewrite(pr *httputil.ProxyRequest) {
	x := exchangeOf(pr.In.Context())
	out := pr.Out
	h := x.header
	keep := []string{"Te"}
	if strings.EqualFold(out.Header.Get("Upgrade"), "websocket") {
		keep = append(keep, "Connection", "Upgrade")
		if i.rewritesFrames() {
			h.Del(wsExtensions)
		}
	}
	for _, k := range keep {
		if v, ok := out.Header[k]; ok {
			h[k] = v
		}
	}
	out.Method = x.outMethod
	out.URL = x.outURL
	out.Host = x.outHost
	out.Header = h
	out.Trailer = nil
	out.TransferEncoding = nil
	out.ContentLength = x.length
	out.GetBody = nil
	switch {
	case x.stream:
		// out.Body is the proxy's wrapper of the sandbox's body, which
		// stops reads once the handler is done.
		var src io.Reader = out.Body
		if len(x.prefix) > 0 {
			src = io.MultiReader(bytes.NewReader(x.prefix), src)
		}
		if x.rewrite != nil {
			src = x.rewrite.Reader(src, i.maxBody)
		}
		out.Body = &upstreamBody{r: src, x: x}
	case len(x.whole) > 0:
		whole := x.whole
		out.Body = &upstreamBody{r: bytes.NewReader(whole), x: x}
		out.GetBody = func() (io.ReadCloser, error) {
			return &upstreamBody{r: bytes.NewReader(whole), x: x}, nil
		}
	default:
		out.Body = nil
	}
}

// roundTripper sends a request with its sandbox connection's transport.
// The reverse proxy passes interim (1xx) responses, such as 103 Early
// Hints, straight to the sandbox, past modifyResponse: their header
// values are scrubbed here first (a trace added here runs before the
// proxy's).
type roundTripper struct{}

func (roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	x := exchangeOf(req.Context())
	if scrub := x.scrubber(); scrub.Active() {
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			Got1xxResponse: func(_ int, h textproto.MIMEHeader) error {
				scrub.Header(http.Header(h))
				return nil
			},
		}))
	}
	return x.c.transport().RoundTrip(req)
}

// proxyError answers a request that could not be forwarded: 403 when
// the policy blocked it (a leak found mid-body, a hook, a refused dial),
// 504 when the upstream did not answer in time, 502 when it failed
// otherwise, nothing when the sandbox is gone.
func (i *Interceptor) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	x := exchangeOf(r.Context())
	if be := x.blocked.Load(); be != nil {
		err = be
	}
	var be *policy.BlockError
	if errors.As(err, &be) {
		x.refuse(http.StatusForbidden, be.Error())
		return
	}
	reason := policy.ReasonUpstreamError + ": " + err.Error()
	if x.bodyCut.Load() {
		// The sandbox's own body failed, not the upstream (its end also
		// cancelled the request: the answer goes all the same, to a
		// client that may have only half-closed).
		x.fail(http.StatusBadRequest, fmt.Sprintf("%s: the request body ended before its declared length, or broke: %v", policy.ReasonBadRequest, err))
		return
	}
	if r.Context().Err() != nil {
		// The sandbox went away: nobody to answer. Abort, rather than
		// let the server make up an empty 200 should the connection
		// still take one.
		x.reason = reason
		panic(http.ErrAbortHandler)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		x.fail(http.StatusGatewayTimeout, fmt.Sprintf("%s: timeout: the upstream did not answer in time (a response header within %s, response_header_timeout_seconds; a connection within %s): %v",
			policy.ReasonUpstreamError, x.c.i.policy.ResponseHeaderTimeout(), dialTimeout, err))
		return
	}
	x.fail(http.StatusBadGateway, reason)
}

// copyBufferSize is the size of the buffers response bodies are copied
// through: large enough that a plain body moves in few system calls.
const copyBufferSize = 128 << 10

// copyBuffers are the reverse proxy's buffers for response bodies,
// shared by all requests.
var copyBuffers = &bufferPool{pool: sync.Pool{New: func() any {
	b := make([]byte, copyBufferSize)
	return &b
}}}

type bufferPool struct{ pool sync.Pool }

func (p *bufferPool) Get() []byte  { return *p.pool.Get().(*[]byte) }
func (p *bufferPool) Put(b []byte) { p.pool.Put(&b) }
