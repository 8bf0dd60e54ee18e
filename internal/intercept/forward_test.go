package intercept

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/policy"
)

// TestForwardTLS sends GET and POST through TLS with every combination
// of HTTP/1.1 and HTTP/2 on the sandbox side and upstream, and checks
// what upstream saw and the events.
func TestForwardTLS(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		clientH2, upstreamH2 bool
	}{
		{"h1-h1", false, false},
		{"h1-h2", false, true},
		{"h2-h1", true, false},
		{"h2-h2", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{upstreamH2: tc.upstreamH2})
			c := h.client(tc.clientH2)
			wantClient, wantUp := "HTTP/1.1", "HTTP/1.1"
			if tc.clientH2 {
				wantClient = "HTTP/2.0"
			}
			if tc.upstreamH2 {
				wantUp = "HTTP/2.0"
			}

			resp, body := do(t, c, newRequest(t, "GET", h.url("/v1/models?x=1"), nil))
			if resp.StatusCode != 200 || resp.Proto != wantClient {
				t.Fatalf("GET: %s %s, want 200 over %s", resp.Proto, resp.Status, wantClient)
			}
			s := decodeSeen(t, body)
			if s.Method != "GET" || s.URI != "/v1/models?x=1" || s.Proto != wantUp {
				t.Errorf("upstream saw %+v", s)
			}
			if want := apiHost + ":" + fmt.Sprint(h.dst.Port()); s.Host != want {
				t.Errorf("upstream Host %q, want %q", s.Host, want)
			}
			ev := h.event()
			want := api.NetworkEvent{
				Kind: api.NetHTTP, Method: "GET", URL: h.url("/v1/models?x=1"), Host: apiHost,
				IP: "203.0.113.10", Port: h.dst.Port(), Proto: "tcp", StatusCode: 200,
				ResponseBytes: int64(len(body)), DurationMs: ev.DurationMs,
			}
			if !eventEqual(ev, want) {
				t.Errorf("event\n %+v, want\n %+v", ev, want)
			}

			payload := strings.Repeat("hello ", 1000)
			resp, body = do(t, c, newRequest(t, "POST", h.url("/v1/chat"), strings.NewReader(payload)))
			if resp.StatusCode != 200 {
				t.Fatalf("POST: %s", resp.Status)
			}
			if s := decodeSeen(t, body); s.Body != payload || s.Method != "POST" {
				t.Errorf("upstream got %s with a body of %d bytes", s.Method, len(s.Body))
			}
			ev = h.event()
			if ev.RequestBytes != int64(len(payload)) || ev.ResponseBytes != int64(len(body)) || ev.StatusCode != 200 || ev.Blocked {
				t.Errorf("POST event %+v", ev)
			}
			if got := h.dials.Load(); got != 1 {
				t.Errorf("%d upstream dials for two requests on one connection, want 1", got)
			}
			if got := <-h.dialDst; got != h.dst {
				t.Errorf("dialled %s, want the sandbox's destination %s", got, h.dst)
			}
			h.noMoreEvents()
		})
	}
}

func eventEqual(a, b api.NetworkEvent) bool {
	return fmt.Sprintf("%+v", a) == fmt.Sprintf("%+v", b)
}

// TestForwardPlain sends plain HTTP/1.1 and HTTP/2 with prior knowledge.
func TestForwardPlain(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("h2=%v", h2), func(t *testing.T) {
			h := newHarness(t, harnessConfig{plain: true})
			c := h.client(h2)
			resp, body := do(t, c, newRequest(t, "POST", h.hostURL(otherHost, "/p?q=1"), strings.NewReader("data")))
			if resp.StatusCode != 200 {
				t.Fatalf("%s: %s", resp.Status, body)
			}
			if h2 != (resp.ProtoMajor == 2) {
				t.Errorf("answered over %s", resp.Proto)
			}
			s := decodeSeen(t, body)
			if s.Body != "data" || s.URI != "/p?q=1" || !strings.HasPrefix(s.Host, otherHost) || s.Proto != "HTTP/1.1" {
				t.Errorf("upstream saw %+v", s)
			}
			ev := h.event()
			if ev.URL != h.hostURL(otherHost, "/p?q=1") || ev.Host != otherHost || ev.StatusCode != 200 || ev.RequestBytes != 4 {
				t.Errorf("event %+v", ev)
			}
			h.noMoreEvents()
		})
	}
}

