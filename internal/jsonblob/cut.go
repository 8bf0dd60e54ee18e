// Package jsonblob moves one large string, such as a base64-encoded file,
// in and out of a JSON-RPC line without encoding/json scanning it.
//
// encoding/json goes over a string value several times (validation,
// decoding, unquoting, and again for a json.RawMessage in between) at a
// fraction of memory speed. For a line that is almost all one base64
// string that is most of the cost of moving it. Cut takes that string out
// of a line after one structural pass that skips strings with
// bytes.IndexByte, so that encoding/json only sees the rest of the line;
// AppendMarshal writes a line with such a string without encoding/json
// ever seeing it.
package jsonblob

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"runtime"
	"sync"
	"unicode"
	"unicode/utf8"
)

// MaxDepth bounds the nesting of objects and arrays Cut walks through;
// deeper input is not cut. It is well below encoding/json's own limit.
const MaxDepth = 1000

// Cut finds the string value at path (the keys of nested objects, from
// the top-level object down) in the JSON text line, without decoding it.
// It returns rest, a fresh copy of line with that value replaced by the
// empty string "", and raw, the bytes between the value's quotes (a part
// of line, not a copy).
//
// Cut reports ok only when it is sure that decoding rest with
// encoding/json and then setting the value at path to string(raw) gives
// what encoding/json gives for line, so callers can take the slow path on
// anything else. In particular ok means that:
//
//   - line is valid JSON (at most MaxDepth deep);
//   - each object on the path has exactly one member whose key decodes
//     to the path element, and no other member whose key encoding/json
//     would match to it when decoding into a struct (its case-insensitive
//     matching, escaped keys included);
//   - the value at path is a string without escapes or control
//     characters, and valid UTF-8: its text is its value.
func Cut(line []byte, path ...string) (rest, raw []byte, ok bool) {
	w := walker{b: line, path: path}
	if !w.walk() || !w.found {
		return nil, nil, false
	}
	rest = make([]byte, 0, len(line)-(w.end-w.start))
	rest = append(rest, line[:w.start]...)
	rest = append(rest, line[w.end:]...)
	return rest, line[w.start:w.end:w.end], true
}

// walker is one pass of Cut over b.
type walker struct {
	b     []byte
	i     int
	path  []string
	stack []frame

	found      bool
	start, end int // the value's text, between its quotes
}

// frame is an open object or array.
type frame struct {
	object bool
	// level is, for an object on the path, how many path elements lead
	// to it (0 for the top level); -1 off the path.
	level int
	// matched says that an object on the path had its member.
	matched bool
}

// walk checks b and finds the value. It returns false when b is not
// valid JSON or the value cannot be cut (found is then meaningless).
func (w *walker) walk() bool {
	level := 0 // that of the value about to be read; -1 off the path
	for {
		// One value.
		w.space()
		if w.i >= len(w.b) {
			return false
		}
		switch c := w.b[w.i]; {
		case level == len(w.path):
			if c != '"' {
				return false // not a string
			}
			w.i++
			start := w.i
			plain, ok := w.str()
			if !ok || !plain {
				return false
			}
			w.found, w.start, w.end = true, start, w.i-1
		case c == '{':
			if len(w.stack) >= MaxDepth {
				return false
			}
			w.stack = append(w.stack, frame{object: true, level: level})
			w.i++
			w.space()
			if w.i < len(w.b) && w.b[w.i] == '}' {
				w.i++
				w.pop()
				break
			}
			var ok bool
			if level, ok = w.key(); !ok {
				return false
			}
			continue
		case level >= 0:
			return false // on the path, but not an object
		case c == '[':
			if len(w.stack) >= MaxDepth {
				return false
			}
			w.stack = append(w.stack, frame{level: -1})
			w.i++
			w.space()
			if w.i < len(w.b) && w.b[w.i] == ']' {
				w.i++
				w.pop()
				break
			}
			level = -1
			continue
		case c == '"':
			w.i++
			if _, ok := w.str(); !ok {
				return false
			}
		case c == 't':
			if !w.literal("true") {
				return false
			}
		case c == 'f':
			if !w.literal("false") {
				return false
			}
		case c == 'n':
			if !w.literal("null") {
				return false
			}
		default:
			if !w.number() {
				return false
			}
		}
		// After a value: close containers, up to the next value.
		for {
			w.space()
			if len(w.stack) == 0 {
				return w.i == len(w.b)
			}
			if w.i >= len(w.b) {
				return false
			}
			top := &w.stack[len(w.stack)-1]
			c := w.b[w.i]
			w.i++
			switch {
			case c == ',' && top.object:
				var ok bool
				if level, ok = w.key(); !ok {
					return false
				}
			case c == ',':
				level = -1
			case c == '}' && top.object, c == ']' && !top.object:
				w.pop()
				continue
			default:
				return false
			}
			break
		}
	}
}

