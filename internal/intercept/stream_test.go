package intercept

import (
	"bufio"
	"crypto/rand"
	"crypto/sha1"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/policy"
)

// holdingHandler sends a first part, then holds the response open until
// release is closed, then sends the rest.
func holdingHandler(contentType, first, rest string, release <-chan struct{}) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", contentType)
		io.WriteString(w, first)
		http.NewResponseController(w).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, rest)
	}
}

// TestStreaming: the sandbox gets the first part of a server-sent event
// stream, or of a chunked body, while the server still holds the
// response open. Were anything buffered, the first read would wait for
// the release, which comes only after it: the test would hang (and fail
// at the client's timeout).
func TestStreaming(t *testing.T) {
	for _, tc := range []struct {
		name, contentType, first, rest string
	}{
		{"sse", "text/event-stream", "data: first\n\n", "data: second\n\n"},
		{"chunked", "application/octet-stream", "part one;", "part two"},
	} {
		for _, h2 := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/h2=%v", tc.name, h2), func(t *testing.T) {
				release := make(chan struct{})
				h := newHarness(t, harnessConfig{handler: holdingHandler(tc.contentType, tc.first, tc.rest, release), upstreamH2: h2})
				resp, err := h.client(h2).Do(newRequest(t, "GET", h.url("/stream"), nil))
				if err != nil {
					close(release)
					t.Fatal(err)
				}
				defer resp.Body.Close()
				got := make([]byte, len(tc.first))
				if _, err := io.ReadFull(resp.Body, got); err != nil || string(got) != tc.first {
					close(release)
					t.Fatalf("first part %q, %v", got, err)
				}
				close(release)
				rest, err := io.ReadAll(resp.Body)
				if err != nil || string(rest) != tc.rest {
					t.Fatalf("rest %q, %v", rest, err)
				}
				ev := h.event()
				if ev.ResponseBytes != int64(len(tc.first)+len(tc.rest)) || ev.StatusCode != 200 {
					t.Errorf("event %+v", ev)
				}
			})
		}
	}
}

// wsAccept computes Sec-WebSocket-Accept (RFC 6455 section 4.2.2).
func wsAccept(key string) string {
	sum := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	return base64.StdEncoding.EncodeToString(sum[:])
}

// writeFrame writes one final text frame (payload < 126 bytes), masked
// when it goes from a client.
func writeFrame(w io.Writer, payload string, masked bool) error {
	if len(payload) >= 126 {
		return errors.New("payload too long for this test")
	}
	frame := []byte{0x81, byte(len(payload))}
	p := []byte(payload)
	if masked {
		frame[1] |= 0x80
		var key [4]byte
		rand.Read(key[:])
		frame = append(frame, key[:]...)
		for i := range p {
			p[i] ^= key[i%4]
		}
	}
	_, err := w.Write(append(frame, p...))
	return err
}

// readFrame reads one frame with a payload < 126 bytes and returns its
// opcode and payload, unmasked.
func readFrame(r io.Reader) (byte, string, error) {
	var hdr [2]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, "", err
	}
	n := int(hdr[1] & 0x7f)
	if n >= 126 {
		return 0, "", fmt.Errorf("length %d: too long for this test", n)
	}
	var key [4]byte
	if hdr[1]&0x80 != 0 {
		if _, err := io.ReadFull(r, key[:]); err != nil {
			return 0, "", err
		}
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r, p); err != nil {
		return 0, "", err
	}
	for i := range p {
		p[i] ^= key[i%4]
	}
	return hdr[0] & 0x0f, string(p), nil
}

