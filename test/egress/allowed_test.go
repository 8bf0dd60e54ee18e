package egress_test

import (
	"context"
	"encoding/json"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/testnet"
	"github.com/airlock-sandbox/airlock/policy"
)

// echoOf decodes what /echo answered.
func echoOf(t *testing.T, out string) testnet.Echo {
	t.Helper()
	var echo testnet.Echo
	if err := json.Unmarshal([]byte(out), &echo); err != nil {
		t.Fatalf("decoding /echo: %v\n%s", err, out)
	}
	return echo
}

// TestAllowedHTTPAndHTTPSOnTheirPorts proves that an allowed host is
// reached by name over HTTPS on 443 and plain HTTP on 80, and on 8443
// and 8080 when a pattern names those ports (HTTP and TLS are recognised
// on any port a pattern opens), with one event per request that has its
// method, URL, host, status and sizes.
func TestAllowedHTTPAndHTTPSOnTheirPorts(t *testing.T) {
	e := start(t)
	sb := e.box(t, e.network(testnet.API, testnet.API+":8443", testnet.API+":8080"))
	for _, c := range []struct {
		url, server string
		tls         bool
	}{
		{"https://api.example.com/echo", "203.0.113.10:443", true},
		{"https://api.example.com:8443/echo", "203.0.113.10:8443", true},
		{"http://api.example.com/echo", "203.0.113.10:80", false},
		{"http://api.example.com:8080/echo", "203.0.113.10:8080", false},
	} {
		m := e.mark()
		echo := echoOf(t, ok(t, sb, "curl -4 -sS --max-time 10 "+c.url))
		if echo.Server != c.server || echo.TLS != c.tls || (c.tls && echo.SNI != testnet.API) {
			t.Errorf("%s: the server saw %+v", c.url, echo)
		}
		ev := e.allowed(t, m, "GET", c.url, testnet.API, 200)
		if ap := netip.MustParseAddrPort(c.server); ev.IP != ap.Addr().String() || ev.Port != ap.Port() {
			t.Errorf("%s: event destination %s port %d, want %s", c.url, ev.IP, ev.Port, c.server)
		}
		if _, found := e.w.LastRequest(c.server); !found {
			t.Errorf("%s: %s got no request", c.url, c.server)
		}
	}
	// The request body's size is reported too.
	m := e.mark()
	ok(t, sb, "head -c 100000 /dev/zero | curl -sS --max-time 10 --data-binary @- https://api.example.com/discard")
	if ev := e.allowed(t, m, "POST", "https://api.example.com/discard", testnet.API, 200); ev.RequestBytes != 100000 {
		t.Errorf("request_bytes %d, want 100000", ev.RequestBytes)
	}
}

// TestAllowedHTTP2 proves that HTTP/2 works end to end: curl negotiates
// h2 with the interceptor, and the upstream server gets HTTP/2 too;
// HTTP/2 with prior knowledge over plain HTTP passes as well.
func TestAllowedHTTP2(t *testing.T) {
	e := start(t)
	sb := e.box(t, e.network(testnet.API))
	m := e.mark()
	if v := ok(t, sb, "curl -sS --max-time 10 --http2 -o /tmp/echo -w '%{http_version}' https://api.example.com/echo"); v != "2" {
		t.Errorf("curl negotiated HTTP version %q, want 2", v)
	}
	if echo := echoOf(t, ok(t, sb, "cat /tmp/echo")); echo.Proto != "HTTP/2.0" {
		t.Errorf("the upstream server got %s, want HTTP/2.0", echo.Proto)
	}
	e.allowed(t, m, "GET", "https://api.example.com/echo", testnet.API, 200)

	m = e.mark()
	if out := ok(t, sb, "curl -sS --max-time 10 --http2-prior-knowledge http://api.example.com/"); out != "hello from api.example.com\n" {
		t.Errorf("h2c: %q", out)
	}
	e.allowed(t, m, "GET", "http://api.example.com/", testnet.API, 200)
}

