package intercept

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/policy"
)

// wsFrame is a frame as the tests' client and server see it, payload
// unmasked.
type wsFrame struct {
	ws.Header
	payload []byte
}

// writeWSFrame writes one frame, masked with a random key when masked.
func writeWSFrame(w io.Writer, f wsFrame, masked bool) error {
	h := f.Header
	h.Length = int64(len(f.payload))
	h.Masked, h.Mask = masked, [4]byte{}
	p := slices.Clone(f.payload)
	if masked {
		rand.Read(h.Mask[:])
		ws.Cipher(p, h.Mask, 0)
	}
	var b bytes.Buffer
	if err := ws.WriteHeader(&b, h); err != nil {
		return err
	}
	b.Write(p)
	_, err := w.Write(b.Bytes())
	return err
}

// readWSFrame reads one frame and unmasks it.
func readWSFrame(r io.Reader) (wsFrame, error) {
	h, err := ws.ReadHeader(r)
	if err != nil {
		return wsFrame{}, err
	}
	if h.Length > 1<<20 {
		return wsFrame{}, fmt.Errorf("a frame of %d bytes", h.Length)
	}
	p := make([]byte, h.Length)
	if _, err := io.ReadFull(r, p); err != nil {
		return wsFrame{}, err
	}
	if h.Masked {
		ws.Cipher(p, h.Mask, 0)
	}
	return wsFrame{h, p}, nil
}

func dataFrame(op ws.OpCode, fin bool, payload string) wsFrame {
	return wsFrame{ws.Header{Fin: fin, OpCode: op}, []byte(payload)}
}

func controlFrame(op ws.OpCode, payload string) wsFrame {
	return wsFrame{ws.Header{Fin: true, OpCode: op}, []byte(payload)}
}

func closeBody(code ws.StatusCode, reason string) string {
	return string(binary.BigEndian.AppendUint16(nil, uint16(code))) + reason
}

// wsUpstream is the upstream WebSocket server of the tests. It records
// the upgrade request's header and every frame it gets, answers each
// message with its echo in two fragments split in the middle (a value
// in it straddles them), each ping with a pong, and a close with a
// close. In raw mode it sends every frame back as it came instead, RSV
// bits and all.
type wsUpstream struct {
	t *testing.T
	// extensions, when set, is the 101's Sec-WebSocket-Extensions.
	extensions string
	// greet is sent right after the 101.
	greet []wsFrame
	raw   bool

	mu       sync.Mutex
	header   http.Header
	frames   []wsFrame
	messages []string
	done     chan struct{} // closed when the connection is over
}

func newWSUpstream(t *testing.T) *wsUpstream {
	return &wsUpstream{t: t, done: make(chan struct{})}
}

func (u *wsUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer close(u.done)
	u.mu.Lock()
	u.header = r.Header.Clone()
	u.mu.Unlock()
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		u.t.Errorf("hijack: %v", err)
		return
	}
	defer conn.Close()
	fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n", wsAccept(r.Header.Get("Sec-WebSocket-Key")))
	if u.extensions != "" {
		fmt.Fprintf(brw, "Sec-WebSocket-Extensions: %s\r\n", u.extensions)
	}
	brw.WriteString("\r\n")
	for _, f := range u.greet {
		writeWSFrame(brw, f, false)
	}
	brw.Flush()
	var msg []byte
	for {
		f, err := readWSFrame(brw)
		if err != nil {
			return
		}
		u.mu.Lock()
		u.frames = append(u.frames, f)
		u.mu.Unlock()
		if u.raw {
			writeWSFrame(conn, f, false)
			continue
		}
		switch {
		case f.OpCode == ws.OpClose:
			writeWSFrame(conn, f, false)
			return
		case f.OpCode == ws.OpPing:
			writeWSFrame(conn, controlFrame(ws.OpPong, string(f.payload)), false)
		case f.OpCode.IsData():
			msg = append(msg, f.payload...)
			if !f.Fin {
				continue
			}
			u.mu.Lock()
			u.messages = append(u.messages, string(msg))
			u.mu.Unlock()
			half := len(msg) / 2
			writeWSFrame(conn, dataFrame(ws.OpText, false, string(msg[:half])), false)
			writeWSFrame(conn, dataFrame(ws.OpContinuation, true, string(msg[half:])), false)
			msg = nil
		}
	}
}

// got returns what the server received: the header, the whole messages
// and every frame.
func (u *wsUpstream) got() (http.Header, []string, []wsFrame) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.header, slices.Clone(u.messages), slices.Clone(u.frames)
}