// TestDefaultPortURL: a request without a port in its Host, to a
// destination on the default port, has no port in the URL.
func TestDefaultPortURL(t *testing.T) {
	h := newHarness(t, harnessConfig{plain: true, dstPort: 80})
	resp, body := do(t, h.client(false), newRequest(t, "GET", "http://"+apiHost+"/x", nil))
	if resp.StatusCode != 200 {
		t.Fatalf("%s: %s", resp.Status, body)
	}
	if s := decodeSeen(t, body); s.Host != apiHost {
		t.Errorf("upstream Host %q, want %q", s.Host, apiHost)
	}
	if ev := h.event(); ev.URL != "http://"+apiHost+"/x" {
		t.Errorf("event URL %q", ev.URL)
	}
}

// TestHostRules checks the authority rules on both kinds of connection.
func TestHostRules(t *testing.T) {
	t.Run("tls host differs from SNI", func(t *testing.T) {
		for _, h2 := range []bool{false, true} {
			h := newHarness(t, harnessConfig{})
			req := newRequest(t, "GET", h.url("/"), nil)
			req.Host = otherHost // pinned and allowed, but not the SNI: domain fronting
			resp, body := do(t, h.client(h2), req)
			ev := h.checkBlocked(resp, body, http.StatusMisdirectedRequest, policy.ReasonHostMismatch)
			if ev.Host != otherHost || ev.IP != "203.0.113.10" {
				t.Errorf("event %+v", ev)
			}
			if h.dials.Load() != 0 || h.started.Load() != 0 {
				t.Error("upstream was contacted")
			}
		}
	})
	t.Run("wrong port", func(t *testing.T) {
		h := newHarness(t, harnessConfig{})
		req := newRequest(t, "GET", h.url("/"), nil)
		req.Host = apiHost + ":8443"
		resp, body := do(t, h.client(false), req)
		h.checkBlocked(resp, body, http.StatusMisdirectedRequest, policy.ReasonHostMismatch)
	})
	t.Run("plain host not pinned", func(t *testing.T) {
		h := newHarness(t, harnessConfig{plain: true, names: []string{apiHost}})
		resp, body := do(t, h.client(false), newRequest(t, "GET", h.hostURL(otherHost, "/"), nil))
		h.checkBlocked(resp, body, http.StatusMisdirectedRequest, policy.ReasonHostMismatch)
		if h.dials.Load() != 0 {
			t.Error("upstream was dialled")
		}
	})
	t.Run("plain host pinned but not allowed", func(t *testing.T) {
		h := newHarness(t, harnessConfig{plain: true, names: []string{apiHost, "evil.example.net"}})
		resp, body := do(t, h.client(false), newRequest(t, "GET", h.hostURL("evil.example.net", "/"), nil))
		h.checkBlocked(resp, body, http.StatusForbidden, policy.ReasonHostNotAllowed)
	})
	t.Run("address as host", func(t *testing.T) {
		h := newHarness(t, harnessConfig{plain: true})
		resp, body := do(t, h.client(false), newRequest(t, "GET", "http://203.0.113.10:"+fmt.Sprint(h.dst.Port())+"/", nil))
		h.checkBlocked(resp, body, http.StatusBadRequest, policy.ReasonInvalidHost)
	})
	t.Run("denied while connected", func(t *testing.T) {
		h := newHarness(t, harnessConfig{})
		c := h.client(false)
		if resp, _ := do(t, c, newRequest(t, "GET", h.url("/"), nil)); resp.StatusCode != 200 {
			t.Fatalf("first request: %s", resp.Status)
		}
		h.event()
		if err := h.policy.DenyHost(apiHost); err != nil {
			t.Fatal(err)
		}
		resp, body := do(t, c, newRequest(t, "GET", h.url("/"), nil))
		h.checkBlocked(resp, body, http.StatusForbidden, policy.ReasonHostDenied)
		if h.dials.Load() != 1 {
			t.Errorf("%d dials, want 1 (one connection)", h.dials.Load())
		}
	})
}