// TestAllowedPythonClients proves that python's urllib and http.client
// work through the interceptor with the sandbox's trust store, bodies
// included.
func TestAllowedPythonClients(t *testing.T) {
	e := start(t)
	sb := e.box(t, e.network(testnet.API))
	m := e.mark()
	out := tool(t, sb, "get https://api.example.com/echo?via=urllib")
	if !strings.HasPrefix(out, "status: 200") || !strings.Contains(out, `"query": "via=urllib"`) {
		t.Errorf("urllib: %s", out)
	}
	e.allowed(t, m, "GET", "https://api.example.com/echo?via=urllib", testnet.API, 200)

	m = e.mark()
	out = tool(t, sb, "post https://api.example.com/echo?via=http.client 'a body from http.client'")
	if !strings.HasPrefix(out, "status: 200") {
		t.Errorf("http.client: %s", out)
	}
	e.allowed(t, m, "POST", "https://api.example.com/echo?via=http.client", testnet.API, 200)
	if req, _ := e.w.LastRequest(testnet.API); string(req.Body) != "a body from http.client" {
		t.Errorf("api.example.com got body %q", req.Body)
	}
}

// TestAllowedOpenSSLTrustsSandboxStore proves that the interception CA
// is in the sandbox's system trust store, /etc/ssl/certs/
// ca-certificates.crt, so that a client that reads only that (openssl
// s_client, python without SSL_CERT_FILE) verifies the certificate it is
// shown.
func TestAllowedOpenSSLTrustsSandboxStore(t *testing.T) {
	e := start(t)
	sb := e.box(t, e.network(testnet.API))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store, err := sb.ReadFile(ctx, "/etc/ssl/certs/ca-certificates.crt")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(store), strings.TrimSpace(string(sb.CACertPEM()))) {
		t.Errorf("/etc/ssl/certs/ca-certificates.crt does not hold the sandbox's CA")
	}
	const clean = "env -u SSL_CERT_FILE -u SSL_CERT_DIR -u CURL_CA_BUNDLE -u REQUESTS_CA_BUNDLE "
	out := ok(t, sb, clean+"openssl s_client -connect api.example.com:443 -servername api.example.com -verify_return_error </dev/null 2>&1")
	if !strings.Contains(out, "Verify return code: 0 (ok)") {
		t.Errorf("openssl s_client did not verify:\n%s", out)
	}
	if out := ok(t, sb, clean+"python3 "+toolPath+" get https://api.example.com/"); !strings.Contains(out, "hello from api.example.com") {
		t.Errorf("python without SSL_CERT_FILE: %s", out)
	}
	if out := ok(t, sb, clean+"curl -sS https://api.example.com/"); out != "hello from api.example.com\n" {
		t.Errorf("curl without CURL_CA_BUNDLE: %q", out)
	}
}

// TestAllowedGitCloneOverHTTPS proves that git clones over HTTPS through
// the interceptor (smart HTTP, protocol v2), with an event per request.
func TestAllowedGitCloneOverHTTPS(t *testing.T) {
	e := start(t)
	sb := e.box(t, e.network(testnet.API), hostRoot)
	m := e.mark()
	ok(t, sb, "git clone --quiet https://api.example.com/repo.git /tmp/repo")
	if out := ok(t, sb, "cat /tmp/repo/"+testnet.GitFile); out != testnet.GitContent+testnet.API+"\n" {
		t.Errorf("cloned %s: %q", testnet.GitFile, out)
	}
	e.allowed(t, m, "GET", "https://api.example.com/repo.git/info/refs?service=git-upload-pack", testnet.API, 200)
	e.allowed(t, m, "POST", "https://api.example.com/repo.git/git-upload-pack", testnet.API, 200)
	if out := ok(t, sb, "git ls-remote https://api.example.com/repo.git"); !strings.Contains(out, "refs/heads/main") {
		t.Errorf("git ls-remote: %q", out)
	}
}

