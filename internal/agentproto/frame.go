package agentproto

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/fxamacker/cbor/v2"
)

// decMode bounds what a frame may decode into: the peer is untrusted.
var decMode = mustDecMode()

func mustDecMode() cbor.DecMode {
	dm, err := cbor.DecOptions{
		MaxNestedLevels:  16,
		MaxArrayElements: 65536,
		MaxMapPairs:      4096,
		DupMapKey:        cbor.DupMapKeyEnforcedAPF,
		IndefLength:      cbor.IndefLengthForbidden,
		TagsMd:           cbor.TagsForbidden,
		// Arguments, environment values and file names are bytes on
		// Linux, not UTF-8: a text string carries them as they are,
		// and whoever prints one escapes it.
		UTF8: cbor.UTF8DecodeInvalid,
	}.DecMode()
	if err != nil {
		panic(err)
	}
	return dm
}

// Unmarshal decodes one CBOR message with the bounds of a frame, for
// messages that travel outside frames (the spawner's).
func Unmarshal(b []byte, v any) error { return decMode.Unmarshal(b, v) }

// Conn reads and writes frames on one stream. It is not safe for
// concurrent writers; callers serialise writes. Its buffers are kept
// between frames: a file transfer is a thousand 64 KiB frames, and fresh
// memory for each costs more than the copy itself.
type Conn struct {
	r *bufio.Reader
	w io.Writer
	// wbuf holds the frame being written: its length, then its body.
	wbuf bytes.Buffer
	// rbuf holds the body of the frame being decoded; decoding copies
	// every byte string it keeps, so nothing decoded refers to it.
	rbuf []byte
}

// NewConn wraps rw.
func NewConn(rw io.ReadWriter) *Conn {
	return &Conn{r: bufio.NewReaderSize(rw, 32<<10), w: rw}
}

// NewSplitConn wraps a separate reader and writer.
func NewSplitConn(r io.Reader, w io.Writer) *Conn {
	return &Conn{r: bufio.NewReaderSize(r, 32<<10), w: w}
}

// Write encodes v as one frame.
func (c *Conn) Write(v any) error {
	c.wbuf.Reset()
	c.wbuf.Write([]byte{0, 0, 0, 0})
	if err := cbor.MarshalToBuffer(v, &c.wbuf); err != nil {
		return fmt.Errorf("encode frame: %w", err)
	}
	b := c.wbuf.Bytes()
	n := len(b) - 4
	if n > MaxFrame {
		return fmt.Errorf("encode frame: %d bytes exceeds the %d byte limit", n, MaxFrame)
	}
	binary.BigEndian.PutUint32(b, uint32(n))
	_, err := c.w.Write(b)
	return err
}

// Read decodes one frame into v. It returns io.EOF only at a clean frame
// boundary.
func (c *Conn) Read(v any) error {
	var hdr [4]byte
	if _, err := io.ReadFull(c.r, hdr[:]); err != nil {
		return err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > MaxFrame {
		return fmt.Errorf("read frame: %d bytes exceeds the %d byte limit", n, MaxFrame)
	}
	if uint32(cap(c.rbuf)) < n {
		c.rbuf = make([]byte, n)
	}
	body := c.rbuf[:n]
	if _, err := io.ReadFull(c.r, body); err != nil {
		return fmt.Errorf("read frame body: %w", noEOF(err))
	}
	if err := decMode.Unmarshal(body, v); err != nil {
		return fmt.Errorf("decode frame: %w", err)
	}
	return nil
}

func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
