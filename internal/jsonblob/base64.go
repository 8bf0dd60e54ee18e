package jsonblob

import (
	"encoding/base64"
	"encoding/binary"
	"runtime"
	"slices"
	"sync"
)

// Large blobs are encoded and decoded here rather than by
// encoding/base64 alone, which takes several times longer than copying
// them while the other end of the line waits: with tables of 12-bit
// groups (two characters) instead of 6-bit ones, and on several CPUs.
// The output is the same: the standard alphabet with padding, and for
// decoding the same bytes and the same errors as
// base64.StdEncoding.DecodeString (anything unusual is left to it).

// splitMin is the size of input from which the work is shared among
// goroutines. (A variable for the tests.)
var splitMin = 1 << 20

// fastMin is the size of input from which the tables are used.
const fastMin = 4 << 10

const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

// tables holds, for each 12-bit group, its two characters (the first in
// the low byte); and for each pair of characters (the first in the low
// byte), its 12-bit group, or 0xffff when either is not in the alphabet.
type tables struct {
	enc [1 << 12]uint16
	dec [1 << 16]uint16
}

var getTables = sync.OnceValue(func() *tables {
	t := new(tables)
	for v := range t.enc {
		t.enc[v] = uint16(alphabet[v>>6]) | uint16(alphabet[v&63])<<8
	}
	var six [256]uint16
	for i := range six {
		six[i] = 0xffff
	}
	for i := range len(alphabet) {
		six[alphabet[i]] = uint16(i)
	}
	for p := range t.dec {
		a, b := six[p&0xff], six[p>>8]
		if a == 0xffff || b == 0xffff {
			t.dec[p] = 0xffff
		} else {
			t.dec[p] = a<<6 | b
		}
	}
	return t
})

// encode is base64.StdEncoding.Encode.
func encode(dst, src []byte) {
	if len(src) >= fastMin {
		t := getTables()
		for len(src) >= 14 && len(dst) >= 16 {
			// 12 bytes to 16 characters, from two loads of 8 bytes.
			x := binary.BigEndian.Uint64(src)
			y := binary.BigEndian.Uint64(src[6:])
			d := dst[:16]
			binary.LittleEndian.PutUint64(d, uint64(t.enc[x>>52])|uint64(t.enc[x>>40&0xfff])<<16|uint64(t.enc[x>>28&0xfff])<<32|uint64(t.enc[x>>16&0xfff])<<48)
			binary.LittleEndian.PutUint64(d[8:], uint64(t.enc[y>>52])|uint64(t.enc[y>>40&0xfff])<<16|uint64(t.enc[y>>28&0xfff])<<32|uint64(t.enc[y>>16&0xfff])<<48)
			src, dst = src[12:], dst[16:]
		}
	}
	base64.StdEncoding.Encode(dst, src)
}

// decodeQuanta decodes the leading groups of 16 characters of src that
// are all in the alphabet, and returns how many characters it consumed
// and how many bytes it wrote. Each group decodes on its own, whatever
// follows it.
func decodeQuanta(dst, src []byte) (si, di int) {
	if len(src) < fastMin {
		return 0, 0
	}
	t := getTables()
	for len(src)-si >= 16 && len(dst)-di >= 14 {
		s := src[si : si+16]
		x := binary.LittleEndian.Uint64(s)
		y := binary.LittleEndian.Uint64(s[8:])
		a, b, c, d := t.dec[uint16(x)], t.dec[uint16(x>>16)], t.dec[uint16(x>>32)], t.dec[x>>48]
		e, f, g, h := t.dec[uint16(y)], t.dec[uint16(y>>16)], t.dec[uint16(y>>32)], t.dec[y>>48]
		if (a|b|c|d|e|f|g|h)&0x8000 != 0 {
			break
		}
		out := dst[di : di+14]
		binary.BigEndian.PutUint64(out, uint64(a)<<52|uint64(b)<<40|uint64(c)<<28|uint64(d)<<16)
		binary.BigEndian.PutUint64(out[6:], uint64(e)<<52|uint64(f)<<40|uint64(g)<<28|uint64(h)<<16)
		si += 16
		di += 12
	}
	return si, di
}

// decode is base64.StdEncoding.Decode.
func decode(dst, src []byte) (int, error) {
	si, di := decodeQuanta(dst, src)
	n, err := base64.StdEncoding.Decode(dst[di:], src[si:])
	if err != nil {
		// For the exact error.
		return base64.StdEncoding.Decode(dst, src)
	}
	return di + n, nil
}

// parts says into how many pieces to split n bytes of work.
func parts(n int) int {
	return max(1, min(runtime.GOMAXPROCS(0), n/splitMin, 8))
}

// AppendEncode appends the standard base64 encoding of src to dst, as
// base64.StdEncoding.AppendEncode does.
func AppendEncode(dst, src []byte) []byte {
	n := base64.StdEncoding.EncodedLen(len(src))
	dst = slices.Grow(dst, n)
	out := dst[len(dst) : len(dst)+n]
	p := parts(len(src))
	// Pieces of a multiple of 3 bytes encode without padding into 4/3 of
	// their size, so each lands where the whole encoding would put it.
	step := len(src) / p / 3 * 3
	var wg sync.WaitGroup
	for i := range p - 1 {
		wg.Go(func() {
			encode(out[i*step/3*4:(i+1)*step/3*4], src[i*step:(i+1)*step])
		})
	}
	last := (p - 1) * step
	encode(out[last/3*4:], src[last:])
	wg.Wait()
	return dst[:len(dst)+n]
}

// DecodeString decodes standard base64 as base64.StdEncoding.DecodeString
// does: the same bytes, or the same error.
func DecodeString(src []byte) ([]byte, error) {
	return AppendDecode(nil, src)
}

// AppendDecode appends the decoding of standard base64 src to dst, as
// base64.StdEncoding.AppendDecode does: the same bytes, or the same error
// (and whatever was decoded before it).
func AppendDecode(dst, src []byte) ([]byte, error) {
	all := slices.Grow(dst, DecodedLen(src))
	n, err := decodeSplit(all[len(dst):cap(all)], src)
	return all[:len(dst)+n], err
}

// DecodedLen returns how many bytes decoding src writes at most: for
// valid padded base64, the length of what it decodes to (one or two bytes
// less than base64.StdEncoding.DecodedLen says when src ends with
// padding, so that an exact buffer is enough).
func DecodedLen(src []byte) int {
	n := base64.StdEncoding.DecodedLen(len(src))
	if len(src)%4 == 0 && len(src) > 0 && src[len(src)-1] == '=' {
		n--
		if src[len(src)-2] == '=' {
			n--
		}
	}
	return n
}

// decodeSplit decodes src into dst, which has room for it, as
// base64.StdEncoding.Decode does.
func decodeSplit(dst, src []byte) (int, error) {
	p := parts(len(src))
	if p == 1 {
		return decode(dst, src)
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
			// Bounded: the decoders write 8 bytes at a time.
			n, err := decode(dst[i*step/4*3:(i+1)*step/4*3], src[i*step:(i+1)*step])
			clean[i] = err == nil && n == step/4*3
		})
	}
	last := (p - 1) * step
	n, err := decode(dst[last/4*3:], src[last:])
	wg.Wait()
	if err == nil && !slices.Contains(clean, false) {
		return last/4*3 + n, nil
	}
	return base64.StdEncoding.Decode(dst, src)
}
