package intercept

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/policy"
)

// Names the tests use: both allowed by the default policy.
const (
	apiHost   = "api.example.com"
	otherHost = "other.example.org"
	// secretValue has characters that must be escaped in a URL.
	secretValue = "s3cr3t/v+al ue"
)

// waitLimit guards against hangs; no test depends on how fast anything
// is.
const waitLimit = 20 * time.Second

// harnessConfig describes one test's setup; the zero value is TLS on
// both sides, HTTP/1.1 upstream, the echo handler, and a policy that
// allows apiHost and otherHost.
type harnessConfig struct {
	policy policy.Config
	opts   policy.Options
	plain  bool // the sandbox speaks plain HTTP, and so does upstream
	// tlsOnly keeps the secrets of a plain harness sent only over TLS;
	// otherwise a plain harness gives every secret allow_plaintext.
	tlsOnly    bool
	upstreamH2 bool         // the upstream server offers HTTP/2
	handler    http.Handler // nil: echo
	names      []string     // pinned to dst; nil: apiHost and otherHost
	maxBody    int64
	dstPort    uint16 // the port the sandbox connected to; 0: the listener's
	dropEvents bool   // count events rather than keep them (benchmarks)
	// upstreamCert, when set, is the name on the upstream server's
	// certificate, whatever the client asks for.
	upstreamCert string
	dial         func(ctx context.Context, dst netip.AddrPort, names []string) (net.Conn, error)
}

// harness is an interceptor between a sandbox-side listener (real
// loopback TCP, served by ServeTLS or ServeHTTP) and a real upstream
// server.
type harness struct {
	t        testing.TB
	cfg      harnessConfig
	policy   *policy.Policy
	ic       *Interceptor
	ca       *CA
	caFile   string
	upstream *httptest.Server
	ln       net.Listener
	dst      netip.AddrPort
	names    []string
	events   chan api.NetworkEvent
	pending  []api.NetworkEvent // received by eventFor, not yet asked for
	dials    atomic.Int32
	dropped  atomic.Int64
	upCA     *CA
	dialDst  chan netip.AddrPort

	// Upstream requests: started (the handler ran) and completed (its
	// body was read to the end without error).
	started, completed atomic.Int32

	serving   sync.WaitGroup
	closeOnce sync.Once
}

// seen is what the echo handler reports about the request it got.
type seen struct {
	Method string      `json:"method"`
	URI    string      `json:"uri"`
	Host   string      `json:"host"`
	Proto  string      `json:"proto"`
	Header http.Header `json:"header"`
	Body   string      `json:"body"`
	Query  string      `json:"query"`
	Path   string      `json:"path"`
	User   string      `json:"user"`
	Pass   string      `json:"pass"`
	// Length is the request's Content-Length, -1 when it had none.
	Length int64 `json:"length"`
}

