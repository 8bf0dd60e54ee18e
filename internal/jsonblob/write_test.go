package jsonblob

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestWriteText compares WriteText with encoding/json on text of every
// kind, with characters across the pieces' boundaries.
func TestWriteText(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	var texts [][]byte
	texts = append(texts, nil, []byte("plain"), []byte("\x00\x1b]52;c;aGk=\x07\"\\<>&\u2028\u2029\u009b\x7f\b\f\r\t"), []byte("bad \xff\xc2 \xe2\x80 \xed\xa0\x80 end\xf0"))
	for c := range 0x80 {
		texts = append(texts, []byte{'a', byte(c), 'b'})
	}
	// Multi-byte characters straddling every offset around a boundary.
	for off := range 4 {
		texts = append(texts, []byte(strings.Repeat("a", writeChunk-off)+strings.Repeat("é€😀", 10)))
	}
	var b strings.Builder
	alphabet := []string{"a", "\x00", "\x1b", `"`, `\`, "<", "&", "é", "€", "😀", "\u2028", "\u2029", "\u009b", "\x7f", "\n", "\b", "\xff", "\xe2\x80"}
	for b.Len() < 3*writeChunk+17 {
		b.WriteString(alphabet[r.IntN(len(alphabet))])
	}
	texts = append(texts, []byte(b.String()))
	for _, text := range texts {
		for _, html := range []bool{false, true} {
			var want bytes.Buffer
			enc := json.NewEncoder(&want)
			enc.SetEscapeHTML(html)
			enc.Encode(string(text))
			var got bytes.Buffer
			got.WriteByte('"')
			if err := WriteText(&got, text, html); err != nil {
				t.Fatal(err)
			}
			got.WriteString("\"\n")
			if !bytes.Equal(got.Bytes(), want.Bytes()) {
				t.Errorf("WriteText of %d bytes (html %v) differs from encoding/json", len(text), html)
			}
		}
	}
}

func TestWriteBase64(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, n := range []int{0, 1, 2, 3, writeChunk - 1, writeChunk, writeChunk + 1, 5*writeChunk + 2} {
		blob := make([]byte, n)
		for i := range blob {
			blob[i] = byte(r.Uint32())
		}
		var got bytes.Buffer
		if err := WriteBase64(&got, blob); err != nil {
			t.Fatal(err)
		}
		if got.String() != base64.StdEncoding.EncodeToString(blob) {
			t.Errorf("WriteBase64 of %d bytes differs from encoding/base64", n)
		}
	}
}

func TestMember(t *testing.T) {
	b := []byte(`{"a":"x\",\"out\":\"\"","out":"","err":"","n":1}`)
	out, err := Member(b, "out")
	if err != nil || string(b[:out]) != `{"a":"x\",\"out\":\"\"","out":"` {
		t.Errorf("Member out = %d %v", out, err)
	}
	errAt, err := Member(b, "err")
	if err != nil || string(b[errAt:]) != `","n":1}` {
		t.Errorf("Member err = %d %v", errAt, err)
	}
	if _, err := Member(b, "missing"); err == nil {
		t.Error("Member of a missing key succeeded")
	}
}
