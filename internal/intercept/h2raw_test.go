package intercept

import (
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"net/http"
	"testing"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/policy"
)

// h2Request sends one HTTP/2 request with the given header fields (name,
// value pairs, pseudo-fields first) on a new TLS connection, with a
// hand-made HEADERS frame: Go's client never sends a Host field beside
// :authority. It returns the request's event.
func (h *harness) h2Request(fields ...string) api.NetworkEvent {
	h.t.Helper()
	conn, err := h.handshake(&tls.Config{ServerName: apiHost, RootCAs: h.pool(), NextProtos: []string{"h2"}})
	if err != nil {
		h.t.Fatal(err)
	}
	defer conn.Close()
	// HPACK literal fields without indexing, new names, no Huffman
	// coding (RFC 7541 section 6.2.2); every string here is shorter than
	// 127 bytes, so each length is one byte.
	var block []byte
	for i := 0; i < len(fields); i += 2 {
		block = append(block, 0x00, byte(len(fields[i])))
		block = append(block, fields[i]...)
		block = append(block, byte(len(fields[i+1])))
		block = append(block, fields[i+1]...)
	}
	frame := func(typ, flags byte, stream uint32, payload []byte) []byte {
		b := []byte{byte(len(payload) >> 16), byte(len(payload) >> 8), byte(len(payload)), typ, flags, 0, 0, 0, 0}
		binary.BigEndian.PutUint32(b[5:], stream)
		return append(b, payload...)
	}
	msg := []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	msg = append(msg, frame(0x4, 0, 0, nil)...)         // SETTINGS
	msg = append(msg, frame(0x1, 0x1|0x4, 1, block)...) // HEADERS, END_STREAM|END_HEADERS
	if _, err := conn.Write(msg); err != nil {
		h.t.Fatal(err)
	}
	return h.event()
}

// TestH2Authority: over HTTP/2, a Host field that disagrees with
// :authority is domain fronting too, and a Host field alone must be the
// SNI.
func TestH2Authority(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	auth := fmt.Sprintf("%s:%d", apiHost, h.dst.Port())
	base := []string{":method", "GET", ":scheme", "https"}

	if ev := h.h2Request(append(base, ":path", "/ok", ":authority", auth)...); ev.StatusCode != 200 || ev.Blocked {
		t.Fatalf("a plain request: %+v", ev)
	}
	for _, fields := range [][]string{
		{":path", "/front", ":authority", auth, "host", otherHost},
		{":path", "/hostonly", "host", otherHost},
	} {
		ev := h.h2Request(append(base, fields...)...)
		if ev.StatusCode != http.StatusMisdirectedRequest || !ev.Blocked || policy.ReasonCode(ev.Reason) != policy.ReasonHostMismatch {
			t.Errorf("%v: event %+v", fields, ev)
		}
	}
	if h.started.Load() != 1 {
		t.Errorf("upstream got %d requests, want 1", h.started.Load())
	}
	h.noMoreEvents()
}
