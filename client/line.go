package client

import (
	"bufio"
	"bytes"
	"errors"
	"io"

	"github.com/airlock-sandbox/airlock/internal/jsonblob"
)

// errLineTooLong reports a line longer than the limit.
var errLineTooLong = errors.New("line too long")

// lineReader reads the server's lines. It takes them out of a bufio.Reader
// piece by piece (ReadSlice): a bufio.Scanner looks for the end of line
// through the whole line so far at each piece, which makes a line of many
// megabytes take seconds.
type lineReader struct {
	r   *bufio.Reader
	max int
	// longest is the length of the longest line longer than 256 KiB:
	// a line that grows past that size likely grows as long.
	longest int
}

// lineBuffer is the size of the reader's buffer. It is smaller than
// contentCutMin: a line a call may keep (see cutResponse) is always in a
// buffer of its own.
const lineBuffer = 64 << 10

func newLineReader(r io.Reader, max int) *lineReader {
	return &lineReader{r: bufio.NewReaderSize(r, lineBuffer), max: max}
}

// next returns the next line without its line ending. A line that fits
// in the reader's buffer is valid until the next call; a longer one is in
// a buffer of its own (own), which the caller may give to
// jsonblob.Recycle once done with it. It returns the last line (if it
// does not end with a newline) together with io.EOF, and errLineTooLong,
// without reading the rest of the line, for a line over the limit.
//
// A longer line goes into a buffer from jsonblob.Buffer, which may have
// been kept from an earlier one, already in memory. Past 256 KiB it moves
// to one as large as the longest line so far, a megabyte at a time (the
// garbage collector cannot stop a goroutine inside one large copy). A
// line that turns out much shorter than its buffer is copied out of it,
// and the buffer kept.
func (lr *lineReader) next() (line []byte, own bool, err error) {
	for {
		chunk, err := lr.r.ReadSlice('\n')
		if line == nil && len(chunk) == 0 {
			return nil, false, err
		}
		if line == nil && err == nil {
			// The common case: a whole line in the reader's buffer.
			line = trimEOL(chunk)
			if len(line) > lr.max {
				return nil, false, errLineTooLong
			}
			return line, false, nil
		}
		n := len(line) + len(chunk)
		if n > lr.max+2 { // room for "\r\n"
			jsonblob.Recycle(line)
			return nil, false, errLineTooLong
		}
		if line == nil {
			line = jsonblob.Buffer(256 << 10)
		}
		if n > cap(line) {
			line = grow(line, min(max(2*cap(line), n, lr.longest), lr.max+2))
		}
		line = append(line, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if len(line) > 256<<10 {
			lr.longest = max(lr.longest, len(line))
		}
		if len(line) < cap(line)/4 {
			short := bytes.Clone(line)
			jsonblob.Recycle(line)
			line = short
		}
		line = trimEOL(line)
		if len(line) > lr.max {
			return nil, false, errLineTooLong
		}
		return line, true, err
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
	if len(b) > 0 && b[len(b)-1] == '\n' {
		b = b[:len(b)-1]
	}
	if len(b) > 0 && b[len(b)-1] == '\r' {
		b = b[:len(b)-1]
	}
	return b
}
