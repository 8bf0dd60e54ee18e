package jsonblob

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"testing"
)

// fuzzPaths are the paths FuzzCut looks for; the fuzzer picks one.
var fuzzPaths = [][]string{
	{"params", "content"},
	{"result", "content"},
	{"content"},
	{},
	{"a", "b", "c"},
}

// FuzzCut checks Cut against encoding/json: whenever Cut cuts, the line
// is valid, and decoding the rest with the value put back gives what
// decoding the line gives; and for a base64 value, decoding raw gives
// what decoding the string encoding/json found gives.
func FuzzCut(f *testing.F) {
	for _, seed := range []string{
		`{"jsonrpc":"2.0","method":"write_file","params":{"path":"/a","content":"QUJD","mode":420},"id":1}`,
		`{"jsonrpc":"2.0","result":{"content":"QUJD","size":3,"mode":420},"id":"x"}`,
		`{"params":{"content":"Q\u0041JD"}}`,
		`{"params":{"content":"QUJD","content":"REVG"}}`,
		`{"params":{"Content":"QUJD"},"x":[{"content":"no"}]}`,
		`{"paramſ":{"content":"QUJD"}}`,
		`{"params":{"con\u0074ent":"QUJD"}}`,
		`{"a":{"b":{"c":"d"}},"x":[1,-2.5e3,true,false,null,"\"\\\/\b\f\n\r\t"]}`,
		`"QUJD"`,
	} {
		for i := range fuzzPaths {
			f.Add([]byte(seed), uint8(i))
		}
	}
	f.Fuzz(func(t *testing.T, line []byte, which uint8) {
		path := fuzzPaths[int(which)%len(fuzzPaths)]
		rest, raw, ok := Cut(line, path...)
		if !ok {
			return
		}
		checkCut(t, line, path, rest, raw)
		// What the server and client do with the value.
		var v any
		if json.Unmarshal(line, &v) != nil {
			t.Fatal("unreachable: checked by checkCut")
		}
		for _, k := range path {
			v = v.(map[string]any)[k]
		}
		want, wantErr := base64.StdEncoding.DecodeString(v.(string))
		got, err := DecodeString(raw)
		if (err == nil) != (wantErr == nil) || string(got) != string(want) {
			t.Fatalf("DecodeString(%q) = %q, %v; want %q, %v", raw, got, err, want, wantErr)
		}
	})
}

// FuzzBase64 compares the encoder and decoder with encoding/base64 on
// inputs large enough for their tables, with a byte of the encoding
// changed.
func FuzzBase64(f *testing.F) {
	f.Add([]byte("hello, world"), uint16(5), byte('='))
	f.Add([]byte{0, 1, 2}, uint16(0), byte('A'))
	f.Add([]byte("x"), uint16(700), byte('\n'))
	f.Fuzz(func(t *testing.T, seed []byte, at uint16, c byte) {
		src := bytes.Repeat(append(seed, 1), 3*fastMin/(len(seed)+1)+1)
		enc := AppendEncode(nil, src)
		if want := base64.StdEncoding.EncodeToString(src); string(enc) != want {
			t.Fatalf("AppendEncode differs from encoding/base64")
		}
		enc[int(at)%len(enc)] = c
		want, wantErr := base64.StdEncoding.DecodeString(string(enc))
		got, err := DecodeString(enc)
		if !bytes.Equal(got, want) || fmt.Sprint(err) != fmt.Sprint(wantErr) {
			t.Fatalf("DecodeString = %d bytes, %v; want %d bytes, %v", len(got), err, len(want), wantErr)
		}
	})
}

// FuzzWriteText compares WriteText with encoding/json on any bytes, as
// they come from a command's output.
func FuzzWriteText(f *testing.F) {
	f.Add([]byte("plain text\n"), false)
	f.Add([]byte("\x00\x1b]52;c;aGk=\x07\"\\<>&\u2028\u2029\u009b\x7f\b\f"), true)
	f.Add([]byte("bad \xff\xc2 \xe2\x80 \xed\xa0\x80 end\xf0"), false)
	f.Fuzz(func(t *testing.T, text []byte, html bool) {
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(html)
		if err := enc.Encode(string(text)); err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		got.WriteByte('"')
		if err := WriteText(&got, text, html); err != nil {
			t.Fatal(err)
		}
		got.WriteString("\"\n")
		if !bytes.Equal(got.Bytes(), want.Bytes()) {
			t.Fatalf("WriteText(%q) = %s, want %s", text, got.Bytes(), want.Bytes())
		}
	})
}
