package intercept

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/policy"
)

// TestHalfClose: a client that shuts down its write side once its
// request is sent (plain HTTP/1.1 with and without a body, and TLS with
// close_notify) gets the upstream's response, and the upstream gets the
// request: the EOF is not taken for a client that went away. Then the
// connection ends.
func TestHalfClose(t *testing.T) {
	for _, c := range []struct {
		name  string
		plain bool
		req   string
	}{
		{"plain GET", true, "GET /get HTTP/1.1\r\nHost: %s\r\n\r\n"},
		{"plain POST", true, "POST /post HTTP/1.1\r\nHost: %s\r\nContent-Length: 5\r\n\r\nhello"},
		{"plain chunked", true, "POST /post HTTP/1.1\r\nHost: %s\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"},
		{"tls GET", false, "GET /get HTTP/1.1\r\nHost: %s\r\n\r\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{plain: c.plain})
			var conn interface {
				net.Conn
				CloseWrite() error
			}
			if c.plain {
				raw, err := net.Dial("tcp", h.ln.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				conn = raw.(*net.TCPConn)
			} else {
				tc, err := h.handshake(&tls.Config{ServerName: apiHost, RootCAs: h.pool(), NextProtos: []string{"http/1.1"}})
				if err != nil {
					t.Fatal(err)
				}
				conn = tc
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(waitLimit))
			fmt.Fprintf(conn, c.req, fmt.Sprintf("%s:%d", apiHost, h.dst.Port()))
			if err := conn.CloseWrite(); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("no response after a half-close: %v", err)
			}
			body, _ := io.ReadAll(resp.Body)
			s := decodeSeen(t, body)
			if resp.StatusCode != 200 || h.completed.Load() != 1 {
				t.Fatalf("%s, upstream completed %d requests, want 200 and 1", resp.Status, h.completed.Load())
			}
			if strings.HasPrefix(c.req, "POST") && s.Body != "hello" {
				t.Errorf("upstream got body %q", s.Body)
			}
			if ev := h.event(); ev.StatusCode != 200 || ev.Blocked || ev.Reason != "" {
				t.Errorf("event %+v", ev)
			}
			// Then the server closes: the client sent all it will.
			if n, err := conn.Read(make([]byte, 1)); n != 0 || err == nil {
				t.Errorf("after the response: read %d, %v; want the connection closed", n, err)
			}
		})
	}
}

// TestExpectContinue: a request with Expect: 100-continue gets exactly
// one 100 Continue, whether the interceptor reads the body before
// sending it (a policy with secrets, a short body) or streams it, and
// also when the upstream sends a 100 Continue of its own; then the
// final response. The expectation is the interceptor's to answer: it
// does not go upstream.
func TestExpectContinue(t *testing.T) {
	for _, c := range []struct {
		name    string
		secrets bool
		eager   bool // the upstream sends 100 Continue unasked
	}{
		{"streamed", false, false},
		{"read for secrets", true, false},
		{"upstream sends 100", true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := harnessConfig{plain: true}
			if c.secrets {
				cfg.policy = secretConfig()
			}
			var h *harness
			if c.eager {
				cfg.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					w.WriteHeader(http.StatusContinue)
					h.echo(w, r)
				})
			}
			h = newHarness(t, cfg)
			conn, err := net.Dial("tcp", h.ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(waitLimit))
			fmt.Fprintf(conn, "POST /post HTTP/1.1\r\nHost: %s:%d\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n", apiHost, h.dst.Port())
			br := bufio.NewReader(conn)
			line, err := br.ReadString('\n')
			if err != nil || !strings.HasPrefix(line, "HTTP/1.1 100 ") {
				t.Fatalf("first line %q, %v; want a 100 Continue", line, err)
			}
			io.WriteString(conn, "hello")
			conn.(*net.TCPConn).CloseWrite()
			rest, _ := io.ReadAll(br)
			if n := strings.Count(string(rest), " 100 Continue"); n != 0 {
				t.Errorf("%d more 100 Continue after the first:\n%s", n, rest)
			}
			resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(strings.TrimPrefix(string(rest), "\r\n"))), nil)
			if err != nil {
				t.Fatalf("the final response: %v\n%q", err, rest)
			}
			body, _ := io.ReadAll(resp.Body)
			if s := decodeSeen(t, body); resp.StatusCode != 200 || s.Body != "hello" || s.Header.Get("Expect") != "" {
				t.Errorf("%s; upstream saw body %q, Expect %q", resp.Status, s.Body, s.Header.Get("Expect"))
			}
			h.event()
		})
	}
}

// TestHalfCloseShortBody: a client that half-closes before its body is
// complete is answered at once with an error, rather than held: the
// rest of the body will never come. No complete request reaches the
// upstream.
func TestHalfCloseShortBody(t *testing.T) {
	h := newHarness(t, harnessConfig{plain: true})
	conn, err := net.Dial("tcp", h.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(waitLimit))
	fmt.Fprintf(conn, "POST /post HTTP/1.1\r\nHost: %s:%d\r\nContent-Length: 100000\r\n\r\nonly this", apiHost, h.dst.Port())
	conn.(*net.TCPConn).CloseWrite()
	out, err := io.ReadAll(conn)
	if err != nil {
		t.Fatalf("reading: %v (%q)", err, out)
	}
	if !strings.HasPrefix(string(out), "HTTP/1.1 400") || h.completed.Load() != 0 {
		t.Errorf("a cut-short body: %q, upstream completed %d requests; want 400 and none", out, h.completed.Load())
	}
	if ev := h.event(); ev.StatusCode != 400 || policy.ReasonCode(ev.Reason) != policy.ReasonBadRequest {
		t.Errorf("event %+v, want 400 bad_request", ev)
	}
}