// pop closes the innermost container.
func (w *walker) pop() { w.stack = w.stack[:len(w.stack)-1] }

// key reads a member's key and its colon in the innermost object, and
// returns the level of the member's value.
func (w *walker) key() (int, bool) {
	w.space()
	if w.i >= len(w.b) || w.b[w.i] != '"' {
		return 0, false
	}
	w.i++
	start := w.i
	plain, ok := w.str()
	if !ok {
		return 0, false
	}
	end := w.i // just after the closing quote
	k := w.b[start : end-1]
	w.space()
	if w.i >= len(w.b) || w.b[w.i] != ':' {
		return 0, false
	}
	w.i++
	top := &w.stack[len(w.stack)-1]
	if top.level < 0 {
		return -1, true
	}
	elem := w.path[top.level]
	if !plain {
		// Escapes, control characters or invalid UTF-8 (which
		// encoding/json turns into U+FFFD): decode it as encoding/json
		// does. The key has been checked, so this cannot fail.
		var s string
		if json.Unmarshal(w.b[start-1:end], &s) != nil {
			return 0, false
		}
		k = []byte(s)
	}
	switch {
	case string(k) == elem:
		if top.matched {
			return 0, false // a duplicate: the last one wins
		}
		top.matched = true
		return top.level + 1, true
	case foldEqual(k, elem):
		// encoding/json would match it to a struct field named elem.
		return 0, false
	}
	return -1, true
}

// foldEqual reports whether encoding/json matches key k to a struct field
// named name when they differ: as it does, it folds ASCII letters to
// upper case and other runes to the smallest rune of their fold set.
func foldEqual(k []byte, name string) bool {
	return string(appendFolded(nil, k)) == string(appendFolded(nil, []byte(name)))
}

func foldRune(r rune) rune {
	for {
		r2 := unicode.SimpleFold(r)
		if r2 <= r {
			return r2
		}
		r = r2
	}
}

func appendFolded(out, in []byte) []byte {
	for i := 0; i < len(in); {
		if c := in[i]; c < utf8.RuneSelf {
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			out = append(out, c)
			i++
			continue
		}
		r, n := utf8.DecodeRune(in[i:])
		out = utf8.AppendRune(out, foldRune(r))
		i += n
	}
	return out
}

// space skips JSON whitespace.
func (w *walker) space() {
	for w.i < len(w.b) {
		switch w.b[w.i] {
		case ' ', '\t', '\n', '\r':
			w.i++
		default:
			return
		}
	}
}

// literal reads true, false or null.
func (w *walker) literal(lit string) bool {
	if len(w.b)-w.i < len(lit) || string(w.b[w.i:w.i+len(lit)]) != lit {
		return false
	}
	w.i += len(lit)
	return true
}

// number reads a number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (w *walker) number() bool {
	b, i := w.b, w.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(b, i)
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return false
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return false
		}
		i = j
	}
	w.i = i
	return true
}

func digits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

// str reads the rest of a string whose opening quote is just before
// w.i, up to and including its closing quote. plain says that its text
// is its value: no escapes, and valid UTF-8.
func (w *walker) str() (plain, ok bool) {
	b, i := w.b, w.i
	start := i
	plain = true
	high := false
	for {
		k, h := special(b[i:])
		if k < 0 {
			return false, false
		}
		high = high || h
		i += k
		switch b[i] {
		case '"':
			if plain && high && !utf8.Valid(b[start:i]) {
				plain = false
			}
			w.i = i + 1
			return plain, true
		case '\\':
		default:
			return false, false // a control character
		}
		plain = false
		i++
		if i >= len(b) {
			return false, false
		}
		switch b[i] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			i++
		case 'u':
			if len(b)-i < 5 {
				return false, false
			}
			for _, h := range b[i+1 : i+5] {
				if !isHex(h) {
					return false, false
				}
			}
			i += 5
		default:
			return false, false
		}
	}
}

