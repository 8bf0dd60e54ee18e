package intercept

import (
	"context"
	"errors"
	"fmt"
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
	target    string // the URL, until it is parsed into outURL
	outURL    *url.URL
	outHost   string
	header    http.Header
	whole     []byte              // the whole body, when it is known; nil when it streams
	stream    bool                // the body streams from the sandbox
	prefix    []byte              // bytes of a streamed body already read, for the hooks
	rewrite   *policy.Substituter // the streamed body goes through it; nil for none
	length    int64               // upstream Content-Length; -1 for unknown
	hooked    *policy.Request     // the request as the hooks left it, for response hooks

	switched  bool        // the upstream switched protocols (101)
	bodyCut   atomic.Bool // the sandbox's body ended short, or broke
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
	if r.Body != nil && r.Body != http.NoBody && c.hold != nil {
		r.Body = &bodyWatch{ReadCloser: r.Body, hc: c.hold, cut: &x.bodyCut}
	}
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
	host, ref := x.checkTarget(r)
	if ref != nil {
		return ref
	}
	x.outMethod, x.target = r.Method, x.url
	x.header = r.Header.Clone()
	cleanHeader(x.header)
	if ref := x.readForHooks(r); ref != nil {
		return ref
	}
	if ref := x.runRequestHooks(r.Context(), host); ref != nil {
		return ref
	}
	if ref := x.substitute(r, host); ref != nil {
		return ref
	}
	out, err := url.Parse(x.target)
	if err != nil {
		return refuse(http.StatusBadRequest, policy.ReasonBadRequest, "the URL %q does not parse: %v", x.target, err)
	}
	// Hooks cannot change the scheme or host (the policy checks), and
	// substitution only percent-encodes: the authority stays ours.
	out.Scheme, out.Host, out.User = x.c.scheme(), x.outHost, nil
	x.outURL = out
	if !x.stream {
		x.length = int64(len(x.whole))
	}
	return nil
}

// checkTarget applies the rules on where a request goes, and returns
// its normalised host. It sets the URL the event reports.
func (x *exchange) checkTarget(r *http.Request) (string, *refusal) {
	c := x.c
	if r.Method == http.MethodConnect {
		return "", refuse(http.StatusMethodNotAllowed, policy.ReasonProxyRequest, "CONNECT is refused: the sandbox has no proxy, connect to the server itself")
	}
	raw := r.Host
	if r.URL.IsAbs() {
		// Absolute form: its host is the request's host (net/http has
		// made it r.Host), under the same rules.
		if !strings.EqualFold(r.URL.Scheme, c.scheme()) {
			return "", refuse(http.StatusMisdirectedRequest, policy.ReasonHostMismatch, "an %s URL on an %s connection", r.URL.Scheme, c.scheme())
		}
		if r.URL.User != nil {
			return "", refuse(http.StatusBadRequest, policy.ReasonInvalidHost, "the URL has user information")
		}
		raw = r.URL.Host
	}
	for _, h := range r.Header.Values("Host") {
		// HTTP/2: a Host field beside :authority must agree with it.
		if h != raw {
			return "", refuse(http.StatusMisdirectedRequest, policy.ReasonHostMismatch, "the Host field %q differs from the request's authority %q", h, raw)
		}
	}
	a, err := parseAuthority(raw)
	if err != nil {
		return "", refuse(http.StatusBadRequest, policy.ReasonInvalidHost, "%q: %v", raw, err)
	}
	x.host = a.host
	if a.port != 0 && a.port != c.dst.Port() {
		return "", refuse(http.StatusMisdirectedRequest, policy.ReasonHostMismatch, "the request names port %d but was sent to port %d", a.port, c.dst.Port())
	}
	if c.tls {
		if a.host != c.sni {
			return "", refuse(http.StatusMisdirectedRequest, policy.ReasonHostMismatch, "the request's host %s differs from the TLS server name %s", a.host, c.sni)
		}
	} else if !containsName(c.names, a.host) {
		return "", refuse(http.StatusMisdirectedRequest, policy.ReasonHostMismatch, "%s is not among the names DNS gave for %s", a.host, c.dst.Addr())
	}
	if ok, reason := c.i.policy.HostPortDecision(a.host, c.dst.Port()); !ok {
		return "", &refusal{status: http.StatusForbidden, reason: reason}
	}
	target := r.URL.RequestURI()
	if !strings.HasPrefix(target, "/") {
		return "", refuse(http.StatusBadRequest, policy.ReasonBadRequest, "the request target %q is not a path", target)
	}
	x.outHost = a.host
	if c.dst.Port() != defaultPort(c.tls) {
		x.outHost += ":" + strconv.Itoa(int(c.dst.Port()))
	}
	x.url = c.scheme() + "://" + x.outHost + target
	return a.host, nil
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
// proxy puts back those a protocol upgrade needs), and Expect: the
// interceptor answers a 100-continue expectation itself, as it starts
// to read the body, as most proxies do (forwarding it too would give the
// sandbox a second 100 Continue, the upstream's).
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
	delete(h, "Expect")
}
