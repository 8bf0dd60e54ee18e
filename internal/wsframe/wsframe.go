// Package wsframe rewrites the frames of one direction of a WebSocket
// connection (RFC 6455) as they pass through an intermediary: the
// payload of every message goes through a rewrite as a stream, whatever
// its fragmentation, and the payload of every control frame is rewritten
// whole.
//
// No extension may have been negotiated: a frame with an RSV bit set is
// refused. An intermediary that understands no extension may change a
// message's fragmentation (RFC 6455 section 5.4), and a Rewriter does: a
// message may leave in other frames than it came in, at most ChunkSize
// bytes each. Frame headers and masking are github.com/gobwas/ws's.
package wsframe

import (
	"bufio"
	crand "crypto/rand"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"

	"github.com/gobwas/ws"
)

// MaxPayload bounds the payload length a frame read may declare.
const MaxPayload = 16 << 20

// ChunkSize is the most payload a data frame written carries.
const ChunkSize = 32 << 10

// wholeSize is the longest single-frame message that is read whole and
// goes through Rewriter.Bytes rather than through Rewriter.Stream.
const wholeSize = ChunkSize

// ErrProtocol is wrapped by the error of a frame that breaks RFC 6455.
var ErrProtocol = errors.New("WebSocket protocol violation")

// ErrTooLong is wrapped by the error of a frame that declares a payload
// longer than MaxPayload.
var ErrTooLong = fmt.Errorf("a WebSocket frame longer than %d bytes", MaxPayload)

// ErrControlTooLong is wrapped by the error of a control frame whose
// rewritten payload would not fit in a control frame (125 bytes).
var ErrControlTooLong = errors.New("a rewritten control frame's payload is longer than 125 bytes")

// Rewriter rewrites the frames of one direction of a WebSocket
// connection. Bytes and Stream must make the same rewrite: which of them
// a message goes through depends on how it was framed.
type Rewriter struct {
	// Client is set when the frames come from the WebSocket client: every
	// frame read must then be masked, and every frame written is masked
	// with a fresh key. Otherwise they come from the server, unmasked,
	// and leave unmasked.
	Client bool
	// Bytes rewrites a whole payload: a ping's or a pong's, the reason of
	// a close frame, and a message that comes in one frame of at most
	// ChunkSize bytes. nil leaves them as they are.
	Bytes func([]byte) ([]byte, error)
	// Stream rewrites any other message's payload, which it reads from
	// its argument as the message's frames arrive. nil leaves them as
	// they are.
	Stream func(io.Reader) io.Reader
}

// Copy reads frames from src and writes them, rewritten, to dst until
// src ends between two frames (the error is then nil), a read or a
// write fails, a frame breaks the protocol (ErrProtocol) or the bounds
// (ErrTooLong, ErrControlTooLong), or a rewrite fails (its error is
// wrapped). Of a message whose rewrite fails, nothing is written past
// what the rewrite had already returned. Every frame written is whole.
// It returns how many bytes it read from src and wrote to dst.
func (rw Rewriter) Copy(dst io.Writer, src io.Reader) (read, written int64, err error) {
	in := &counter{r: src}
	out := &counter{w: dst}
	c := &copier{
		Rewriter: rw,
		src:      bufio.NewReaderSize(in, ChunkSize),
		dst:      bufio.NewWriterSize(out, ws.MaxHeaderSize+ChunkSize),
		hdr:      make([]byte, ws.MaxHeaderSize),
		buf:      make([]byte, ChunkSize),
	}
	if rw.Client {
		c.masks = newMasks()
	}
	err = c.run()
	return in.n, out.n, err
}

// WriteClose writes a close frame with code and reason (cut to fit) to
// w, masked when the Rewriter's frames come from the client.
func (rw Rewriter) WriteClose(w io.Writer, code ws.StatusCode, reason string) error {
	c := &copier{Rewriter: rw, dst: bufio.NewWriterSize(w, ws.MaxHeaderSize+ws.MaxControlFramePayloadSize), hdr: make([]byte, ws.MaxHeaderSize)}
	if rw.Client {
		c.masks = newMasks()
	}
	return c.writeFrame(ws.OpClose, true, ws.NewCloseFrameBody(code, reason))
}