// TestAllowedWebSocket proves that a WebSocket upgrade passes the
// interceptor and then carries frames both ways: an RFC 6455 handshake
// from python (raw socket and ssl), one masked frame, its echo.
func TestAllowedWebSocket(t *testing.T) {
	e := start(t)
	sb := e.box(t, e.network(testnet.API))
	m := e.mark()
	out := tool(t, sb, "ws api.example.com /ws 'hello over a websocket'")
	for _, want := range []string{"status: HTTP/1.1 101 Switching Protocols", "accept ok: True", "frame: opcode=1 masked=0 'hello over a websocket'"} {
		if !strings.Contains(out, want) {
			t.Errorf("websocket: no %q in\n%s", want, out)
		}
	}
	ev := e.request(t, m, "https://api.example.com/ws")
	if ev.Blocked || ev.StatusCode != 101 || ev.Method != "GET" || ev.Host != testnet.API {
		t.Errorf("websocket event %+v, want GET 101, not blocked", ev)
	}
}

// TestSecretsInWebSocket proves that WebSocket messages get the secret
// handling of request bodies. The placeholder sent to the secret's host
// in a message, in one frame or split across two, arrives as the value
// (the server records what it got), and with scrub_responses the echo
// the sandbox reads carries the placeholder again. Sent to a host the
// secret is not scoped to, it is blocked: the sandbox gets a close frame
// (1008, policy violation), the server nothing of the message, and the
// event says secret_leak.
func TestSecretsInWebSocket(t *testing.T) {
	e := start(t)
	n, value := secretNetwork(e, true)
	sb := e.box(t, n)
	ph := placeholder(t, sb)
	for _, split := range []string{"", "split"} {
		m := e.mark()
		out := tool(t, sb, `ws api.example.com /ws "key=$API_KEY" `+split)
		noValue(t, "the echo", out, value)
		if want := "frame: opcode=1 masked=0 'key=" + ph + "'"; !strings.Contains(out, want) {
			t.Errorf("websocket %s: no %q in\n%s", split, want, out)
		}
		req, _ := e.w.LastRequest(testnet.API)
		if len(req.Messages) != 1 || string(req.Messages[0]) != "key="+value {
			t.Errorf("websocket %s: api.example.com got the messages %q, want the value in place", split, req.Messages)
		}
		ev := e.request(t, m, "https://api.example.com/ws")
		if ev.Blocked || ev.StatusCode != 101 {
			t.Errorf("websocket %s: event %+v, want 101, not blocked", split, ev)
		}
	}

	m := e.mark()
	out := tool(t, sb, `ws other.example.org /ws "key=$API_KEY"`)
	if want := "close: code=1008 reason='airlock: blocked: " + policy.ReasonSecretLeak + "'"; !strings.Contains(out, want) {
		t.Errorf("websocket to other.example.org: no %q in\n%s", want, out)
	}
	ev := e.request(t, m, "https://other.example.org/ws")
	wantBlocked(t, ev, api.NetHTTP, policy.ReasonSecretLeak)
	if ev.StatusCode != 101 {
		t.Errorf("event status %d, want 101 (the block came after the upgrade)", ev.StatusCode)
	}
	for _, r := range e.w.Requests(testnet.Other) {
		b, _ := json.Marshal(r)
		if len(r.Messages) > 0 || strings.Contains(string(b), ph) || strings.Contains(string(b), value) {
			t.Errorf("other.example.org got %s", b)
		}
	}
}