func newHarness(t testing.TB, cfg harnessConfig) *harness {
	t.Helper()
	h := &harness{t: t, cfg: cfg, events: make(chan api.NetworkEvent, 256), dialDst: make(chan netip.AddrPort, 64)}

	upCA, err := LoadOrCreateCA(filepath.Join(t.TempDir(), "upstream-ca"))
	if err != nil {
		t.Fatal(err)
	}
	h.upCA = upCA
	upPEM := filepath.Join(t.TempDir(), "upstream-ca.pem")
	if err := os.WriteFile(upPEM, upCA.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	handler := cfg.handler
	if handler == nil {
		handler = http.HandlerFunc(h.echo)
	}
	h.upstream = httptest.NewUnstartedServer(handler)
	h.upstream.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are expected
	if cfg.plain {
		h.upstream.Start()
	} else {
		h.upstream.EnableHTTP2 = cfg.upstreamH2
		h.upstream.TLS = &tls.Config{GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			if cfg.upstreamCert != "" {
				return upCA.Leaf(cfg.upstreamCert)
			}
			return upCA.Leaf(hello.ServerName)
		}}
		h.upstream.StartTLS()
	}

	h.ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := uint16(h.ln.Addr().(*net.TCPAddr).Port)
	if cfg.dstPort != 0 {
		port = cfg.dstPort
	}
	h.dst = netip.AddrPortFrom(netip.MustParseAddr("203.0.113.10"), port)

	pc := cfg.policy
	if pc.AllowedHosts == nil {
		pc.AllowedHosts = []string{apiHost, otherHost}
	}
	// The sandbox's connections arrive on the listener's port, which a
	// pattern without a port does not open: open it for each.
	var allowed []string
	for _, a := range pc.AllowedHosts {
		allowed = append(allowed, a)
		if !strings.Contains(a, ":") && !slices.Contains(policy.DefaultPorts, port) {
			allowed = append(allowed, a+":"+strconv.Itoa(int(port)))
		}
	}
	pc.AllowedHosts = allowed
	if cfg.plain && !cfg.tlsOnly && pc.Secrets != nil {
		secrets := make(map[string]policy.Secret, len(pc.Secrets))
		for k, v := range pc.Secrets {
			v.AllowPlaintext = true
			secrets[k] = v
		}
		pc.Secrets = secrets
	}
	pc.ExtraRootCAs = append(pc.ExtraRootCAs, upPEM)
	h.policy, err = policy.New(pc, cfg.opts)
	if err != nil {
		t.Fatal(err)
	}

	caDir := filepath.Join(t.TempDir(), "ca")
	h.ca, err = LoadOrCreateCA(caDir)
	if err != nil {
		t.Fatal(err)
	}
	h.caFile = filepath.Join(caDir, caCertFile)

	dial := cfg.dial
	if dial == nil {
		dial = func(ctx context.Context, dst netip.AddrPort, names []string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", h.upstream.Listener.Addr().String())
		}
	}
	h.ic, err = New(Config{
		Policy: h.policy,
		CA:     h.ca,
		Dial: func(ctx context.Context, dst netip.AddrPort, names []string) (net.Conn, error) {
			h.dials.Add(1)
			select {
			case h.dialDst <- dst:
			default:
			}
			return dial(ctx, dst, names)
		},
		OnEvent: func(ev api.NetworkEvent) {
			if cfg.dropEvents {
				h.dropped.Add(1)
				return
			}
			h.events <- ev
		},
		MaxBody: cfg.maxBody,
	})
	if err != nil {
		t.Fatal(err)
	}

	h.names = cfg.names
	if h.names == nil {
		h.names = []string{apiHost, otherHost}
	}
	h.serving.Add(1)
	go func() {
		defer h.serving.Done()
		for {
			conn, err := h.ln.Accept()
			if err != nil {
				return
			}
			h.serving.Add(1)
			go func() {
				defer h.serving.Done()
				if cfg.plain {
					h.ic.ServeHTTP(context.Background(), conn, h.dst, h.names)
				} else {
					h.ic.ServeTLS(context.Background(), conn, h.dst, h.names)
				}
			}()
		}
	}()
	t.Cleanup(h.close)
	return h
}

// close stops everything and waits until every ServeTLS and ServeHTTP
// call has returned: after it, every event has been emitted.
func (h *harness) close() {
	h.closeOnce.Do(func() {
		h.ln.Close()
		h.ic.Close()
		h.serving.Wait()
		h.upstream.Close()
	})
}

func (h *harness) echo(w http.ResponseWriter, r *http.Request) {
	h.started.Add(1)
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	h.completed.Add(1)
	s := seen{Method: r.Method, URI: r.RequestURI, Host: r.Host, Proto: r.Proto, Header: r.Header, Body: string(body), Query: r.URL.Query().Get("key"), Path: r.URL.Path, Length: r.ContentLength}
	s.User, s.Pass, _ = r.BasicAuth()
	// The report goes back hidden: the responses of a secret's host are
	// scrubbed of its value in every form ordinary software writes it
	// in, and the report must show the value that arrived.
	b, _ := json.Marshal(s)
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("X-Upstream-Proto", r.Proto)
	_, _ = io.WriteString(w, hide(string(b)))
}

// hide encodes s as no scrubber recognises (XOR with a key, then
// base64), so that an upstream can report a secret's value as it
// arrived; unhide decodes it.
func hide(s string) string {
	b := []byte(s)
	for i := range b {
		b[i] ^= 0x5a
	}
	return base64.StdEncoding.EncodeToString(b)
}