// wait waits until the server's connection is over.
func (u *wsUpstream) wait() {
	u.t.Helper()
	select {
	case <-u.done:
	case <-time.After(waitLimit):
		u.t.Fatal("the upstream WebSocket is still open")
	}
}

// wsClient is the sandbox's side of a WebSocket.
type wsClient struct {
	t    *testing.T
	conn net.Conn
	br   *bufio.Reader
}

// wsDial connects to the interceptor as host and sends the upgrade
// request, with the extra header lines given; it returns the response.
func (h *harness) wsDial(t *testing.T, host string, extra ...string) (*wsClient, *http.Response) {
	t.Helper()
	var conn net.Conn
	if h.cfg.plain {
		c, err := net.Dial("tcp", h.ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conn = c
	} else {
		c, err := h.handshake(&tls.Config{ServerName: host, RootCAs: h.pool(), NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		conn = c
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(waitLimit))
	key := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef"))
	req := fmt.Sprintf("GET /ws HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n", host, h.dst.Port(), key)
	for _, l := range extra {
		req += l + "\r\n"
	}
	if _, err := io.WriteString(conn, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &wsClient{t: t, conn: conn, br: br}, resp
}

// upgrade is wsDial that wants a 101.
func (h *harness) upgrade(t *testing.T, host string, extra ...string) *wsClient {
	t.Helper()
	c, resp := h.wsDial(t, host, extra...)
	if resp.StatusCode != http.StatusSwitchingProtocols {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("upgrade: %s %q", resp.Status, body)
	}
	return c
}

func (c *wsClient) send(frames ...wsFrame) {
	c.t.Helper()
	for _, f := range frames {
		if err := writeWSFrame(c.conn, f, true); err != nil {
			c.t.Fatal(err)
		}
	}
}

// recv reads frames until it has a whole message or a control frame,
// which it returns with the frames it came in.
func (c *wsClient) recv() (ws.OpCode, string, []wsFrame) {
	c.t.Helper()
	var frames []wsFrame
	var msg []byte
	var op ws.OpCode
	for {
		f, err := readWSFrame(c.br)
		if err != nil {
			c.t.Fatalf("reading a frame: %v", err)
		}
		if f.Masked || f.Rsv != 0 && !f.OpCode.IsData() {
			c.t.Errorf("frame from the interceptor: %+v", f.Header)
		}
		if f.OpCode.IsControl() {
			return f.OpCode, string(f.payload), []wsFrame{f}
		}
		frames = append(frames, f)
		if f.OpCode != ws.OpContinuation {
			op = f.OpCode
		}
		msg = append(msg, f.payload...)
		if f.Fin {
			return op, string(msg), frames
		}
	}
}

// closed checks that the connection ends after a close frame with code
// and a reason that begins with reason (code 0: an empty close frame),
// then closes it.
func (c *wsClient) closed(code ws.StatusCode, reason string) {
	c.t.Helper()
	op, p, _ := c.recv()
	switch {
	case op != ws.OpClose:
		c.t.Errorf("got opcode %d %q, want a close frame", op, p)
	case code == 0:
		if p != "" {
			c.t.Errorf("close frame %q, want it empty", p)
		}
	case len(p) < 2 || ws.StatusCode(binary.BigEndian.Uint16([]byte(p))) != code || !strings.HasPrefix(p[2:], reason):
		c.t.Errorf("close frame %q, want status %d and reason %q", p, code, reason)
	}
	if b, err := io.ReadAll(c.br); len(b) > 0 {
		c.t.Errorf("after the close frame: %q, %v", b, err)
	}
	c.conn.Close()
}

func scrubConfig() policy.Config {
	c := secretConfig()
	c.ScrubResponses = true
	return c
}

// TestWebSocketSubstitute: the placeholder of a secret sent to its host
// in a WebSocket becomes the value, in a message of one frame, in one
// whose fragments split the placeholder (with a ping between them), and
// in a ping. The upstream's echoes come back with the placeholder, since
// the responses of a secret's host are always scrubbed of its value. The
// upgrade offers no extension upstream.
func TestWebSocketSubstitute(t *testing.T) {
	for _, plain := range []bool{false, true} {
		t.Run(fmt.Sprintf("plain=%v", plain), func(t *testing.T) {
			up := newWSUpstream(t)
			h := newHarness(t, harnessConfig{policy: secretConfig(), plain: plain, handler: up})
			ph := h.placeholder()
			c := h.upgrade(t, apiHost, "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits")
			c.send(
				dataFrame(ws.OpText, false, "key="+ph[:10]),
				controlFrame(ws.OpPing, "p:"+ph),
				dataFrame(ws.OpContinuation, true, ph[10:]+"."),
				dataFrame(ws.OpBinary, true, "second "+ph),
			)
			want := []struct {
				op ws.OpCode
				p  string
			}{{ws.OpPong, "p:" + ph}, {ws.OpText, "key=" + ph + "."}, {ws.OpText, "second " + ph}}
			for _, w := range want {
				if op, p, _ := c.recv(); op != w.op || p != w.p {
					t.Errorf("got %d %q, want %d %q", op, p, w.op, w.p)
				}
			}
			c.send(controlFrame(ws.OpClose, closeBody(ws.StatusNormalClosure, "bye "+ph)))
			c.closed(ws.StatusNormalClosure, "bye "+ph)
			up.wait()

			header, messages, _ := up.got()
			if v := header.Values(wsExtensions); len(v) > 0 {
				t.Errorf("the upstream was offered extensions %q", v)
			}
			if want := []string{"key=" + secretValue + ".", "second " + secretValue}; !slices.Equal(messages, want) {
				t.Errorf("the upstream got %q, want %q", messages, want)
			}
			if ev := h.event(); ev.StatusCode != http.StatusSwitchingProtocols || ev.Blocked || ev.URL != h.url("/ws") {
				t.Errorf("event %+v", ev)
			}
			h.noMoreEvents()
		})
	}
}

// TestWebSocketScrub: with response scrubbing, a value the upstream
// echoes comes to the sandbox as the placeholder, in a message whose two
// frames split it and in a pong; a control frame that scrubbing would
// take past 125 bytes closes the WebSocket instead of passing.
func TestWebSocketScrub(t *testing.T) {
	up := newWSUpstream(t)
	h := newHarness(t, harnessConfig{policy: scrubConfig(), handler: up})
	ph := h.placeholder()
	c := h.upgrade(t, apiHost)
	c.send(dataFrame(ws.OpText, true, "key="+ph+"!"), controlFrame(ws.OpPing, ph))
	if op, p, _ := c.recv(); op != ws.OpText || p != "key="+ph+"!" {
		t.Errorf("echo %d %q, want the placeholder", op, p)
	}
	if op, p, _ := c.recv(); op != ws.OpPong || p != ph {
		t.Errorf("pong %d %q, want the placeholder", op, p)
	}
	msg := "key=" + secretValue + "!"
	if _, messages, _ := up.got(); !slices.Equal(messages, []string{msg}) {
		t.Errorf("the upstream got %q, want %q", messages, msg)
	}
	if half := len(msg) / 2; !strings.Contains(secretValue, msg[half-1:half+1]) {
		t.Fatalf("the echo's split at %d does not fall inside the value", half)
	}
	c.send(controlFrame(ws.OpClose, ""))
	c.closed(0, "")
	up.wait()
	if ev := h.event(); ev.StatusCode != http.StatusSwitchingProtocols || ev.Blocked {
		t.Errorf("event %+v", ev)
	}

	t.Run("control too long", func(t *testing.T) {
		up := newWSUpstream(t)
		up.greet = []wsFrame{controlFrame(ws.OpPing, strings.Repeat("x", 110)+secretValue)}
		h := newHarness(t, harnessConfig{policy: scrubConfig(), handler: up})
		c := h.upgrade(t, apiHost)
		c.closed(ws.StatusProtocolError, "airlock:")
		up.wait()
	})
}

// TestWebSocketLeak: the placeholder of a secret sent to a host it is
// not scoped to stops the WebSocket: nothing of it, nor after it, goes
// upstream; the sandbox gets a close frame (policy violation), and the
// event says secret_leak.
func TestWebSocketLeak(t *testing.T) {
	for _, tc := range []struct {
		name string
		leak func(ph string) []wsFrame
	}{
		{"message", func(ph string) []wsFrame {
			return []wsFrame{dataFrame(ws.OpText, true, "key="+ph), dataFrame(ws.OpText, true, "after")}
		}},
		{"split", func(ph string) []wsFrame {
			return []wsFrame{
				dataFrame(ws.OpText, false, strings.Repeat("a", 40000)+ph[:12]),
				dataFrame(ws.OpContinuation, true, ph[12:]+" trailing"),
				dataFrame(ws.OpText, true, "after"),
			}
		}},
		{"ping", func(ph string) []wsFrame {
			return []wsFrame{controlFrame(ws.OpPing, ph), dataFrame(ws.OpText, true, "after")}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newWSUpstream(t)
			h := newHarness(t, harnessConfig{policy: secretConfig(), handler: up})
			ph := h.placeholder()
			c := h.upgrade(t, otherHost)
			c.send(dataFrame(ws.OpText, true, "hello"))
			if op, p, _ := c.recv(); op != ws.OpText || p != "hello" {
				t.Fatalf("echo %d %q", op, p)
			}
			c.send(tc.leak(ph)...)
			c.closed(ws.StatusPolicyViolation, "airlock: blocked: "+policy.ReasonSecretLeak)
			up.wait()
			_, messages, frames := up.got()
			if !slices.Equal(messages, []string{"hello"}) {
				t.Errorf("the upstream got messages %q", messages)
			}
			for _, f := range frames {
				if bytes.Contains(f.payload, []byte("AIRLOCK")) || bytes.Contains(f.payload, []byte("after")) {
					t.Errorf("the upstream got a frame with %q", f.payload)
				}
			}
			ev := h.event()
			if ev.StatusCode != http.StatusSwitchingProtocols || !ev.Blocked || policy.ReasonCode(ev.Reason) != policy.ReasonSecretLeak || ev.URL != h.hostURL(otherHost, "/ws") || ev.Kind != api.NetHTTP {
				t.Errorf("event %+v, want a blocked 101 with secret_leak", ev)
			}
			h.noMoreEvents()
		})
	}
}

// TestWebSocketCompressed: a frame with RSV1 set (compressed) cannot be
// scanned: from the sandbox it is blocked (secret_unrewritable), from
// the upstream it closes the WebSocket; neither is passed on.
func TestWebSocketCompressed(t *testing.T) {
	compressed := wsFrame{ws.Header{Fin: true, OpCode: ws.OpText, Rsv: ws.Rsv(true, false, false)}, []byte("\xf2\x48\xcd\xc9\xc9\x07\x00")}
	t.Run("sandbox", func(t *testing.T) {
		up := newWSUpstream(t)
		h := newHarness(t, harnessConfig{policy: secretConfig(), handler: up})
		c := h.upgrade(t, apiHost, "Sec-WebSocket-Extensions: permessage-deflate")
		c.send(compressed)
		c.closed(ws.StatusPolicyViolation, "airlock: blocked: "+policy.ReasonSecretUnrewritable)
		up.wait()
		if _, _, frames := up.got(); len(frames) != 0 {
			t.Errorf("the upstream got %d frames", len(frames))
		}
		if ev := h.event(); !ev.Blocked || policy.ReasonCode(ev.Reason) != policy.ReasonSecretUnrewritable {
			t.Errorf("event %+v, want a block with secret_unrewritable", ev)
		}
	})
	t.Run("upstream", func(t *testing.T) {
		up := newWSUpstream(t)
		up.greet = []wsFrame{compressed}
		h := newHarness(t, harnessConfig{policy: scrubConfig(), handler: up})
		c := h.upgrade(t, apiHost)
		c.closed(ws.StatusProtocolError, "airlock:")
		up.wait()
		if ev := h.event(); ev.Blocked || ev.StatusCode != http.StatusSwitchingProtocols {
			t.Errorf("event %+v", ev)
		}
	})
}

// TestWebSocketNoSecrets: with no secret in the policy, frames have
// nothing to be rewritten for: the upgrade goes with its extensions and
// the connection is spliced as it is (a compressed frame goes and comes
// back untouched).
func TestWebSocketNoSecrets(t *testing.T) {
	up := newWSUpstream(t)
	up.raw = true
	up.extensions = "permessage-deflate"
	h := newHarness(t, harnessConfig{handler: up})
	c, resp := h.wsDial(t, apiHost, "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits")
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get(wsExtensions) != "permessage-deflate" {
		t.Fatalf("upgrade: %s %v", resp.Status, resp.Header)
	}
	compressed := wsFrame{ws.Header{Fin: true, OpCode: ws.OpText, Rsv: ws.Rsv(true, false, false)}, []byte("\xf2\x48\xcd\xc9\xc9\x07\x00")}
	c.send(compressed)
	f, err := readWSFrame(c.br)
	if err != nil || f.Rsv != compressed.Rsv || !bytes.Equal(f.payload, compressed.payload) {
		t.Errorf("echo %+v %q, %v", f.Header, f.payload, err)
	}
	if header, _, _ := up.got(); header.Get(wsExtensions) != "permessage-deflate; client_max_window_bits" {
		t.Errorf("the upstream was offered %q", header.Values(wsExtensions))
	}
	c.conn.Close()
	if ev := h.event(); ev.Blocked || ev.StatusCode != http.StatusSwitchingProtocols {
		t.Errorf("event %+v", ev)
	}
}

// TestWebSocketExtensionNotOffered: an upstream that takes an extension
// it was not offered, when frames are rewritten, fails the upgrade.
func TestWebSocketExtensionNotOffered(t *testing.T) {
	up := newWSUpstream(t)
	up.extensions = "permessage-deflate"
	h := newHarness(t, harnessConfig{policy: secretConfig(), handler: up})
	_, resp := h.wsDial(t, apiHost, "Sec-WebSocket-Extensions: permessage-deflate")
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("status %s, want 502", resp.Status)
	}
	if ev := h.event(); ev.Blocked || policy.ReasonCode(ev.Reason) != policy.ReasonUpstreamError {
		t.Errorf("event %+v, want upstream_error", ev)
	}
}

// TestWebSocketReadWrite: the rewriting connection works through Read
// and Write too, for a caller that does not copy with io.Copy: frames
// are substituted and scrubbed, and a leak stops it with a close frame.
func TestWebSocketReadWrite(t *testing.T) {
	h := newHarness(t, harnessConfig{policy: scrubConfig()})
	ph := h.placeholder()
	for _, host := range []string{apiHost, otherHost} {
		t.Run(host, func(t *testing.T) {
			server, upstream := net.Pipe()
			defer server.Close()
			server.SetDeadline(time.Now().Add(waitLimit))
			x := &exchange{c: h.ic.newConn(nil, h.dst, h.names, true), host: host, url: "https://" + host + "/ws", start: time.Now()}
			res := &http.Response{Header: http.Header{}, Body: upstream}
			if err := h.ic.rewriteFrames(res, x, h.policy.ResponseScrubber(x.c.substituter(host))); err != nil {
				t.Fatal(err)
			}
			conn := res.Body.(io.ReadWriteCloser)
			defer conn.Close()
			// The sandbox's side: frames written through Write, read
			// through Read.
			var in bytes.Buffer
			writeWSFrame(&in, dataFrame(ws.OpText, true, "key="+ph), true)
			go conn.Write(in.Bytes())
			if host == otherHost {
				f, err := readWSFrame(bufio.NewReader(conn))
				if err != nil || f.OpCode != ws.OpClose || !strings.Contains(string(f.payload), policy.ReasonSecretLeak) {
					t.Errorf("got %+v %q, %v, want a close frame", f.Header, f.payload, err)
				}
				if be := x.blocked.Load(); be == nil || be.Reason != policy.ReasonSecretLeak {
					t.Errorf("block %v", be)
				}
				return
			}
			f, err := readWSFrame(server)
			if err != nil || string(f.payload) != "key="+secretValue {
				t.Fatalf("upstream got %q, %v", f.payload, err)
			}
			go writeWSFrame(server, dataFrame(ws.OpText, true, "echo "+secretValue), false)
			f, err = readWSFrame(bufio.NewReader(conn))
			if err != nil || string(f.payload) != "echo "+ph {
				t.Errorf("sandbox got %q, %v", f.payload, err)
			}
		})
	}
}

// TestWebSocketBlockAfterEvent: a block found in a WebSocket's frames
// after the exchange's event went out is reported in one more event.
func TestWebSocketBlockAfterEvent(t *testing.T) {
	h := newHarness(t, harnessConfig{policy: secretConfig()})
	x := &exchange{c: h.ic.newConn(nil, h.dst, h.names, true), method: "GET", host: otherHost, url: h.hostURL(otherHost, "/ws"), start: time.Now()}
	be := &policy.BlockError{Reason: policy.ReasonSecretLeak, Detail: "a test"}
	x.blockUpgraded(be)
	if got := x.blocked.seal(); got != be {
		t.Errorf("before the event: the block is %v, want it noted for the event", got)
	}
	x.blockUpgraded(be)
	ev := h.event()
	if ev.Kind != api.NetHTTP || ev.URL != x.url || ev.StatusCode != http.StatusSwitchingProtocols || !ev.Blocked || ev.Reason != be.Error() {
		t.Errorf("event %+v, want the block of the 101", ev)
	}
}