// special returns the index in b of the first quote, backslash or control
// character (-1 if none), and whether a byte above 0x7f comes before it.
// It looks in windows that double in size, so that finding a character
// costs about as much as the bytes before it, whatever follows; large
// windows are shared among CPUs.
func special(b []byte) (int, bool) {
	high := false
	for off, win := 0, 64<<10; off < len(b); off, win = off+win, 2*win {
		end := min(off+win, len(b))
		k, h := specialIn(b[off:end])
		high = high || h
		if k >= 0 {
			return off + k, high
		}
		if end == len(b) {
			break
		}
	}
	return -1, high
}

// specialParallel is the size of window from which special shares it
// among CPUs. (A variable for the tests.)
var specialParallel = 4 << 20

// specialIn is special in one window.
func specialIn(b []byte) (int, bool) {
	p := max(1, min(runtime.GOMAXPROCS(0), len(b)/(specialParallel/2), 8))
	if p == 1 {
		return specialSeq(b)
	}
	type found struct {
		k    int
		high bool
	}
	res := make([]found, p)
	step := len(b) / p
	var wg sync.WaitGroup
	for i := 1; i < p; i++ {
		wg.Go(func() {
			end := (i + 1) * step
			if i == p-1 {
				end = len(b)
			}
			res[i].k, res[i].high = specialSeq(b[i*step : end])
		})
	}
	res[0].k, res[0].high = specialSeq(b[:step])
	wg.Wait()
	high := false
	for i, r := range res {
		high = high || r.high
		if r.k >= 0 {
			return i*step + r.k, high
		}
	}
	return -1, high
}

// specialSeq is specialIn on one CPU.
func specialSeq(b []byte) (int, bool) {
	k := indexByte(b, '"')
	end := len(b)
	if k >= 0 {
		end = k
	}
	if bs := indexByte(b[:end], '\\'); bs >= 0 {
		k, end = bs, bs
	}
	ctl, high := scan(b[:end])
	if ctl {
		for i, c := range b[:end] {
			if c < 0x20 {
				_, high = scan(b[:i])
				return i, high
			}
		}
	}
	return k, high
}

// indexByte is bytes.IndexByte a megabyte at a time: the garbage
// collector cannot stop a goroutine inside one call of it.
func indexByte(b []byte, c byte) int {
	const window = 1 << 20
	for off := 0; off < len(b); off += window {
		if i := bytes.IndexByte(b[off:min(off+window, len(b))], c); i >= 0 {
			return off + i
		}
	}
	return -1
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// scan reports whether b has a control character (below 0x20, which JSON
// does not allow in a string) and whether it has bytes above 0x7f, eight
// bytes at a time.
func scan(b []byte) (ctl, high bool) {
	const (
		ones   = 0x0101010101010101
		highs  = 0x8080808080808080
		spaces = 0x20 * ones
	)
	var acc uint64
	for len(b) >= 32 {
		x0 := binary.LittleEndian.Uint64(b)
		x1 := binary.LittleEndian.Uint64(b[8:])
		x2 := binary.LittleEndian.Uint64(b[16:])
		x3 := binary.LittleEndian.Uint64(b[24:])
		if ((x0-spaces)&^x0|(x1-spaces)&^x1|(x2-spaces)&^x2|(x3-spaces)&^x3)&highs != 0 {
			return true, true
		}
		acc |= x0 | x1 | x2 | x3
		b = b[32:]
	}
	for len(b) >= 8 {
		x := binary.LittleEndian.Uint64(b)
		// (x - 0x20 in each byte) & ^x has a byte's high bit set where
		// that byte is below 0x20 (or where a borrow came from such a
		// byte below it): exact for "is any byte below 0x20".
		if (x-spaces)&^x&highs != 0 {
			return true, true
		}
		acc |= x
		b = b[8:]
	}
	for _, c := range b {
		if c < 0x20 {
			return true, true
		}
		acc |= uint64(c)
	}
	return false, acc&highs != 0
}