func unhide(s string) (string, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	for i := range b {
		b[i] ^= 0x5a
	}
	return string(b), err
}

func (h *harness) scheme() string {
	if h.cfg.plain {
		return "http"
	}
	return "https"
}

// url is an address of apiHost with the port the sandbox connects to.
func (h *harness) url(path string) string {
	return h.hostURL(apiHost, path)
}

func (h *harness) hostURL(host, path string) string {
	return h.scheme() + "://" + host + ":" + strconv.Itoa(int(h.dst.Port())) + path
}

// pool trusts the interceptor's CA.
func (h *harness) pool() *x509.CertPool {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(h.ca.CertPEM()) {
		h.t.Fatal("the CA's PEM does not parse")
	}
	return pool
}

// client is the sandbox's HTTP client: every connection goes to the
// interceptor's listener, whatever the URL's host.
func (h *harness) client(h2 bool) *http.Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", h.ln.Addr().String())
		},
		TLSClientConfig:    &tls.Config{RootCAs: h.pool()},
		ForceAttemptHTTP2:  h2,
		DisableCompression: true,
	}
	if h.cfg.plain && h2 {
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		tr.Protocols = &p
	}
	h.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: waitLimit}
}

// event waits for the next event.
func (h *harness) event() api.NetworkEvent {
	h.t.Helper()
	if len(h.pending) > 0 {
		ev := h.pending[0]
		h.pending = h.pending[1:]
		return ev
	}
	select {
	case ev := <-h.events:
		return ev
	case <-time.After(waitLimit):
		h.t.Fatal("no event")
		return api.NetworkEvent{}
	}
}

// eventFor waits for the event of the request whose URL ends with
// suffix. Requests on different connections may end in any order; the
// events of others wait for later calls.
func (h *harness) eventFor(suffix string) api.NetworkEvent {
	h.t.Helper()
	for i, ev := range h.pending {
		if strings.HasSuffix(ev.URL, suffix) {
			h.pending = append(h.pending[:i:i], h.pending[i+1:]...)
			return ev
		}
	}
	for {
		select {
		case ev := <-h.events:
			if strings.HasSuffix(ev.URL, suffix) {
				return ev
			}
			h.pending = append(h.pending, ev)
		case <-time.After(waitLimit):
			h.t.Fatalf("no event for a URL ending with %q", suffix)
			return api.NetworkEvent{}
		}
	}
}

// noMoreEvents closes the harness and checks that no event is left.
func (h *harness) noMoreEvents() {
	h.t.Helper()
	h.close()
	for _, ev := range h.pending {
		h.t.Errorf("unexpected event %+v", ev)
	}
	select {
	case ev := <-h.events:
		h.t.Errorf("unexpected event %+v", ev)
	default:
	}
}

// do sends a request and returns the response with its body read.
func do(t testing.TB, c *http.Client, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", req.Method, req.URL, err)
	}
	return resp, body
}

func newRequest(t testing.TB, method, url string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func decodeSeen(t *testing.T, body []byte) seen {
	t.Helper()
	var s seen
	b, err := unhide(string(body))
	if err == nil {
		err = json.Unmarshal([]byte(b), &s)
	}
	if err != nil {
		t.Fatalf("upstream answer %q: %v", body, err)
	}
	return s
}

// checkBlocked checks a refusal's status, header and body, and its
// event.
func (h *harness) checkBlocked(resp *http.Response, body []byte, status int, code string) api.NetworkEvent {
	h.t.Helper()
	if resp.StatusCode != status {
		h.t.Errorf("status %d, want %d (body %q)", resp.StatusCode, status, body)
	}
	if got := resp.Header.Get("X-Airlock-Blocked"); got != code {
		h.t.Errorf("X-Airlock-Blocked %q, want %q", got, code)
	}
	if want := "airlock: blocked: " + code; len(body) < len(want) || string(body[:len(want)]) != want {
		h.t.Errorf("body %q, want it to begin with %q", body, want)
	}
	ev := h.event()
	if ev.Kind != api.NetHTTP || !ev.Blocked || policy.ReasonCode(ev.Reason) != code || ev.StatusCode != status {
		h.t.Errorf("event %+v, want a blocked http event with reason %s and status %d", ev, code, status)
	}
	return ev
}
