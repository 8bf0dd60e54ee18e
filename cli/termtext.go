package cli

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// airlock's own messages carry text that a sandbox chooses: file names,
// errors relayed from the agent, records. Written raw, its escape
// sequences would reach the user's terminal (set the title, redraw the
// screen, write the clipboard with OSC 52). Every such message goes
// through termText; JSON output through termSafeJSON. A
// command's own output (run, exec, attach, logs) passes through as it is.

// termText returns s with every character a terminal could act on written
// as a visible escape: C0 controls (newline and tab included, so that a
// name cannot forge a line of output) as \x1b, DEL as \x7f, C1 controls
// (U+0080 to U+009F, CSI among them) as \u009b, bytes that are not UTF-8
// as \xff, and the controls that reorder or split lines (bidi overrides,
// U+2028, U+2029) as \u202e. Everything else is kept.
func termText(s string) string {
	i := 0
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && n == 1) || !termSafeRune(r) {
			break
		}
		i += n
	}
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	b.WriteString(s[:i])
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case termSafeRune(r):
			b.WriteString(s[i : i+n])
		case r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
		i += n
	}
	return b.String()
}

// termSafeRune says whether r may reach a terminal as it is.
func termSafeRune(r rune) bool {
	switch {
	case r < 0x20, r >= 0x7f && r <= 0x9f:
		return false
	case r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e,
		r >= 0x2066 && r <= 0x2069, r == 0x2028, r == 0x2029:
		return false
	}
	return true
}

// termSafeJSON passes JSON through to w with the characters that
// encoding/json leaves raw but a terminal acts on (DEL, C1 controls, bidi
// overrides) written as \u escapes, which is the same JSON. encoding/json
// escapes C0 controls, U+2028 and U+2029 and replaces invalid UTF-8
// itself. Those characters can only occur inside JSON strings, so no
// parsing is needed. A character split between two writes is held back
// until the rest arrives.
type termSafeJSON struct {
	w    io.Writer
	tail [utf8.UTFMax]byte
	n    int
}

func (t *termSafeJSON) Write(p []byte) (int, error) {
	total := len(p)
	if t.n > 0 {
		// Complete the held character first.
		for t.n < utf8.UTFMax && len(p) > 0 && !utf8.FullRune(t.tail[:t.n]) {
			t.tail[t.n] = p[0]
			t.n++
			p = p[1:]
		}
		if !utf8.FullRune(t.tail[:t.n]) {
			return total, nil
		}
		if err := t.emit(t.tail[:t.n]); err != nil {
			return 0, err
		}
		t.n = 0
	}
	// Hold back an incomplete character at the end.
	cut := len(p)
	for i := len(p) - 1; i >= 0 && i >= len(p)-utf8.UTFMax; i-- {
		if utf8.RuneStart(p[i]) {
			if !utf8.FullRune(p[i:]) {
				cut = i
			}
			break
		}
	}
	if err := t.emit(p[:cut]); err != nil {
		return 0, err
	}
	t.n = copy(t.tail[:], p[cut:])
	return total, nil
}

// Flush writes a character held back, if any.
func (t *termSafeJSON) Flush() error {
	if t.n == 0 {
		return nil
	}
	err := t.emit(t.tail[:t.n])
	t.n = 0
	return err
}

func (t *termSafeJSON) emit(p []byte) error {
	start := 0
	for i := 0; i < len(p); {
		c := p[i]
		if c < 0x7f {
			i++
			continue
		}
		r, n := utf8.DecodeRune(p[i:])
		if c == 0x7f || (n > 1 && !termSafeRune(r)) {
			if _, err := t.w.Write(p[start:i]); err != nil {
				return err
			}
			if _, err := fmt.Fprintf(t.w, `\u%04x`, r); err != nil {
				return err
			}
			start = i + n
		}
		i += n
	}
	_, err := t.w.Write(p[start:])
	return err
}
