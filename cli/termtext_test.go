package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// hostile holds every class of character a terminal acts on.
var hostile = []string{
	"\x1b]52;c;aGVsbG8=\x07",   // OSC 52: write the clipboard
	"\x1b]0;title\x1b\\",       // OSC 0: window title, ST-terminated
	"\x1b[2J\x1b[H",            // CSI: clear the screen
	"\u009b31m",                // C1 CSI, as UTF-8
	"\x9b31m",                  // C1 CSI, as a raw byte
	"\u009d0;t\u009c",          // C1 OSC and ST
	"\x7f\x08\r",               // DEL, backspace, carriage return
	"a\u202eb\u2066c\u2028d",   // bidi override, isolate, line separator
	"\xff\xfe\xc2",             // not UTF-8
	"\x00\x01\x05\x0e\x0f\x1a", // other C0
	"\nairlock: forged line",   // a line of its own
}

// raw reports a byte or character of s that a terminal would act on;
// with keepLines, newlines and tabs pass.
func raw(s string, keepLines bool) (string, bool) {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && n == 1) || (!termSafeRune(r) && !(keepLines && (r == '\n' || r == '\t'))) {
			return s[i : i+n], true
		}
		i += n
	}
	return "", false
}

func TestTermText(t *testing.T) {
	for _, h := range hostile {
		got := termText("file " + h + " end")
		if c, ok := raw(got, false); ok {
			t.Errorf("termText(%q) = %q: %q reaches the terminal", h, got, c)
		}
		if !strings.HasPrefix(got, "file ") || !strings.HasSuffix(got, " end") {
			t.Errorf("termText(%q) = %q: the text around is changed", h, got)
		}
	}
	for in, want := range map[string]string{
		"plain name.txt":           "plain name.txt",
		"ünïcødé 😀 日本":             "ünïcødé 😀 日本",
		"a\x1b[31mb":               `a\x1b[31mb`,
		"a\u009bb":                 `a\u009bb`,
		"a\x9bb":                   `a\x9bb`,
		"a\x7fb":                   `a\x7fb`,
		"nl\nairlock: forged\ttab": `nl\x0aairlock: forged\x09tab`,
	} {
		if got := termText(in); got != want {
			t.Errorf("termText(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestTermSafeJSON: JSON through termSafeJSON is the same JSON with no
// character a terminal acts on, however the writes split it.
func TestTermSafeJSON(t *testing.T) {
	v := map[string]any{"names": hostile, "ok": "ünïcødé 😀 €"}
	b, err := marshalJSON(v)
	if err != nil {
		t.Fatal(err)
	}
	for step := 1; step <= 7; step++ {
		var out bytes.Buffer
		w := &termSafeJSON{w: &out}
		for i := 0; i < len(b); i += step {
			if _, err := w.Write(b[i:min(i+step, len(b))]); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		if c, ok := raw(out.String(), true); ok {
			t.Errorf("step %d: %q reaches the terminal in %s", step, c, out.Bytes())
		}
		var back, want map[string]any
		if err := json.Unmarshal(out.Bytes(), &back); err != nil {
			t.Fatalf("step %d: not JSON: %v\n%s", step, err, out.Bytes())
		}
		json.Unmarshal(b, &want)
		if bb, wb := mustJSON(back), mustJSON(want); bb != wb {
			t.Errorf("step %d: decodes to %s, want %s", step, bb, wb)
		}
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
