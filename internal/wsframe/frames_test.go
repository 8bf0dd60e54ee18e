package wsframe

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
)

// The tests' own frame codec, written from RFC 6455 section 5.2 rather
// than with the package's library, so that each checks the other.

// frame is one frame as the tests write and read it, payload unmasked.
type frame struct {
	fin     bool
	rsv     byte
	op      byte
	masked  bool
	payload []byte
}

// encode appends f to b, masked with key when f.masked.
func encode(b []byte, f frame, key [4]byte) []byte {
	b0 := f.op | f.rsv<<4
	if f.fin {
		b0 |= 0x80
	}
	b = append(b, b0)
	var m byte
	if f.masked {
		m = 0x80
	}
	switch n := len(f.payload); {
	case n < 126:
		b = append(b, m|byte(n))
	case n <= 0xffff:
		b = binary.BigEndian.AppendUint16(append(b, m|126), uint16(n))
	default:
		b = binary.BigEndian.AppendUint64(append(b, m|127), uint64(n))
	}
	if f.masked {
		b = append(b, key[:]...)
	}
	for i, c := range f.payload {
		if f.masked {
			c ^= key[i%4]
		}
		b = append(b, c)
	}
	return b
}

// encodeAll encodes frames, each masked with a key of its own.
func encodeAll(frames ...frame) []byte {
	var b []byte
	for i, f := range frames {
		b = encode(b, f, [4]byte{byte(i), 0x5a, byte(i * 7), 0xc3})
	}
	return b
}

// errTruncated is the end of the data inside a frame.
var errTruncated = errors.New("truncated frame")

// decode reads the frames of b, up to the first one that is cut short
// (errTruncated) or that declares more than limit bytes; it returns
// the masking keys as well.
func decode(b []byte, limit uint64) ([]frame, [][4]byte, error) {
	var frames []frame
	var keys [][4]byte
	for len(b) > 0 {
		if len(b) < 2 {
			return frames, keys, errTruncated
		}
		f := frame{fin: b[0]&0x80 != 0, rsv: b[0] >> 4 & 7, op: b[0] & 0xf, masked: b[1]&0x80 != 0}
		n := uint64(b[1] & 0x7f)
		b = b[2:]
		switch n {
		case 126:
			if len(b) < 2 {
				return frames, keys, errTruncated
			}
			n, b = uint64(binary.BigEndian.Uint16(b)), b[2:]
		case 127:
			if len(b) < 8 {
				return frames, keys, errTruncated
			}
			n, b = binary.BigEndian.Uint64(b), b[8:]
		}
		if n > limit {
			return frames, keys, fmt.Errorf("a frame of %d bytes", n)
		}
		var key [4]byte
		if f.masked {
			if len(b) < 4 {
				return frames, keys, errTruncated
			}
			copy(key[:], b)
			b = b[4:]
		}
		if uint64(len(b)) < n {
			return frames, keys, errTruncated
		}
		f.payload = slices.Clone(b[:n])
		for i := range f.payload {
			f.payload[i] ^= key[i%4]
		}
		b = b[n:]
		frames = append(frames, f)
		keys = append(keys, key)
	}
	return frames, keys, nil
}

// msg is a whole data message, or a control frame, as the tests compare
// them.
type msg struct {
	op      byte
	payload string
}

// stream is what a frame stream carries: its messages and its control
// frames, each in order.
type stream struct {
	messages []msg
	controls []msg
}

// split sorts frames into messages and control frames. It stops at the
// first frame out of place in RFC 6455's sequence, and reports it; an
// unfinished message at the end is not counted.
func split(frames []frame) (stream, error) {
	var s stream
	var op byte // of the message under way; 0: none
	var payload []byte
	for i, f := range frames {
		switch {
		case f.op >= 8:
			s.controls = append(s.controls, msg{f.op, string(f.payload)})
			continue
		case f.op == 0 && op == 0:
			return s, fmt.Errorf("frame %d: a continuation outside a message", i)
		case f.op != 0 && op != 0:
			return s, fmt.Errorf("frame %d: opcode %d inside a message", i, f.op)
		case f.op != 0:
			op, payload = f.op, payload[:0]
		}
		payload = append(payload, f.payload...)
		if f.fin {
			s.messages = append(s.messages, msg{op, string(payload)})
			op = 0
		}
	}
	return s, nil
}

// copyFrames runs a Rewriter on in and returns what it wrote.
func copyFrames(rw Rewriter, in []byte) ([]byte, error) {
	var out bytes.Buffer
	_, _, err := rw.Copy(&out, bytes.NewReader(in))
	return out.Bytes(), err
}

// chunkReader returns its data a few bytes at a time.
type chunkReader struct {
	b []byte
	n int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), r.n, len(r.b))
	copy(p, r.b[:n])
	r.b = r.b[n:]
	return n, nil
}
