package intercept

import (
	"bufio"
	"compress/flate"
	"compress/zlib"
	"fmt"
	"io"
)

// newDeflateReader decodes a body whose Content-Encoding is "deflate".
// RFC 9110 says that is a zlib stream (RFC 1950: a two-byte header, the
// deflate data, an Adler-32 checksum), but servers have long sent bare
// deflate data (RFC 1951) under the same name, and browsers accept
// both. So does this: a body that begins with a valid zlib header is
// read as zlib, any other as bare deflate. (The two-byte check is the
// one browsers make; bare deflate data that happens to begin like a
// zlib header fails its checksum and is reported as an error.) The
// standard library has both decoders; this only chooses between them.
func newDeflateReader(r io.Reader) (io.Reader, error) {
	br := bufio.NewReader(r)
	head, err := br.Peek(2)
	if err != nil && len(head) < 2 {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("reading the start of the deflate data: %w", err)
	}
	if isZlibHeader(head[0], head[1]) {
		return zlib.NewReader(br)
	}
	return flate.NewReader(br), nil
}

// isZlibHeader reports whether two bytes are a zlib header (RFC 1950,
// section 2.2): compression method 8 (deflate), a window of at most 32
// KiB, and a check value that makes the pair a multiple of 31.
func isZlibHeader(cmf, flg byte) bool {
	return cmf&0x0f == 8 && cmf>>4 <= 7 && (uint16(cmf)<<8|uint16(flg))%31 == 0
}