// rawExchange writes a raw request on a new plain connection to the
// harness and reads one response.
func rawExchange(t *testing.T, h *harness, request string) (*http.Response, []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", h.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, request); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading the answer to %q: %v", request, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

// TestProxyForms: CONNECT is refused; an absolute-form request is judged
// by its URI's host.
func TestProxyForms(t *testing.T) {
	h := newHarness(t, harnessConfig{plain: true, names: []string{apiHost}})
	port := fmt.Sprint(h.dst.Port())

	resp, body := rawExchange(t, h, "CONNECT "+apiHost+":443 HTTP/1.1\r\nHost: "+apiHost+":443\r\n\r\n")
	h.checkBlocked(resp, body, http.StatusMethodNotAllowed, policy.ReasonProxyRequest)

	resp, body = rawExchange(t, h, "GET http://"+otherHost+":"+port+"/x HTTP/1.1\r\nHost: "+apiHost+"\r\n\r\n")
	h.checkBlocked(resp, body, http.StatusMisdirectedRequest, policy.ReasonHostMismatch)

	resp, body = rawExchange(t, h, "GET https://"+apiHost+":"+port+"/x HTTP/1.1\r\nHost: "+apiHost+"\r\n\r\n")
	h.checkBlocked(resp, body, http.StatusMisdirectedRequest, policy.ReasonHostMismatch)

	resp, body = rawExchange(t, h, "GET http://"+apiHost+":"+port+"/abs?key=1 HTTP/1.1\r\nHost: "+apiHost+"\r\n\r\n")
	if resp.StatusCode != 200 {
		t.Fatalf("absolute form to a pinned host: %s %s", resp.Status, body)
	}
	if s := decodeSeen(t, body); s.URI != "/abs?key=1" {
		t.Errorf("upstream got %q, want the origin form", s.URI)
	}
	h.event()

	resp, body = rawExchange(t, h, "OPTIONS * HTTP/1.1\r\nHost: "+apiHost+"\r\n\r\n")
	h.checkBlocked(resp, body, http.StatusBadRequest, policy.ReasonBadRequest)
	h.noMoreEvents()
	if h.started.Load() != 1 {
		t.Errorf("upstream got %d requests, want 1", h.started.Load())
	}
}

// TestUpstreamErrors: an upstream that cannot be reached is a 502 that is
// not a block; a dial refused by the policy is a block.
func TestUpstreamErrors(t *testing.T) {
	t.Run("unreachable", func(t *testing.T) {
		h := newHarness(t, harnessConfig{dial: func(ctx context.Context, _ netip.AddrPort, _ []string) (net.Conn, error) {
			return nil, errors.New("connection refused (test)")
		}})
		resp, body := do(t, h.client(false), newRequest(t, "GET", h.url("/"), nil))
		if resp.StatusCode != http.StatusBadGateway || resp.Header.Get("X-Airlock-Error") != policy.ReasonUpstreamError {
			t.Errorf("%s %v %q", resp.Status, resp.Header, body)
		}
		if ev := h.event(); ev.Blocked || ev.StatusCode != 502 || policy.ReasonCode(ev.Reason) != policy.ReasonUpstreamError {
			t.Errorf("event %+v", ev)
		}
	})
	t.Run("upstream certificate for another name", func(t *testing.T) {
		h := newHarness(t, harnessConfig{upstreamCert: "impostor.example.net"})
		resp, body := do(t, h.client(false), newRequest(t, "GET", h.url("/"), nil))
		if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(body), "certificate") {
			t.Errorf("%s %q", resp.Status, body)
		}
		if ev := h.event(); ev.Blocked || policy.ReasonCode(ev.Reason) != policy.ReasonUpstreamError {
			t.Errorf("event %+v", ev)
		}
		if h.started.Load() != 0 {
			t.Error("the request reached an upstream that is not the host")
		}
	})
	t.Run("dial blocked", func(t *testing.T) {
		h := newHarness(t, harnessConfig{dial: func(ctx context.Context, dst netip.AddrPort, _ []string) (net.Conn, error) {
			return nil, fmt.Errorf("refusing to dial %s: %w", dst, &policy.BlockError{Reason: policy.ReasonBlockedIP, Detail: "test"})
		}})
		resp, body := do(t, h.client(true), newRequest(t, "GET", h.url("/"), nil))
		h.checkBlocked(resp, body, http.StatusForbidden, policy.ReasonBlockedIP)
	})
}

