// Package lineio reads newline-terminated messages of bounded size, as
// the JSON-RPC server and client exchange them: many small lines, and now
// and then one of many megabytes (a file's content in base64).
package lineio

import (
	"bufio"
	"bytes"
	"errors"
	"io"

	"github.com/airlock-sandbox/airlock/internal/jsonblob"
)

// ErrTooLong reports a line longer than the limit. The line was read and
// thrown away; reading can go on after it.
var ErrTooLong = errors.New("line too long")

// bufferSize is the size of the read buffer: lines that fit in it are
// handed out without a copy.
const bufferSize = 64 << 10

// Reader reads lines, never buffering more than max bytes of one. It takes
// them out of a bufio.Reader piece by piece (ReadSlice): a bufio.Scanner
// looks for the end of line through the whole line so far at each piece,
// which makes a line of many megabytes take seconds.
type Reader struct {
	r   *bufio.Reader
	max int64
	// longest is the length of the longest line longer than 256 KiB:
	// a line that grows past that size likely grows as long.
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
// Past 256 KiB such a line moves to a buffer as large as the longest line
// so far, a megabyte at a time (the garbage collector cannot stop a
// goroutine inside one large copy); a line that turns out much shorter
// than its buffer is copied out of it, and the buffer kept.
//
// A line longer than max is consumed whole and reported as ErrTooLong. At
// the end of input Next returns io.EOF, after a last line without a
// newline, which comes first.
func (lr *Reader) Next() (line []byte, n int64, own bool, err error) {
	tooLong := false
	for {
		chunk, err := lr.r.ReadSlice('\n')
		n += int64(len(chunk))
		if !tooLong {
			switch {
			case n > lr.max+2: // room for "\r\n"
				tooLong = true
				jsonblob.Recycle(line)
				line = nil
			case line == nil && err == nil:
				// The common case: a whole line in the read buffer.
				if l := trimEOL(chunk); int64(len(l)) <= lr.max {
					return l, n, false, nil
				}
				return nil, n, false, ErrTooLong
			default:
				if line == nil {
					line = jsonblob.Buffer(256 << 10)
				}
				if len(line)+len(chunk) > cap(line) {
					line = grow(line, int(min(max(2*int64(cap(line)), n, int64(lr.longest)), lr.max+2)))
				}
				line = append(line, chunk...)
			}
		}
		switch {
		case err == nil:
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && n > 0:
			// A last line without a newline: hand it out now, EOF next.
		default:
			return nil, n, false, err
		}
		if tooLong {
			return nil, n, false, ErrTooLong
		}
		if len(line) > 256<<10 {
			lr.longest = max(lr.longest, len(line))
		}
		if len(line) < cap(line)/4 {
			// Much shorter than its buffer: the buffer is better kept
			// for the next long line.
			short := bytes.Clone(line)
			jsonblob.Recycle(line)
			line = short
		}
		line = trimEOL(line)
		if int64(len(line)) > lr.max {
			return nil, n, false, ErrTooLong
		}
		return line, n, true, nil
	}
}

// grow moves b into a buffer with room for n bytes, a megabyte at a time,
// and gives b up.
func grow(b []byte, n int) []byte {
	nb := jsonblob.Buffer(n)
	for len(nb) < len(b) {
		nb = append(nb, b[len(nb):min(len(nb)+1<<20, len(b))]...)
	}
	jsonblob.Recycle(b)
	return nb
}

func trimEOL(b []byte) []byte {
	b = bytes.TrimSuffix(b, []byte("\n"))
	return bytes.TrimSuffix(b, []byte("\r"))
}
