package jsonblob

import (
	"encoding/base64"
	"runtime"
	"slices"
	"sync"
)

// splitMin is the size of input from which base64 work is shared among
// goroutines: a large file takes several times longer to encode or decode
// on one CPU than to copy, and the other end of the line waits for it.
// (A variable for the tests.)
var splitMin = 1 << 20

// parts says into how many pieces to split n bytes of base64 work.
func parts(n int) int {
	return max(1, min(runtime.GOMAXPROCS(0), n/splitMin, 8))
}

// AppendEncode appends the standard base64 encoding of src to dst, as
// base64.StdEncoding.AppendEncode does, on several CPUs when src is
// large.
func AppendEncode(dst, src []byte) []byte {
	enc := base64.StdEncoding
	p := parts(len(src))
	if p == 1 {
		return enc.AppendEncode(dst, src)
	}
	n := enc.EncodedLen(len(src))
	dst = slices.Grow(dst, n)
	out := dst[len(dst) : len(dst)+n]
	// Pieces of a multiple of 3 bytes encode without padding into 4/3 of
	// their size, so each lands where the whole encoding would put it.
	step := len(src) / p / 3 * 3
	var wg sync.WaitGroup
	for i := range p - 1 {
		wg.Go(func() {
			enc.Encode(out[i*step/3*4:(i+1)*step/3*4], src[i*step:(i+1)*step])
		})
	}
	last := (p - 1) * step
	enc.Encode(out[last/3*4:], src[last:])
	wg.Wait()
	return dst[:len(dst)+n]
}

// DecodeString decodes standard base64 as base64.StdEncoding.DecodeString
// does (the same bytes, or the same error), on several CPUs when src is
// large.
func DecodeString(src []byte) ([]byte, error) {
	enc := base64.StdEncoding
	dst := make([]byte, enc.DecodedLen(len(src)))
	p := parts(len(src))
	if p == 1 {
		n, err := enc.Decode(dst, src)
		return dst[:n], err
	}
	// Pieces of a multiple of 4 characters decode into 3/4 of their size
	// when they hold neither padding nor the line breaks the decoder
	// skips; then each piece's bytes are where the whole decoding would
	// put them, and the last piece decodes alone as it would at the end
	// of the whole. Anything else is decoded again in one piece, for the
	// exact error.
	step := len(src) / p / 4 * 4
	var wg sync.WaitGroup
	clean := make([]bool, p-1)
	for i := range p - 1 {
		wg.Go(func() {
			// Bounded: the decoder writes 8 bytes at a time.
			n, err := enc.Decode(dst[i*step/4*3:(i+1)*step/4*3], src[i*step:(i+1)*step])
			clean[i] = err == nil && n == step/4*3
		})
	}
	last := (p - 1) * step
	n, err := enc.Decode(dst[last/4*3:], src[last:])
	wg.Wait()
	if err == nil && !slices.Contains(clean, false) {
		return dst[:last/4*3+n], nil
	}
	n, err = enc.Decode(dst, src)
	return dst[:n], err
}
