package rpc

import (
	"bufio"
	"bytes"
	"errors"
	"io"

	"github.com/airlock-sandbox/airlock/internal/jsonblob"
)

// errLineTooLong reports a line longer than the limit; it was discarded.
var errLineTooLong = errors.New("line too long")

// lineReader reads newline-terminated lines, never buffering more than
// max bytes of one: the rest of a longer line is read and thrown away.
type lineReader struct {
	r   *bufio.Reader
	max int64
	// longest is the length of the longest line longer than 256 KiB:
	// a line that grows past that size likely grows as long.
	longest int
}

func newLineReader(r io.Reader, max int64) *lineReader {
	return &lineReader{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

// next returns the next line without its line ending, in a slice the
// caller owns. A line longer than max is consumed whole and reported as
// errLineTooLong with its length so far; the reader can go on after it.
// At the end of input it returns io.EOF (after a last unterminated line,
// which is returned first).
//
// A line longer than the buffer goes into a buffer from jsonblob.Buffer,
// which may have been kept from an earlier request, already in memory
// (see jsonblob.Recycle). Past 256 KiB it moves to one as large as the
// longest line so far, a megabyte at a time (the garbage collector cannot
// stop a goroutine inside one large copy). A line that turns out much
// shorter than its buffer is copied out of it, and the buffer kept.
func (lr *lineReader) next() ([]byte, int64, error) {
	var (
		line    []byte
		n       int64
		tooLong bool
	)
	for {
		chunk, err := lr.r.ReadSlice('\n')
		n += int64(len(chunk))
		if !tooLong {
			if n > lr.max+2 { // room for "\r\n"
				tooLong = true
				line = nil
			} else if line == nil && err == nil {
				// The common case: a whole line in the buffer.
				if l := trimEOL(chunk); int64(len(l)) <= lr.max {
					return bytes.Clone(l), n, nil
				}
				return nil, n, errLineTooLong
			} else {
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
			err = nil
		default:
			return nil, n, err
		}
		if tooLong {
			return nil, n, errLineTooLong
		}
		if line != nil {
			if len(line) > 256<<10 {
				lr.longest = max(lr.longest, len(line))
			}
			if len(line) < cap(line)/4 {
				// Much shorter than the last one: the buffer is better kept
				// for the next long line.
				short := bytes.Clone(line)
				jsonblob.Recycle(line)
				line = short
			}
		}
		line = trimEOL(line)
		if int64(len(line)) > lr.max {
			return nil, n, errLineTooLong
		}
		return line, n, nil
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
