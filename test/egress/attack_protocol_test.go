package egress_test

import (
	"context"
	"slices"
	"time"

	"fmt"
	"github.com/airlock-sandbox/airlock"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/testnet"
	"github.com/airlock-sandbox/airlock/policy"
)

// rawTLS is a python program that writes its first argument (with \r\n
// escapes) on a TLS connection to an allowed host, as an attacker who
// writes HTTP by hand would, and prints everything that comes back.
const rawTLS = `import socket, ssl, sys
host, data = sys.argv[1], sys.argv[2].encode().decode("unicode_escape").encode("latin-1")
s = ssl.create_default_context().wrap_socket(socket.create_connection((host, 443), timeout=20), server_hostname=host)
s.sendall(data)
out = b""
try:
    while True:
        b = s.recv(65536)
        if not b:
            break
        out += b
except OSError:
    pass
sys.stdout.write(out.decode("latin-1"))
`

// TestAttackRequestSmuggling writes requests that parsers disagree about
// (Content-Length with Transfer-Encoding, two lengths, a second request
// hidden in a body) on a connection to an allowed host. The interceptor
// parses each request once and writes upstream only what it parsed and
// judged: a request hidden for another host is refused as that host's,
// and the upstream never sees a request without an event.
func TestAttackRequestSmuggling(t *testing.T) {
	e := start(t)
	sb := e.box(t, e.network(testnet.API, testnet.Other))
	if err := sb.WriteFile(ctxT(t), "/tmp/raw.py", []byte(rawTLS), 0o644); err != nil {
		t.Fatal(err)
	}
	raw := func(data string) string {
		return ok(t, sb, "python3 /tmp/raw.py "+testnet.API+" "+shQuote(data))
	}
	hidden := `GET /smuggled HTTP/1.1\r\nHost: ` + testnet.Other + `\r\n\r\n`
	cases := []struct {
		name, data string
	}{
		{"CL.TE", `POST /echo HTTP/1.1\r\nHost: ` + testnet.API + `\r\nContent-Length: ` + fmt.Sprint(5+len(unescape(hidden))) + `\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n0\r\n\r\n` + hidden},
		{"TE.CL", `POST /echo HTTP/1.1\r\nHost: ` + testnet.API + `\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n` + fmt.Sprintf("%x", len(unescape(hidden))) + `\r\n` + hidden + `\r\n0\r\n\r\n`},
		{"two lengths", `POST /echo HTTP/1.1\r\nHost: ` + testnet.API + `\r\nContent-Length: 0\r\nContent-Length: 44\r\nConnection: close\r\n\r\n` + hidden},
		{"TE obfuscated", `POST /echo HTTP/1.1\r\nHost: ` + testnet.API + `\r\nTransfer-Encoding: xchunked\r\nContent-Length: 0\r\nConnection: close\r\n\r\n` + hidden},
		{"pipelined", `GET /echo HTTP/1.1\r\nHost: ` + testnet.API + `\r\n\r\n` + hidden},
		{"space before colon", `GET /echo HTTP/1.1\r\nHost : ` + testnet.Other + `\r\nHost: ` + testnet.API + `\r\nConnection: close\r\n\r\n`},
		{"two hosts", `GET /echo HTTP/1.1\r\nHost: ` + testnet.API + `\r\nHost: ` + testnet.Other + `\r\nConnection: close\r\n\r\n`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := e.mark()
			out := raw(c.data)
			if strings.Contains(out, `"path": "/smuggled"`) {
				t.Errorf("the hidden request got an answer from upstream:\n%s", out)
			}
			for _, ev := range e.events()[m:] {
				if ev.Kind == api.NetHTTP && strings.Contains(ev.URL, "/smuggled") && !ev.Blocked {
					t.Errorf("the hidden request passed: %+v", ev)
				}
			}
		})
	}
	if reqs := e.w.Requests(testnet.Other); len(reqs) != 0 {
		t.Errorf("%s got %d requests through a connection to %s: %+v", testnet.Other, len(reqs), testnet.API, reqs)
	}
	for _, r := range e.w.Requests(testnet.API) {
		if strings.Contains(r.URI, "smuggled") {
			t.Errorf("%s got the hidden request %s %s", testnet.API, r.Method, r.URI)
		}
	}
}

