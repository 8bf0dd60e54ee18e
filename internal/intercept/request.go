package intercept

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock/policy"
)

// exchange is one request on its way through the interceptor: what the
// checks and hooks decided, what goes upstream, and what the event
// reports.
type exchange struct {
	c     *sandboxConn
	ctx   context.Context // the sandbox's request's
	start time.Time
	w     *recorder

	// For the event: the method and URL as the hooks left them (with
	// placeholders, never secret values), and the normalised host.
	method, url, host string

	// What goes upstream.
	outMethod string
	outURL    *url.URL
	outHost   string
	header    http.Header
	whole     []byte              // the whole body, when it is known; nil when it streams
	stream    bool                // the body streams from the sandbox
	prefix    []byte              // bytes of a streamed body already read, for the hooks
	rewrite   *policy.Substituter // the streamed body goes through it; nil for none
	length    int64               // upstream Content-Length; -1 for unknown
	hooked    *policy.Request     // the request as the hooks left it, for response hooks

	switched  bool // the upstream switched protocols (101)
	reqBytes  atomic.Int64
	blocked   blockSlot // a block found while the body streamed
	isBlocked bool
	reason    string
}

type exchangeKey struct{}

func exchangeOf(ctx context.Context) *exchange {
	return ctx.Value(exchangeKey{}).(*exchange)
}

// refusal is a request the interceptor answers itself.
type refusal struct {
	status int
	reason string
}

func refuse(status int, code, format string, args ...any) *refusal {
	return &refusal{status: status, reason: code + ": " + fmt.Sprintf(format, args...)}
}

// blockedBy turns an error of the policy package into a 403 refusal.
func blockedBy(err error) *refusal {
	var be *policy.BlockError
	if errors.As(err, &be) {
		return &refusal{status: http.StatusForbidden, reason: be.Error()}
	}
	return &refusal{status: http.StatusForbidden, reason: policy.ReasonPolicyError + ": " + err.Error()}
}

// handle is the sandbox side's http.Handler: it checks and prepares each
// request, then hands it to the reverse proxy.
func (i *Interceptor) handle(w http.ResponseWriter, r *http.Request) {
	c := r.Context().Value(connKey{}).(*sandboxConn)
	if !c.enter() {
		panic(http.ErrAbortHandler) // the connection is over
	}
	defer c.leave()
	x := &exchange{
		c:      c,
		ctx:    r.Context(),
		start:  time.Now(),
		w:      &recorder{ResponseWriter: w},
		method: r.Method,
		url:    c.scheme() + "://" + r.Host + r.URL.RequestURI(),
		host:   r.Host,
		length: -1,
	}
	defer x.finish()
	if ref := x.prepare(r); ref != nil {
		x.refuse(ref.status, ref.reason)
		return
	}
	i.proxy.ServeHTTP(x.w, r.WithContext(context.WithValue(r.Context(), exchangeKey{}, x)))
}