// wsServer accepts a WebSocket upgrade, greets, then echoes text frames
// until a close frame.
func wsServer(t *testing.T) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
			http.Error(w, "not an upgrade", http.StatusBadRequest)
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		defer conn.Close()
		fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\nX-Auth-Seen: %s\r\n\r\n", wsAccept(r.Header.Get("Sec-WebSocket-Key")), hide(r.Header.Get("Authorization")))
		writeFrame(brw, "hello from upstream", false)
		brw.Flush()
		for {
			op, msg, err := readFrame(brw)
			if err != nil || op == 0x8 {
				return
			}
			writeFrame(brw, "echo: "+msg, false)
			brw.Flush()
		}
	}
}

// TestWebSocket: an upgrade passes the same checks (the secret in its
// header is substituted, and blocked at another host), then frames go
// both ways through the spliced connection.
func TestWebSocket(t *testing.T) {
	for _, plain := range []bool{false, true} {
		t.Run(fmt.Sprintf("plain=%v", plain), func(t *testing.T) {
			h := newHarness(t, harnessConfig{policy: secretConfig(), plain: plain, handler: wsServer(t), upstreamH2: true})
			ph := h.placeholder()
			dial := func(host string) net.Conn {
				if plain {
					conn, err := net.Dial("tcp", h.ln.Addr().String())
					if err != nil {
						t.Fatal(err)
					}
					return conn
				}
				conn, err := h.handshake(&tls.Config{ServerName: host, RootCAs: h.pool(), NextProtos: []string{"http/1.1"}})
				if err != nil {
					t.Fatal(err)
				}
				return conn
			}
			upgrade := func(conn net.Conn, host string) (*http.Response, *bufio.Reader) {
				key := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef"))
				fmt.Fprintf(conn, "GET /ws HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\nAuthorization: Bearer %s\r\n\r\n", host, h.dst.Port(), key, ph)
				br := bufio.NewReader(conn)
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatal(err)
				}
				return resp, br
			}

			conn := dial(otherHost)
			resp, _ := upgrade(conn, otherHost)
			body, _ := io.ReadAll(resp.Body)
			h.checkBlocked(resp, body, http.StatusForbidden, policy.ReasonSecretLeak)
			conn.Close()

			conn = dial(apiHost)
			defer conn.Close()
			resp, br := upgrade(conn, apiHost)
			if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Sec-WebSocket-Accept") != wsAccept(base64.StdEncoding.EncodeToString([]byte("0123456789abcdef"))) {
				t.Fatalf("upgrade: %s %v", resp.Status, resp.Header)
			}
			// Hidden, since the responses of the secret's host are
			// scrubbed of its value.
			if got, _ := unhide(resp.Header.Get("X-Auth-Seen")); got != "Bearer "+secretValue {
				t.Errorf("upstream saw Authorization %q", got)
			}
			if op, msg, err := readFrame(br); err != nil || op != 1 || msg != "hello from upstream" {
				t.Fatalf("server frame: %d %q %v", op, msg, err)
			}
			for i := range 3 {
				if err := writeFrame(conn, fmt.Sprintf("ping %d", i), true); err != nil {
					t.Fatal(err)
				}
				if op, msg, err := readFrame(br); err != nil || op != 1 || msg != fmt.Sprintf("echo: ping %d", i) {
					t.Fatalf("echo %d: %d %q %v", i, op, msg, err)
				}
			}
			conn.Write([]byte{0x88, 0x80, 0, 0, 0, 0}) // close, masked, empty
			conn.Close()
			ev := h.event()
			if ev.StatusCode != http.StatusSwitchingProtocols || ev.Blocked || ev.URL != h.url("/ws") {
				t.Errorf("event %+v", ev)
			}
			h.noMoreEvents()
		})
	}
}

// TestConnectOverH2: CONNECT is refused over HTTP/2 too.
func TestConnectOverH2(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	resp, body := do(t, h.client(true), newRequest(t, "CONNECT", h.url(""), nil))
	if resp.ProtoMajor != 2 {
		t.Errorf("answered over %s", resp.Proto)
	}
	h.checkBlocked(resp, body, http.StatusMethodNotAllowed, policy.ReasonProxyRequest)
}