// TestAllowedStreaming proves that responses stream through the
// interceptor: curl -N prints the first server-sent event of /hold
// while the server still holds the stream open (it is released only
// once the sandbox has printed that line, so a buffered response would
// hang), over HTTP/2 and HTTP/1.1; /sse events and chunked bodies come
// whole.
func TestAllowedStreaming(t *testing.T) {
	e := start(t)
	sb := e.box(t, e.network(testnet.API))
	for _, proto := range []string{"--http2", "--http1.1"} {
		t.Run(proto, func(t *testing.T) {
			m := e.mark()
			s := startStream(t, sb, "curl -sS -N "+proto+" https://api.example.com/hold", false)
			if l := s.line(t); l != "data: held" {
				t.Fatalf("first line %q, want the first event", l)
			}
			if n := e.w.Release(); n != 1 {
				t.Errorf("released %d held streams, want 1 (the server was still holding)", n)
			}
			rest, res := s.wait(t)
			if res.ExitCode != 0 || !strings.Contains(rest, "data: released") {
				t.Errorf("after the release: exit %d, %q", res.ExitCode, rest)
			}
			e.allowed(t, m, "GET", "https://api.example.com/hold", testnet.API, 200)
		})
	}

	if out := ok(t, sb, "curl -sS -N 'https://api.example.com/sse?n=3&gap_ms=10'"); out != "data: 1\n\ndata: 2\n\ndata: 3\n\n" {
		t.Errorf("sse: %q", out)
	}
	m := e.mark()
	out := ok(t, sb, "curl -sS --http1.1 -D - 'https://api.example.com/chunked?n=5'")
	if !strings.Contains(strings.ToLower(out), "transfer-encoding: chunked") || !strings.HasSuffix(out, "chunk 1\nchunk 2\nchunk 3\nchunk 4\nchunk 5\n") {
		t.Errorf("chunked:\n%s", out)
	}
	if ev := e.allowed(t, m, "GET", "https://api.example.com/chunked?n=5", testnet.API, 200); ev.ResponseBytes != 40 {
		t.Errorf("chunked: response_bytes %d, want 40", ev.ResponseBytes)
	}
}

// TestRuntimePolicyUpdate proves that the hosts of a running sandbox
// can change: AllowHost makes a name resolvable and reachable;
// RemoveHost and DenyHost block it again, for new DNS questions, for new
// connections to an address already pinned, and for the next request
// on a connection already open.
func TestRuntimePolicyUpdate(t *testing.T) {
	e := start(t)
	sb := e.box(t, e.network(testnet.API))
	tool(t, sb, "resolve api.example.com 4")

	m := e.mark()
	fails(t, sb, "curl -sS --max-time 10 https://other.example.org/")
	e.blockedDNS(t, m, testnet.Other, "A", policy.ReasonHostNotAllowed)

	if err := sb.AllowHost(testnet.Other); err != nil {
		t.Fatal(err)
	}
	m = e.mark()
	if out := ok(t, sb, "curl -sS --max-time 10 https://other.example.org/"); out != "hello from other.example.org\n" {
		t.Errorf("after AllowHost: %q", out)
	}
	e.allowed(t, m, "GET", "https://other.example.org/", testnet.Other, 200)

	if err := sb.RemoveHost(testnet.Other); err != nil {
		t.Fatal(err)
	}
	if allowed, _, _ := sb.Hosts(); len(allowed) != 1 || allowed[0] != testnet.API {
		t.Errorf("allowed hosts after RemoveHost: %v", allowed)
	}
	m = e.mark()
	fails(t, sb, "curl -sS --max-time 10 https://other.example.org/")
	e.blockedDNS(t, m, testnet.Other, "A", policy.ReasonHostNotAllowed)
	// The address is still pinned to the name, which is no longer
	// allowed: the connection is refused, and the event says why.
	m = e.mark()
	fails(t, sb, "curl -sS --max-time 10 --resolve other.example.org:443:203.0.113.11 https://other.example.org/")
	if ev := e.blocked(t, m, api.NetTCP, policy.ReasonHostNotAllowed, testnet.OtherAddr, 443); ev.Host != testnet.Other {
		t.Errorf("event host %q, want %s", ev.Host, testnet.Other)
	}
	if n := len(e.w.Requests(testnet.Other)); n != 1 {
		t.Errorf("other.example.org got %d requests, want 1", n)
	}

	// A connection open before DenyHost: its next request is refused.
	s := startStream(t, sb, "python3 "+toolPath+" keepalive api.example.com /echo", true)
	if l := s.line(t); l != "request 1: 200 None" {
		t.Fatalf("first request: %q", l)
	}
	if err := sb.DenyHost(testnet.API); err != nil {
		t.Fatal(err)
	}
	if err := s.p.WriteStdin([]byte("\n")); err != nil {
		t.Fatal(err)
	}
	if l := s.line(t); l != "request 2: 403 "+policy.ReasonHostDenied {
		t.Errorf("second request on the same connection: %q, want 403 %s", l, policy.ReasonHostDenied)
	}
	s.wait(t)
	m = e.mark()
	fails(t, sb, "curl -sS --max-time 10 https://api.example.com/")
	e.blockedDNS(t, m, testnet.API, "A", policy.ReasonHostDenied)
	m = e.mark()
	fails(t, sb, "curl -sS --max-time 10 --resolve api.example.com:443:203.0.113.10 https://api.example.com/")
	e.blocked(t, m, api.NetTCP, policy.ReasonHostDenied, testnet.APIAddr, 443)
	if n := len(e.w.Requests(testnet.API)); n != 1 {
		t.Errorf("api.example.com got %d requests, want 1", n)
	}
}