// prepare applies the rules to a request from the sandbox, in order:
// no CONNECT; the authority must be a name, on the port connected to,
// equal to the TLS server name (or, in plain HTTP, pinned to the
// destination), and allowed; then the hooks, which see placeholders;
// then secret substitution in the URL, the header and the body. It
// returns nil when the request may go on, with x ready for rewrite.
func (x *exchange) prepare(r *http.Request) *refusal {
	c := x.c
	p := c.i.policy
	if r.Method == http.MethodConnect {
		return refuse(http.StatusMethodNotAllowed, policy.ReasonProxyRequest, "CONNECT is refused: the sandbox has no proxy, connect to the server itself")
	}

	raw := r.Host
	if r.URL.IsAbs() {
		// Absolute form: its host is the request's host (net/http has
		// made it r.Host), under the same rules.
		if !strings.EqualFold(r.URL.Scheme, c.scheme()) {
			return refuse(http.StatusMisdirectedRequest, policy.ReasonHostMismatch, "an %s URL on an %s connection", r.URL.Scheme, c.scheme())
		}
		if r.URL.User != nil {
			return refuse(http.StatusBadRequest, policy.ReasonInvalidHost, "the URL has user information")
		}
		raw = r.URL.Host
	}
	for _, h := range r.Header.Values("Host") {
		// HTTP/2: a Host field beside :authority must agree with it.
		if h != raw {
			return refuse(http.StatusMisdirectedRequest, policy.ReasonHostMismatch, "the Host field %q differs from the request's authority %q", h, raw)
		}
	}
	a, err := parseAuthority(raw)
	if err != nil {
		return refuse(http.StatusBadRequest, policy.ReasonInvalidHost, "%q: %v", raw, err)
	}
	x.host = a.host
	if a.port != 0 && a.port != c.dst.Port() {
		return refuse(http.StatusMisdirectedRequest, policy.ReasonHostMismatch, "the request names port %d but was sent to port %d", a.port, c.dst.Port())
	}
	if c.tls {
		if a.host != c.sni {
			return refuse(http.StatusMisdirectedRequest, policy.ReasonHostMismatch, "the request's host %s differs from the TLS server name %s", a.host, c.sni)
		}
	} else if !containsName(c.names, a.host) {
		return refuse(http.StatusMisdirectedRequest, policy.ReasonHostMismatch, "%s is not among the names DNS gave for %s", a.host, c.dst.Addr())
	}
	if ok, reason := p.HostDecision(a.host); !ok {
		return &refusal{status: http.StatusForbidden, reason: reason}
	}

	target := r.URL.RequestURI()
	if !strings.HasPrefix(target, "/") {
		return refuse(http.StatusBadRequest, policy.ReasonBadRequest, "the request target %q is not a path", target)
	}
	x.outHost = a.host
	if c.dst.Port() != defaultPort(c.tls) {
		x.outHost += ":" + strconv.Itoa(int(c.dst.Port()))
	}
	x.url = c.scheme() + "://" + x.outHost + target

	header := r.Header.Clone()
	cleanHeader(header)

	// The body: known (and empty) when there is none; read whole for
	// the hooks when it fits; otherwise it streams.
	hasBody := r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0
	if !hasBody {
		x.whole = []byte{}
	} else {
		x.stream = true
		x.length = r.ContentLength
	}
	if p.HasRequestHooks() && x.stream {
		limit := int64(p.MaxHookBody())
		if r.ContentLength <= limit {
			b, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
			if err != nil {
				return refuse(http.StatusBadRequest, policy.ReasonBadRequest, "reading the request body: %v", err)
			}
			if int64(len(b)) <= limit {
				x.whole, x.stream = b, false
			} else {
				x.prefix = b
			}
		}
	}

	method, u := r.Method, x.url
	if p.HasRequestHooks() || p.HasResponseHooks() {
		preq := &policy.Request{Method: r.Method, URL: x.url, Host: a.host, Header: header, Body: x.whole}
		if p.HasRequestHooks() {
			out, err := p.FilterRequest(r.Context(), preq)
			if err != nil {
				return blockedBy(err)
			}
			preq = out
		}
		x.hooked = preq
		x.method, x.url = preq.Method, preq.URL
		method, u = preq.Method, preq.URL
		if method == http.MethodConnect {
			return refuse(http.StatusForbidden, policy.ReasonPolicyError, "a request hook made the request a CONNECT")
		}
		header = preq.Header.Clone() // x.hooked keeps the placeholders
		cleanHeader(header)
		switch {
		case !x.stream:
			x.whole = preq.Body
			if x.whole == nil {
				x.whole = []byte{} // the hook removed the body
			}
		case preq.Body != nil:
			// A hook gave a body to a request whose body streamed: it
			// replaces the stream.
			x.whole, x.stream, x.prefix = preq.Body, false, nil
		}
	}

	if p.HasSecrets() {
		s := c.substituter(a.host)
		if u, err = s.URL(u); err != nil {
			return blockedBy(err)
		}
		for k, vs := range header {
			for j, v := range vs {
				if vs[j], err = s.Header(k, v); err != nil {
					return blockedBy(err)
				}
			}
		}
		if x.stream || len(x.whole) > 0 {
			if err := p.CheckBodyEncoding(strings.Join(header.Values("Content-Encoding"), ", ")); err != nil {
				return blockedBy(err)
			}
		}
		if x.stream && x.prefix == nil && r.ContentLength > 0 && r.ContentLength <= smallBody {
			// Small and of known length: read it whole, so that it keeps
			// an exact Content-Length and a leak in it stops the request
			// before any of it is sent.
			b := make([]byte, r.ContentLength)
			if _, err := io.ReadFull(r.Body, b); err != nil {
				return refuse(http.StatusBadRequest, policy.ReasonBadRequest, "reading the request body: %v", err)
			}
			x.whole, x.stream = b, false
		}
		switch {
		case !x.stream && int64(len(x.whole)) > c.i.maxBody:
			return blockedBy(&policy.BlockError{Reason: policy.ReasonSecretUnrewritable, Detail: fmt.Sprintf("the body is longer than %d bytes, the most that is scanned for secret placeholders", c.i.maxBody)})
		case !x.stream:
			if x.whole, err = s.Bytes(x.whole); err != nil {
				return blockedBy(err)
			}
		default:
			x.rewrite = s
			x.length = -1 // rewriting changes the length
		}
	}

	out, err := url.Parse(u)
	if err != nil {
		return refuse(http.StatusBadRequest, policy.ReasonBadRequest, "the URL %q does not parse: %v", u, err)
	}
	// Hooks cannot change the scheme or host (the policy checks), and
	// substitution only percent-encodes: the authority stays ours.
	out.Scheme, out.Host, out.User = c.scheme(), x.outHost, nil
	x.outMethod, x.outURL, x.header = method, out, header
	if !x.stream {
		x.length = int64(len(x.whole))
	}
	return nil
}

func defaultPort(isTLS bool) uint16 {
	if isTLS {
		return 443
	}
	return 80
}

// hopHeaders are the hop-by-hop fields (RFC 9110 section 7.6.1, and the
// older ones net/http/httputil also drops).
var hopHeaders = []string{
	"Connection",
	"Proxy-Connection",
	"Keep-Alive",
	"Proxy-Authenticate",
	"Proxy-Authorization",
	"Te",
	"Trailer",
	"Transfer-Encoding",
	"Upgrade",
}

// cleanHeader removes from a request header what the interceptor sets
// itself: Host, Content-Length and the hop-by-hop fields (the reverse
// proxy puts back those a protocol upgrade needs).
func cleanHeader(h http.Header) {
	for _, f := range h["Connection"] {
		for _, sf := range strings.Split(f, ",") {
			if sf = strings.TrimSpace(sf); sf != "" {
				h.Del(sf)
			}
		}
	}
	for _, k := range hopHeaders {
		delete(h, k)
	}
	delete(h, "Host")
	delete(h, "Content-Length")
}

// upstreamBody is the request body the transport sends: it counts the
// bytes and records a block (a placeholder leak found mid-body, or a
// body past the bound) so that the sandbox gets a 403 whatever error the
// transport reports.
type upstreamBody struct {
	r io.Reader
	x *exchange
}

func (b *upstreamBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.x.reqBytes.Add(int64(n))
	if err != nil && err != io.EOF {
		var be *policy.BlockError
		if errors.As(err, &be) {
			b.x.blocked.note(be)
		}
	}
	return n, err
}

// Close does nothing: the sandbox's body belongs to its server.
func (b *upstreamBody) Close() error { return nil }