// newMasks returns the source of the masking keys of one stream:
// ChaCha8, a cryptographically strong generator, seeded from
// crypto/rand, as RFC 6455 section 5.3 asks (keys the application
// cannot predict) without a system call per frame.
func newMasks() *rand.ChaCha8 {
	var seed [32]byte
	_, _ = crand.Read(seed[:]) // never fails
	return rand.NewChaCha8(seed)
}

// copier is the state of one Copy.
type copier struct {
	Rewriter
	src   *bufio.Reader
	dst   *bufio.Writer
	hdr   []byte // scratch for headers
	buf   []byte // a data frame's payload on its way out
	ctl   [ws.MaxControlFramePayloadSize]byte
	masks *rand.ChaCha8 // nil for unmasked frames
}

func (c *copier) run() error {
	for {
		if _, err := c.src.Peek(1); err == io.EOF {
			return nil // the end, between two frames
		}
		h, err := c.readHeader(false)
		if err != nil {
			return err
		}
		if h.OpCode.IsControl() {
			err = c.control(h)
		} else {
			err = c.message(h)
		}
		if err != nil {
			return err
		}
	}
}

// readHeader reads and checks a frame header; inMessage says that a
// fragmented message is under way. The end of src is
// io.ErrUnexpectedEOF.
func (c *copier) readHeader(inMessage bool) (ws.Header, error) {
	h, err := ws.ReadHeaderBuffer(c.src, c.hdr)
	if err != nil {
		if errors.Is(err, ws.ErrHeaderLengthMSB) || errors.Is(err, ws.ErrHeaderLengthUnexpected) {
			return h, fmt.Errorf("%w: %w", ErrProtocol, err)
		}
		return h, noEOF(err)
	}
	// The peer of the frames' sender checks them: the server when they
	// come from the client.
	state := ws.StateClientSide
	if c.Client {
		state = ws.StateServerSide
	}
	if inMessage {
		state = state.Set(ws.StateFragmented)
	}
	if err := ws.CheckHeader(h, state); err != nil {
		return h, fmt.Errorf("%w: %w", ErrProtocol, err)
	}
	if h.Length > MaxPayload {
		return h, fmt.Errorf("%w: it declares %d bytes", ErrTooLong, h.Length)
	}
	return h, nil
}

// control copies a control frame (ws.CheckHeader made sure that it is
// final and has at most 125 bytes), rewriting its payload, or a close
// frame's reason.
func (c *copier) control(h ws.Header) error {
	p := c.ctl[:h.Length]
	if _, err := io.ReadFull(c.src, p); err != nil {
		return noEOF(err)
	}
	if h.Masked {
		ws.Cipher(p, h.Mask, 0)
	}
	body := p
	if h.OpCode == ws.OpClose {
		if len(p) == 1 {
			return fmt.Errorf("%w: a close frame with a 1-byte payload", ErrProtocol)
		}
		if len(p) >= 2 {
			body = p[2:]
		}
	}
	if c.Bytes != nil && len(body) > 0 {
		out, err := c.Bytes(body)
		if err != nil {
			return fmt.Errorf("rewriting a control frame: %w", err)
		}
		if len(p)-len(body)+len(out) > ws.MaxControlFramePayloadSize {
			return ErrControlTooLong
		}
		// Copied into the frame's own buffer, since writing masks it in
		// place: out may be a slice the rewrite keeps.
		p = append(p[:len(p)-len(body)], out...)
	}
	return c.writeFrame(h.OpCode, true, p)
}