// TestAttackCoalescing sends, on a connection made for one allowed name,
// requests for another name: over HTTP/2 (:authority, as a client that
// coalesces connections would), over HTTP/1.1 (Host), and to a name that
// is not allowed at all. Each is refused as host_mismatch; the other
// host's server is never reached through the first one's connection.
func TestAttackCoalescing(t *testing.T) {
	e := start(t)
	sb := e.box(t, e.network(testnet.API, testnet.Other))
	for _, c := range []struct{ proto, host string }{
		{"--http2", testnet.Other}, {"--http1.1", testnet.Other}, {"--http2", "evil.example.net"}, {"--http2", testnet.API + ".evil.example.net"},
	} {
		m := e.mark()
		out := ok(t, sb, fmt.Sprintf("curl -sS %s --max-time 10 -o /dev/null -w '%%{http_code}' -H 'Host: %s' https://%s/echo", c.proto, c.host, testnet.API))
		if out != "421" && out != "403" && out != "400" {
			t.Errorf("curl %s with Host %s on a connection to %s: status %s, want it refused", c.proto, c.host, testnet.API, out)
		}
		ev := e.since(t, m, "http event", func(ev airlock.NetworkEvent) bool { return ev.Kind == api.NetHTTP })
		wantBlocked(t, ev, api.NetHTTP, policy.ReasonHostMismatch)
	}
	if reqs := e.w.Requests(testnet.Other); len(reqs) != 0 {
		t.Errorf("%s was reached through %s's connection: %+v", testnet.Other, testnet.API, reqs)
	}
	if reqs := e.w.Requests(testnet.API); len(reqs) != 0 {
		t.Errorf("%s got the requests meant for another host: %+v", testnet.API, reqs)
	}
}

// TestAttackTunnelling asks an allowed host's connection to carry
// traffic for another: CONNECT, a proxy's absolute-form request, and an
// upgrade to a protocol the interceptor cannot read (h2c).
func TestAttackTunnelling(t *testing.T) {
	e := start(t)
	sb := e.box(t, e.network(testnet.API))
	for _, c := range []struct {
		name, cmd string
		reasons   []string
	}{
		{"CONNECT", fmt.Sprintf("curl -sS --max-time 10 -p -x http://%s:80 https://%s/", testnet.API, testnet.Other), []string{policy.ReasonProxyRequest}},
		// Absolute form names its host twice; either check refuses it.
		{"absolute form", fmt.Sprintf("curl -sS --max-time 10 -x http://%s:80 http://%s/", testnet.API, testnet.Other), []string{policy.ReasonProxyRequest, policy.ReasonHostMismatch}},
		{"CONNECT over TLS", fmt.Sprintf("curl -sS --max-time 10 -p -x https://%s:443 https://%s/", testnet.API, testnet.Other), []string{policy.ReasonProxyRequest}},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := e.mark()
			res := sh(t, sb, c.cmd)
			if res.ExitCode == 0 && !strings.Contains(string(res.Stdout), "blocked") {
				t.Errorf("%s: exit 0: %s", c.cmd, res.Stdout)
			}
			ev := e.since(t, m, "http event", func(ev airlock.NetworkEvent) bool { return ev.Kind == api.NetHTTP })
			if !ev.Blocked || !slices.Contains(c.reasons, policy.ReasonCode(ev.Reason)) {
				t.Errorf("want a blocked http event with a reason in %v, got %+v", c.reasons, ev)
			}
		})
	}
	m := e.mark()
	out := ok(t, sb, fmt.Sprintf("curl -sS --max-time 10 -o /dev/null -w '%%{http_code}' --http2 http://%s/echo", testnet.API))
	if out != "200" {
		t.Errorf("an h2c upgrade request: status %s, want 200 over HTTP/1.1 (the upgrade refused)", out)
	}
	e.allowed(t, m, "GET", "http://"+testnet.API+"/echo", testnet.API, 200)
	e.unreached(t, testnet.OtherAddr)
}

// TestAttackQUIC sends QUIC (UDP to 443, as HTTP/3 clients do) to an
// allowed host: UDP passes only by an egress rule, so it is dropped and
// evented, and the client is left to fall back to TCP, where the
// interceptor sees it.
func TestAttackQUIC(t *testing.T) {
	e := start(t)
	sb := e.box(t, e.network(testnet.API))
	if out := tool(t, sb, "resolve "+testnet.API+" 4"); out != testnet.APIAddr {
		t.Fatalf("resolve: %q", out)
	}
	m := e.mark()
	tool(t, sb, "udp "+testnet.API+" 443 quic-initial")
	e.blocked(t, m, api.NetUDP, policy.ReasonNoEgressRule, testnet.APIAddr, 443)
	m = e.mark()
	tool(t, sb, "udp "+testnet.APIAddr6+" 443 quic")
	e.blocked(t, m, api.NetUDP, policy.ReasonNoEgressRule, testnet.APIAddr6, 443)
	e.unreached(t, testnet.APIAddr+":443", "["+testnet.APIAddr6+"]:443")
}

// unescape turns the \r\n escapes of a raw request into bytes, to count
// its length as the server will.
func unescape(s string) string { return strings.ReplaceAll(s, `\r\n`, "\r\n") }

// shQuote quotes s for a POSIX shell.
func shQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'"'"'`) + "'" }

// ctxT is a context that ends with the test, at most a minute from now.
func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}
