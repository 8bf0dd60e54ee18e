package rpc

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// errLineTooLong reports a line longer than the limit; it was discarded.
var errLineTooLong = errors.New("line too long")

// lineReader reads newline-terminated lines, never buffering more than
// max bytes of one: the rest of a longer line is read and thrown away.
type lineReader struct {
	r   *bufio.Reader
	max int64
}

func newLineReader(r io.Reader, max int64) *lineReader {
	return &lineReader{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

// next returns the next line without its line ending, in a slice the
// caller owns. A line longer than max is consumed whole and reported as
// errLineTooLong with its length so far; the reader can go on after it.
// At the end of input it returns io.EOF (after a last unterminated line,
// which is returned first).
func (lr *lineReader) next() ([]byte, int64, error) {
	var line []byte
	var n int64
	tooLong := false
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
		line = trimEOL(line)
		if int64(len(line)) > lr.max {
			return nil, n, errLineTooLong
		}
		return line, n, nil
	}
}

func trimEOL(b []byte) []byte {
	b = bytes.TrimSuffix(b, []byte("\n"))
	return bytes.TrimSuffix(b, []byte("\r"))
}