// message copies a data message whose first frame has header h.
func (c *copier) message(h ws.Header) error {
	if h.Fin && h.Length <= wholeSize {
		return c.whole(h)
	}
	m := &message{c: c, fin: h.Fin, left: h.Length, mask: h.Mask, masked: h.Masked}
	var r io.Reader = m
	if c.Stream != nil {
		r = c.Stream(m)
	}
	op := h.OpCode
	n := 0 // payload in c.buf, not yet written
	for {
		// Before a read that may wait for the peer's next frame, what is
		// ready goes out: nothing is held back waiting for it. Once the
		// message's last byte is in, reads do not wait: the frames can
		// be full, and the last one final.
		if n > 0 && (!m.done() || n == len(c.buf)) {
			if err := c.writeFrame(op, false, c.buf[:n]); err != nil {
				return err
			}
			op, n = ws.OpContinuation, 0
		}
		k, err := r.Read(c.buf[n:])
		n += k
		if err == io.EOF {
			return c.writeFrame(op, true, c.buf[:n])
		}
		if err != nil {
			return fmt.Errorf("rewriting a message: %w", err)
		}
	}
}

// whole copies a message of one short frame, read whole, through Bytes.
func (c *copier) whole(h ws.Header) error {
	p := c.buf[:h.Length]
	if _, err := io.ReadFull(c.src, p); err != nil {
		return noEOF(err)
	}
	if h.Masked {
		ws.Cipher(p, h.Mask, 0)
	}
	out := p
	if c.Bytes != nil {
		var err error
		if out, err = c.Bytes(p); err != nil {
			return fmt.Errorf("rewriting a message: %w", err)
		}
	}
	op := h.OpCode
	for len(out) > ChunkSize {
		// Copied, since writing masks in place: out may be a slice the
		// rewrite keeps.
		if err := c.writeFrame(op, false, append(c.buf[:0], out[:ChunkSize]...)); err != nil {
			return err
		}
		op, out = ws.OpContinuation, out[ChunkSize:]
	}
	return c.writeFrame(op, true, append(c.buf[:0], out...))
}

// writeFrame writes one frame, in one write to dst. A masked frame's
// payload is masked in place.
func (c *copier) writeFrame(op ws.OpCode, fin bool, p []byte) error {
	h := ws.Header{Fin: fin, OpCode: op, Length: int64(len(p))}
	if c.masks != nil {
		h.Masked = true
		_, _ = c.masks.Read(h.Mask[:]) // never fails
		ws.Cipher(p, h.Mask, 0)
	}
	if err := ws.WriteHeaderBuffer(c.dst, h, c.hdr); err != nil {
		return err
	}
	if _, err := c.dst.Write(p); err != nil {
		return err
	}
	return c.dst.Flush()
}

// message reads the payload of one data message, unmasked, across its
// frames. The control frames between them are copied as they come.
type message struct {
	c      *copier
	fin    bool  // the current frame is the message's last
	left   int64 // payload bytes of the current frame not yet read
	mask   [4]byte
	masked bool
	off    int // payload bytes of the current frame already read
}

// done reports whether every byte of the message has been read.
func (m *message) done() bool { return m.fin && m.left == 0 }

func (m *message) Read(p []byte) (int, error) {
	for m.left == 0 {
		if m.fin {
			return 0, io.EOF
		}
		h, err := m.c.readHeader(true)
		if err != nil {
			return 0, err
		}
		if h.OpCode.IsControl() {
			if err := m.c.control(h); err != nil {
				return 0, err
			}
			continue
		}
		m.fin, m.left, m.mask, m.masked, m.off = h.Fin, h.Length, h.Mask, h.Masked, 0
	}
	if int64(len(p)) > m.left {
		p = p[:m.left]
	}
	n, err := m.c.src.Read(p)
	if m.masked {
		ws.Cipher(p[:n], m.mask, m.off)
	}
	m.off += n
	m.left -= int64(n)
	return n, noEOF(err)
}

// noEOF turns the end of the stream inside a frame or a message into
// io.ErrUnexpectedEOF.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// counter counts the bytes read from r or written to w.
type counter struct {
	r io.Reader
	w io.Writer
	n int64
}

func (c *counter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func (c *counter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