// TestEgressRuleTCPServerFirst proves that an egress rule lets a
// protocol that is neither HTTP nor TLS through to a name's address,
// including one where the server speaks first (the echo server's
// banner), and that without the rule the same connection is refused
// (the name is allowed, on ports 80 and 443: the refusal says how to
// open the port, to HTTP and TLS or by an egress rule).
func TestEgressRuleTCPServerFirst(t *testing.T) {
	e := start(t)
	sb := e.box(t, e.network(testnet.API))
	tool(t, sb, "resolve api.example.com 4")
	m := e.mark()
	if out := tool(t, sb, "tcp 203.0.113.10 2222 ping"); !strings.HasPrefix(out, "connect:") {
		t.Errorf("without a rule: %q, want the connection refused", out)
	}
	ev := e.blocked(t, m, api.NetTCP, policy.ReasonPortNotAllowed, testnet.APIAddr, testnet.PortEcho)
	if !strings.Contains(ev.Reason, "--egress api.example.com:2222") {
		t.Errorf("reason %q does not name the egress rule that would allow it", ev.Reason)
	}
	e.unreached(t, "api.example.com:2222")

	n := e.network(testnet.API)
	n.Egress = []policy.EgressRule{{Destination: testnet.API, Ports: []uint16{testnet.PortEcho}}}
	sb = e.box(t, n)
	tool(t, sb, "resolve api.example.com 4")
	m = e.mark()
	out := tool(t, sb, "tcp 203.0.113.10 2222 ping banner")
	if want := "banner: 'ECHO ready\\n'\necho: 'ping'"; out != want {
		t.Errorf("with a rule: %q, want %q", out, want)
	}
	if n := e.w.Reached("203.0.113.10:2222"); n != 1 {
		t.Errorf("the echo server got %d connections, want 1", n)
	}
	ev = e.since(t, m, "tcp to 203.0.113.10:2222", func(ev api.NetworkEvent) bool {
		return ev.Kind == api.NetTCP && ev.IP == testnet.APIAddr && ev.Port == testnet.PortEcho
	})
	if ev.Blocked || ev.Host != testnet.API || ev.RequestBytes != 4 || ev.ResponseBytes != int64(len(testnet.EchoBanner)+4) {
		t.Errorf("tcp event %+v, want allowed, 4 bytes up, banner and 4 bytes down", ev)
	}
}

