package egress_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/testnet"
	"github.com/airlock-sandbox/airlock/policy"
)

// halfClosePy sends a request on a raw socket, shuts down its write
// side, and prints everything that comes back until the server closes.
const halfClosePy = `
import socket, ssl, sys
host, port, tls, body = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "tls", sys.argv[4]
s = socket.create_connection((host, port), timeout=20)
if tls:
    s = ssl.create_default_context().wrap_socket(s, server_hostname=host)
req = "POST /echo HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n%s" % (host, len(body), body)
s.sendall(req.encode())
if tls:
    s = s.unwrap()  # close_notify, then the TCP half-close
s.shutdown(socket.SHUT_WR)
out = b""
while True:
    b = s.recv(65536)
    if not b:
        break
    out += b
sys.stdout.write(out.decode())
`

// TestProtocolHalfClose proves that a client that shuts down its write
// side once its request is sent (plain HTTP) gets the upstream's real
// response, and that the request reached the upstream, with one allowed
// event; then the connection ends.
func TestProtocolHalfClose(t *testing.T) {
	e := start(t)
	sb := e.box(t, e.network(testnet.API))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sb.WriteFile(ctx, "/tmp/halfclose.py", []byte(halfClosePy), 0o644); err != nil {
		t.Fatal(err)
	}
	m := e.mark()
	out := ok(t, sb, "python3 /tmp/halfclose.py api.example.com 80 plain half-closed-body")
	if !strings.HasPrefix(out, "HTTP/1.1 200 OK") || !strings.Contains(out, `"body": "half-closed-body"`) {
		t.Errorf("after a half-close: %q, want the upstream's 200 with the echoed body", out)
	}
	if req, found := e.w.LastRequest(testnet.APIAddr + ":80"); !found || string(req.Body) != "half-closed-body" {
		t.Errorf("the upstream got %+v, want the request", req)
	}
	e.allowed(t, m, "POST", "http://api.example.com/echo", testnet.API, 200)
}

// TestProtocolExpectContinue proves that curl sending a body with
// Expect: 100-continue, through the interceptor, to a host whose
// requests are read for secrets (a short body) or streamed (a long one),
// sees one 100 Continue, then the final response.
func TestProtocolExpectContinue(t *testing.T) {
	e := start(t)
	n, _ := secretNetwork(e, false)
	sb := e.box(t, n)
	for _, size := range []int{100, 300000} {
		for _, url := range []string{"http://other.example.org/discard", "https://api.example.com/discard"} {
			out := ok(t, sb, "head -c "+strconv.Itoa(size)+" /dev/zero | curl -sS -v --http1.1 -H 'Expect: 100-continue' --data-binary @- "+url+" 2>&1")
			if c := strings.Count(out, "< HTTP/1.1 100 Continue"); c != 1 {
				t.Errorf("%s, %d bytes: %d 100 Continue, want 1:\n%s", url, size, c, out)
			}
			if !strings.Contains(out, "< HTTP/1.1 200 OK") || !strings.Contains(out, `{"bytes": `+strconv.Itoa(size)+`}`) {
				t.Errorf("%s, %d bytes: no 200 with the body counted:\n%s", url, size, out)
			}
		}
	}
}

// TestProtocolDeflateForms proves that a response with Content-Encoding:
// deflate from a host whose responses are scrubbed reaches the sandbox
// decoded, whether the server wrapped it in zlib or sent it bare.
func TestProtocolDeflateForms(t *testing.T) {
	e := start(t)
	n, _ := secretNetwork(e, false)
	sb := e.box(t, n)
	for _, raw := range []string{"0", "1"} {
		m := e.mark()
		out := ok(t, sb, "curl -sS -D - 'https://api.example.com/deflate?raw="+raw+"&echo=inflated%20fine'")
		if !strings.HasSuffix(out, "\r\n\r\ninflated fine") || strings.Contains(strings.ToLower(out), "content-encoding") {
			t.Errorf("raw=%s: %q, want the body decoded, without Content-Encoding", raw, out)
		}
		e.allowed(t, m, "GET", "https://api.example.com/deflate?raw="+raw+"&echo=inflated%20fine", testnet.API, 200)
	}
}

// TestProtocolUpstreamTimeout proves that an upstream that never begins
// its response gets the sandbox a 504 once the policy's
// response_header_timeout_seconds has passed, with an upstream_error
// event that says timeout.
func TestProtocolUpstreamTimeout(t *testing.T) {
	e := start(t)
	n := e.network(testnet.API)
	n.ResponseHeaderTimeoutSeconds = 1
	sb := e.box(t, n)
	m := e.mark()
	if out := ok(t, sb, "curl -sS -o /dev/null -w '%{http_code}' https://api.example.com/slow"); out != "504" {
		t.Errorf("status %q, want 504", out)
	}
	ev := e.request(t, m, "https://api.example.com/slow")
	if ev.Blocked || policy.ReasonCode(ev.Reason) != policy.ReasonUpstreamError || !strings.Contains(ev.Reason, "timeout") || ev.StatusCode != 504 || ev.Kind != api.NetHTTP {
		t.Errorf("event %+v, want upstream_error with timeout, status 504", ev)
	}
}

// dnsConnsPy opens N TCP connections to the gateway's DNS and keeps
// them until it has counted how many the gateway closed.
const dnsConnsPy = `
import socket, sys, time
n = int(sys.argv[1])
conns = [socket.create_connection(("10.88.0.1", 53), timeout=10) for _ in range(n)]
time.sleep(1)
closed = 0
for c in conns:
    c.setblocking(False)
    try:
        if c.recv(1) == b"":
            closed += 1
    except BlockingIOError:
        pass
    except OSError:
        closed += 1
print(closed)
`

// TestProtocolLimitEvented proves that a sandbox that fills a cap of its
// network (here, the gateway's DNS-over-TCP connections) has the
// refusals reported as limit events, and that a flood of them gives a
// handful of events, not one per refusal.
func TestProtocolLimitEvented(t *testing.T) {
	e := start(t)
	sb := e.box(t, e.network(testnet.API))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sb.WriteFile(ctx, "/tmp/dnsconns.py", []byte(dnsConnsPy), 0o644); err != nil {
		t.Fatal(err)
	}
	m := e.mark()
	out := ok(t, sb, "python3 /tmp/dnsconns.py 116")
	closed, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil || closed < 100 {
		t.Fatalf("closed %q of 116, want at least 100 (the cap is 16)", out)
	}
	ev := e.since(t, m, "dns limit event", func(ev api.NetworkEvent) bool {
		return ev.Kind == api.NetDNS && ev.Blocked && policy.ReasonCode(ev.Reason) == policy.ReasonLimit
	})
	if !strings.Contains(ev.Reason, "DNS-over-TCP") || ev.Proto != "tcp" {
		t.Errorf("limit event %+v", ev)
	}
	n := 0
	for _, ev := range e.events()[m:] {
		if ev.Kind == api.NetDNS && policy.ReasonCode(ev.Reason) == policy.ReasonLimit {
			n++
		}
	}
	if n*10 > closed {
		t.Errorf("%d limit events for %d refusals", n, closed)
	}
}
