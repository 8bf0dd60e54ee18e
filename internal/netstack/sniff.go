package netstack

import (
	"bytes"
	"gvisor.dev/gvisor/pkg/tcpip"
	"net"
)

// sniffKind is what the first bytes of a TCP connection carry.
type sniffKind int

const (
	sniffOther sniffKind = iota // neither HTTP nor TLS
	sniffTLS                    // a TLS record carrying a handshake
	sniffHTTP                   // an HTTP/1.x request line, or the HTTP/2 preface
)

func (k sniffKind) String() string {
	switch k {
	case sniffTLS:
		return "tls"
	case sniffHTTP:
		return "http"
	}
	return "other"
}

// maxSniff is the most bytes classify needs: the longest method, plus
// the space after it.
const maxSniff = 8

// httpMethods are the request methods that mark a connection as HTTP.
// "PRI" starts the HTTP/2 prior-knowledge preface.
var httpMethods = [][]byte{
	[]byte("GET"), []byte("HEAD"), []byte("POST"), []byte("PUT"), []byte("DELETE"),
	[]byte("OPTIONS"), []byte("PATCH"), []byte("TRACE"), []byte("CONNECT"), []byte("PRI"),
}

// classify decides what a connection's first bytes b carry. final is
// false while more bytes could change the answer.
func classify(b []byte) (kind sniffKind, final bool) {
	if len(b) == 0 {
		return sniffOther, false
	}
	if b[0] == 0x16 {
		// A TLS record: content type handshake, then version 3.x.
		switch {
		case len(b) == 1:
			return sniffOther, false
		case b[1] != 0x03:
			return sniffOther, true
		case len(b) == 2:
			return sniffOther, false
		case b[2] <= 0x04:
			return sniffTLS, true
		}
		return sniffOther, true
	}
	sp := bytes.IndexByte(b, ' ')
	if sp < 0 {
		if len(b) >= maxSniff {
			return sniffOther, true
		}
		for _, m := range httpMethods {
			if bytes.HasPrefix(m, b) {
				return sniffOther, false
			}
		}
		return sniffOther, true
	}
	for _, m := range httpMethods {
		if bytes.Equal(b[:sp], m) {
			return sniffHTTP, true
		}
	}
	return sniffOther, true
}

// sniff reads from c until classify decides, or until c's read deadline
// (which the caller sets, and clears after). It returns the bytes read
// (to be replayed) and the kind; a timeout or a close before the decision
// gives sniffOther with the bytes so far.
func sniff(c net.Conn) ([]byte, sniffKind, error) {
	buf := make([]byte, 0, maxSniff)
	for {
		n, err := c.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if kind, final := classify(buf); final {
			return buf, kind, nil
		}
		if err != nil {
			return buf, sniffOther, err
		}
	}
}

// prefixConn replays the sniffed bytes before reading on from the
// connection. It keeps the half-close of the connection it wraps, and
// lets the interceptor cork it (see SetCork).
type prefixConn struct {
	halfCloser
	prefix []byte
	opts   *tcpip.SocketOptions
}

// SetCork holds back partial segments while on, and sends what it held
// when turned off: a writer that makes one logical write out of several
// (TLS records) brackets them with it, so that they leave as full
// segments instead of one frame each, without delaying anything past
// the end of the logical write.
func (c *prefixConn) SetCork(on bool) {
	if c.opts != nil {
		c.opts.SetCorkOption(on)
	}
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.halfCloser.Read(p)
}