// TestClose: Close ends connections being served, idle or not, and a
// connection served after Close is closed at once.
func TestClose(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	c := h.client(false)
	if resp, _ := do(t, c, newRequest(t, "GET", h.url("/"), nil)); resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	h.event()
	h.close() // waits for every ServeTLS to return, the idle keep-alive connection's too

	a, b := net.Pipe()
	done := make(chan struct{})
	go func() {
		h.ic.ServeTLS(context.Background(), a, h.dst, h.names)
		close(done)
	}()
	<-done
	if _, err := b.Write([]byte{0x16}); err == nil {
		t.Error("the connection is still open after Close")
	}
}

// TestContextCancel: cancelling ServeTLS's context ends the connection.
func TestContextCancel(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	a, b := net.Pipe()
	defer b.Close()
	done := make(chan struct{})
	go func() {
		h.ic.ServeTLS(ctx, a, h.dst, h.names)
		close(done)
	}()
	cancel()
	<-done
}

// TestUpgradeOtherThanWebSocket: an h2c upgrade, which would carry
// further requests past every check, is not passed on: the request goes
// as plain HTTP/1.1.
func TestUpgradeOtherThanWebSocket(t *testing.T) {
	h := newHarness(t, harnessConfig{plain: true})
	resp, body := rawExchange(t, h, "GET /up HTTP/1.1\r\nHost: "+apiHost+"\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n")
	if resp.StatusCode != 200 {
		t.Fatalf("%s %s", resp.Status, body)
	}
	s := decodeSeen(t, body)
	if s.Header.Get("Upgrade") != "" || s.Header.Get("Http2-Settings") != "" || s.Header.Get("Connection") != "" {
		t.Errorf("upstream got the upgrade: %v", s.Header)
	}
	if ev := h.event(); ev.StatusCode != 200 {
		t.Errorf("event %+v", ev)
	}
}

// TestPassThrough: Accept-Encoding and a compressed response pass as
// they are, and no proxy from the environment is used.
func TestPassThrough(t *testing.T) {
	t.Setenv("HTTPS_PROXY", "http://127.0.0.1:1")
	t.Setenv("HTTP_PROXY", "http://127.0.0.1:1")
	gz := []byte("\x1f\x8b not really gzip, but opaque")
	h := newHarness(t, harnessConfig{handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set("X-Accept-Encoding", r.Header.Get("Accept-Encoding"))
		w.Write(gz)
	})})
	req := newRequest(t, "GET", h.url("/"), nil)
	req.Header.Set("Accept-Encoding", "gzip, br")
	resp, body := do(t, h.client(true), req)
	if resp.StatusCode != 200 || string(body) != string(gz) || resp.Header.Get("Content-Encoding") != "gzip" {
		t.Errorf("%s %v %q", resp.Status, resp.Header, body)
	}
	if got := resp.Header.Get("X-Accept-Encoding"); got != "gzip, br" {
		t.Errorf("upstream got Accept-Encoding %q", got)
	}
}
