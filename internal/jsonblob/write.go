package jsonblob

import (
	"io"
	"unicode/utf8"
)

// writeChunk is how much of a large value WriteText and WriteBase64 hold
// encoded at once.
const writeChunk = 48 << 10 // a multiple of 3, for base64

// WriteText writes the body of the JSON string of text, without its
// quotes, exactly as encoding/json writes it (bytes that are not UTF-8
// as U+FFFD) (with HTML escaping when
// escapeHTML), a piece at a time into one small buffer: however large
// the text, its encoding (up to six times its size) is never held whole,
// and nothing is left for the garbage collector. encoding/json cannot do
// this: it encodes a whole string at once, from a copy.
func WriteText(w io.Writer, text []byte, escapeHTML bool) error {
	const hex = "0123456789abcdef"
	buf := make([]byte, 0, writeChunk+8)
	flush := func() error {
		_, err := w.Write(buf)
		buf = buf[:0]
		return err
	}
	for i := 0; i < len(text); {
		if len(buf) >= writeChunk {
			if err := flush(); err != nil {
				return err
			}
		}
		c := text[i]
		if c < utf8.RuneSelf {
			i++
			switch {
			case c == '"' || c == '\\':
				buf = append(buf, '\\', c)
			case c >= 0x20 && !(escapeHTML && (c == '<' || c == '>' || c == '&')):
				buf = append(buf, c)
			case c == '\n':
				buf = append(buf, '\\', 'n')
			case c == '\r':
				buf = append(buf, '\\', 'r')
			case c == '\t':
				buf = append(buf, '\\', 't')
			case c == '\b':
				buf = append(buf, '\\', 'b')
			case c == '\f':
				buf = append(buf, '\\', 'f')
			default:
				buf = append(buf, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			continue
		}
		r, n := utf8.DecodeRune(text[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			buf = append(buf, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			buf = append(buf, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			buf = append(buf, text[i:i+n]...)
		}
		i += n
	}
	return flush()
}

// WriteBase64 writes the standard base64 encoding of blob, a piece at a
// time.
func WriteBase64(w io.Writer, blob []byte) error {
	buf := make([]byte, 0, writeChunk/3*4)
	for len(blob) > 0 {
		n := min(len(blob), writeChunk)
		if _, err := w.Write(AppendEncode(buf[:0], blob[:n])); err != nil {
			return err
		}
		blob = blob[n:]
	}
	return nil
}