// TestPolicyScriptBlocksPaths proves that a Starlark on_request that
// returns None blocks the request (403, script_blocked) before it
// leaves, and lets the others through.
func TestPolicyScriptBlocksPaths(t *testing.T) {
	e := start(t)
	n := e.network(testnet.API)
	n.PolicyScript = `
def on_request(req):
    rest = req.url.split("://", 1)[1]
    i = rest.find("/")
    path = rest[i:] if i >= 0 else "/"
    if path.startswith("/status"):
        return None
    return req
`
	sb := e.box(t, n)
	m := e.mark()
	out := strings.ToLower(ok(t, sb, "curl -sS -D - https://api.example.com/status/200"))
	if !strings.Contains(out, " 403") || !strings.Contains(out, "x-airlock-blocked: "+policy.ReasonScriptBlocked) {
		t.Errorf("/status/200:\n%s\nwant 403 with script_blocked", out)
	}
	ev := e.request(t, m, "https://api.example.com/status/200")
	wantBlocked(t, ev, api.NetHTTP, policy.ReasonScriptBlocked)

	m = e.mark()
	ok(t, sb, "curl -sS https://api.example.com/echo")
	e.allowed(t, m, "GET", "https://api.example.com/echo", testnet.API, 200)
	for _, r := range e.w.Requests(testnet.API) {
		if strings.HasPrefix(r.Path, "/status") {
			t.Errorf("api.example.com got %s", r.URI)
		}
	}
}

// TestGoOnRequestHook proves that a Go OnRequest hook runs on every
// request: a header it adds arrives upstream, it sees the secret's
// placeholder (the value is put in after it), and returning nil blocks
// (hook_blocked).
func TestGoOnRequestHook(t *testing.T) {
	e := start(t)
	n, value := secretNetwork(e, false)
	var mu sync.Mutex
	var seen []string
	hook := func(_ context.Context, req *policy.Request) (*policy.Request, error) {
		mu.Lock()
		seen = append(seen, req.Header.Get("X-Api-Key"))
		mu.Unlock()
		if strings.HasSuffix(req.URL, "/status/418") {
			return nil, nil
		}
		req.Header.Set("X-Added-By-Hook", "yes")
		return req, nil
	}
	sb := e.box(t, n, func(c *airlock.Config) { c.OnRequest = hook })
	ph := placeholder(t, sb)

	m := e.mark()
	ok(t, sb, `curl -sS -o /dev/null -H "X-Api-Key: $API_KEY" https://api.example.com/echo`)
	e.allowed(t, m, "GET", "https://api.example.com/echo", testnet.API, 200)
	req, _ := e.w.LastRequest(testnet.API)
	if req.Header.Get("X-Added-By-Hook") != "yes" || req.Header.Get("X-Api-Key") != value {
		t.Errorf("api.example.com got X-Added-By-Hook %q and X-Api-Key %q", req.Header.Get("X-Added-By-Hook"), req.Header.Get("X-Api-Key"))
	}
	mu.Lock()
	if len(seen) != 1 || seen[0] != ph {
		t.Errorf("the hook saw X-Api-Key %q, want the placeholder", seen)
	}
	mu.Unlock()

	m = e.mark()
	if out := ok(t, sb, "curl -sS -o /dev/null -w '%{http_code}' https://api.example.com/status/418"); out != "403" {
		t.Errorf("/status/418: %s, want 403", out)
	}
	wantBlocked(t, e.request(t, m, "https://api.example.com/status/418"), api.NetHTTP, policy.ReasonHookBlocked)
	if n := len(e.w.Requests(testnet.API)); n != 1 {
		t.Errorf("api.example.com got %d requests, want 1", n)
	}
}

// TestIPv6AllowedHost proves that an allowed name is reached over IPv6
// as over IPv4, with the IPv6 destination in the event.
func TestIPv6AllowedHost(t *testing.T) {
	e := start(t)
	sb := e.box(t, e.network(testnet.API))
	for _, c := range []struct{ url, server string }{
		{"https://api.example.com/echo", "[2001:db8:77::10]:443"},
		{"http://api.example.com/echo", "[2001:db8:77::10]:80"},
	} {
		m := e.mark()
		if echo := echoOf(t, ok(t, sb, "curl -6 -sS --max-time 10 "+c.url)); echo.Server != c.server {
			t.Errorf("%s over IPv6: the server saw %+v", c.url, echo)
		}
		if ev := e.allowed(t, m, "GET", c.url, testnet.API, 200); ev.IP != testnet.APIAddr6 {
			t.Errorf("%s over IPv6: event IP %s, want %s", c.url, ev.IP, testnet.APIAddr6)
		}
	}
}
