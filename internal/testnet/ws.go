package testnet

import (
	"bufio"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"strings"
)

// wsGUID is RFC 6455's key suffix for Sec-WebSocket-Accept.
const wsGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

// wsMaxPayload bounds the frames /ws echoes, and the messages it
// records.
const wsMaxPayload = 16 << 20

// WebSocketAccept is the Sec-WebSocket-Accept value that answers key.
func WebSocketAccept(key string) string {
	h := sha1.Sum([]byte(key + wsGUID))
	return base64.StdEncoding.EncodeToString(h[:])
}

func headerHas(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// websocket is /ws: the RFC 6455 handshake over HTTP/1.1, then every data
// frame back as it came (unmasked), a pong for each ping, and the close
// frame returned before the connection closes. Each data message is
// recorded in the request's Messages.
func (w *World) websocket(rw http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Sec-WebSocket-Key")
	if r.Method != http.MethodGet || !headerHas(r.Header, "Upgrade", "websocket") ||
		!headerHas(r.Header, "Connection", "upgrade") || key == "" {
		http.Error(rw, "not a WebSocket handshake", http.StatusBadRequest)
		return
	}
	if r.Header.Get("Sec-WebSocket-Version") != "13" {
		rw.Header().Set("Sec-WebSocket-Version", "13")
		http.Error(rw, "unsupported WebSocket version", http.StatusUpgradeRequired)
		return
	}
	if r.ProtoMajor != 1 {
		http.Error(rw, "WebSocket needs HTTP/1.1", http.StatusHTTPVersionNotSupported)
		return
	}
	conn, brw, err := http.NewResponseController(rw).Hijack()
	if err != nil {
		http.Error(rw, "cannot hijack the connection", http.StatusInternalServerError)
		return
	}
	defer conn.Close()
	if !w.track(conn) {
		return
	}
	defer w.untrack(conn)
	_, err = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\n" +
		"Upgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Accept: " + WebSocketAccept(key) + "\r\n\r\n")
	if err != nil || brw.Flush() != nil {
		return
	}
	req := r.Context().Value(requestKey{}).(*Request)
	var msg []byte
	for {
		op, fin, payload, err := readFrame(brw.Reader)
		if err != nil {
			if err != io.EOF {
				_ = writeFrame(brw.Writer, 0x8, true, binary.BigEndian.AppendUint16(nil, 1002))
				_ = brw.Flush()
			}
			return
		}
		switch op {
		case 0x8: // close: return it, then end
			_ = writeFrame(brw.Writer, 0x8, true, payload)
			_ = brw.Flush()
			return
		case 0x9: // ping
			err = writeFrame(brw.Writer, 0xA, true, payload)
		case 0xA: // pong
			continue
		default:
			if len(msg)+len(payload) > wsMaxPayload {
				_ = writeFrame(brw.Writer, 0x8, true, binary.BigEndian.AppendUint16(nil, 1009))
				_ = brw.Flush()
				return
			}
			msg = append(msg, payload...)
			if fin {
				w.mu.Lock()
				req.Messages = append(req.Messages, msg)
				w.mu.Unlock()
				msg = nil
			}
			err = writeFrame(brw.Writer, op, fin, payload)
		}
		if err != nil || brw.Flush() != nil {
			return
		}
	}
}

// errBadFrame is a frame /ws does not take: unmasked, too long, or of an
// unknown opcode.
var errBadFrame = errors.New("bad WebSocket frame")

// readFrame reads one client frame and unmasks its payload.
func readFrame(r *bufio.Reader) (op byte, fin bool, payload []byte, err error) {
	var h [2]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, false, nil, err
	}
	fin, op = h[0]&0x80 != 0, h[0]&0x0f
	if h[1]&0x80 == 0 || op > 0xA || (op > 0x2 && op < 0x8) {
		return 0, false, nil, errBadFrame
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var b [2]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return 0, false, nil, err
		}
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return 0, false, nil, err
		}
		n = binary.BigEndian.Uint64(b[:])
	}
	if n > wsMaxPayload {
		return 0, false, nil, errBadFrame
	}
	var mask [4]byte
	if _, err := io.ReadFull(r, mask[:]); err != nil {
		return 0, false, nil, err
	}
	payload = make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		return 0, false, nil, err
	}
	for i := range payload {
		payload[i] ^= mask[i%4]
	}
	return op, fin, payload, nil
}

// writeFrame writes one unmasked frame, as a server sends them.
func writeFrame(w *bufio.Writer, op byte, fin bool, payload []byte) error {
	b0 := op
	if fin {
		b0 |= 0x80
	}
	hdr := []byte{b0}
	switch n := len(payload); {
	case n < 126:
		hdr = append(hdr, byte(n))
	case n <= 0xffff:
		hdr = append(hdr, 126)
		hdr = binary.BigEndian.AppendUint16(hdr, uint16(n))
	default:
		hdr = append(hdr, 127)
		hdr = binary.BigEndian.AppendUint64(hdr, uint64(n))
	}
	if _, err := w.Write(hdr); err != nil {
		return err
	}
	_, err := w.Write(payload)
	return err
}
