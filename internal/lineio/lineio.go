// Package lineio reads newline-terminated messages of bounded size, as
// the JSON-RPC server and client exchange them: many small lines, and now
// and then one of many megabytes (a file's content in base64).
package lineio

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"runtime"
	"runtime/debug"
	"sync"

	"github.com/airlock-sandbox/airlock/internal/jsonblob"
)

// ErrTooLong reports a line longer than the limit. The line was read and
// thrown away; reading can go on after it.
var ErrTooLong = errors.New("line too long")

// bufferSize is the size of the read buffer: lines that fit in it are
// handed out without a copy.
const bufferSize = 64 << 10

// chunkSize is the size of the pieces a longer line is gathered in.
const chunkSize = 1 << 20

// chunks keeps the pieces of long lines for the next ones, until the
// garbage collector takes them.
var chunks = sync.Pool{New: func() any { return new([chunkSize]byte) }}

// Reader reads lines, never buffering more than max bytes of one. It takes
// them out of a bufio.Reader piece by piece (ReadSlice): a bufio.Scanner
// looks for the end of line through the whole line so far at each piece,
// which makes a line of many megabytes take seconds.
type Reader struct {
	r   *bufio.Reader
	max int64
	// A line longer than the read buffer is gathered in base, a buffer
	// as large as the longest such line so far (none before the
	// first), and what does not fit there in fixed-size parts; n is
	// how many bytes the parts hold.
	base    []byte
	parts   []*[chunkSize]byte
	n       int
	longest int
}

// NewReader reads lines of at most max bytes from r.
func NewReader(r io.Reader, max int64) *Reader {
	return &Reader{r: bufio.NewReaderSize(r, bufferSize), max: max}
}

// Next returns the next line without its line ending ("\n" or "\r\n") and
// the bytes it took on the input.
//
// A line that fits in the read buffer is valid until the next call (own
// false). A longer one is in a buffer of its own (own true) from
// jsonblob.Buffer, which may have been kept from an earlier one, already
// in memory; the caller may give it back with jsonblob.Recycle once done.
// Such a line is read straight into a buffer as long as the longest line
// so far, and what goes past it into fixed-size pieces, which are then
// copied after it: memory grows with the line, never by copying what was
// read to grow, and a line no longer than those before costs no copy.
//
// A line longer than max is consumed whole and reported as ErrTooLong:
// past max, what comes is read and dropped a read buffer at a time, and
// what was gathered up to max is given back to the system before Next
// returns. At the end of input Next returns io.EOF, after a last line
// without a newline, which comes first.
func (lr *Reader) Next() (line []byte, n int64, own bool, err error) {
	tooLong := false
	for {
		chunk, err := lr.r.ReadSlice('\n')
		n += int64(len(chunk))
		if !tooLong {
			switch {
			case n > lr.max+2: // room for "\r\n"
				tooLong = true
				lr.drop()
			case n == int64(len(chunk)) && err == nil:
				// The common case: a whole line in the read buffer.
				if l := trimEOL(chunk); int64(len(l)) <= lr.max {
					return l, n, false, nil
				}
				return nil, n, false, ErrTooLong
			default:
				lr.gather(chunk)
			}
		}
		switch {
		case err == nil:
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && n > 0:
			// A last line without a newline: hand it out now, EOF next.
		default:
			lr.reset()
			return nil, n, false, err
		}
		if tooLong {
			return nil, n, false, ErrTooLong
		}
		line = trimEOL(lr.assemble())
		if int64(len(line)) > lr.max {
			return nil, n, false, ErrTooLong
		}
		return line, n, true, nil
	}
}

// gather appends b to the line being gathered.
func (lr *Reader) gather(b []byte) {
	if lr.base == nil {
		lr.base = jsonblob.Buffer(max(lr.longest, bufferSize))
	}
	if len(lr.parts) == 0 {
		k := min(len(b), cap(lr.base)-len(lr.base))
		lr.base = append(lr.base, b[:k]...)
		b = b[k:]
	}
	for len(b) > 0 {
		off := lr.n % chunkSize
		if off == 0 && lr.n/chunkSize == len(lr.parts) {
			lr.parts = append(lr.parts, chunks.Get().(*[chunkSize]byte))
		}
		c := copy(lr.parts[lr.n/chunkSize][off:], b)
		lr.n += c
		b = b[c:]
	}
}

// assemble returns the line gathered, in one buffer.
func (lr *Reader) assemble() []byte {
	line := lr.base
	lr.base = nil
	if len(lr.parts) > 0 {
		// Past the longest line so far: one copy, into a buffer of the
		// line's length.
		whole := jsonblob.Buffer(len(line) + lr.n)
		whole = append(whole, line...)
		for i, p := range lr.parts {
			whole = append(whole, p[:min(chunkSize, lr.n-i*chunkSize)]...)
		}
		jsonblob.Recycle(line)
		line = whole
		lr.freeParts()
	}
	if len(line) > 256<<10 {
		// A line that grows past that size likely grows as long.
		lr.longest = max(lr.longest, len(line))
	}
	if len(line) < cap(line)/4 {
		// Much shorter than its buffer: the buffer is better kept for
		// the next long line.
		short := bytes.Clone(line)
		jsonblob.Recycle(line)
		line = short
	}
	return line
}

// freeParts lets the pieces go. Those of a long line are freed at once,
// so that what the caller makes of the line (the decoded content of a
// file, say) takes their memory rather than more; the collection this
// takes costs little next to reading that much.
func (lr *Reader) freeParts() {
	if lr.n < collectAfter {
		for _, p := range lr.parts {
			chunks.Put(p)
		}
		clear(lr.parts)
		lr.parts, lr.n = lr.parts[:0], 0
		return
	}
	clear(lr.parts)
	lr.parts, lr.n = nil, 0
	runtime.GC()
}

// collectAfter is the length of the pieces of a line from which they
// are freed at once rather than kept.
const collectAfter = 16 << 20

// reset forgets the line being gathered, after a read error.
func (lr *Reader) reset() {
	jsonblob.Recycle(lr.base)
	lr.base = nil
	lr.freeParts()
}

// drop forgets a line over the limit, and gives what it took back to the
// system: a peer that sends such lines again and again must not keep the
// limit's worth of memory held, or have it grow.
func (lr *Reader) drop() {
	if lr.base == nil && len(lr.parts) == 0 {
		return
	}
	lr.base = nil
	clear(lr.parts)
	lr.parts, lr.n = nil, 0
	debug.FreeOSMemory()
}

func trimEOL(b []byte) []byte {
	b = bytes.TrimSuffix(b, []byte("\n"))
	return bytes.TrimSuffix(b, []byte("\r"))
}
