package jsonblob

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

func TestCut(t *testing.T) {
	pc := []string{"params", "content"}
	for _, tc := range []struct {
		line string
		path []string
		raw  string // "" with ok false: not cut
		ok   bool
	}{
		{`{"params":{"content":"QUJD"}}`, pc, "QUJD", true},
		{` { "jsonrpc" : "2.0" , "method":"write_file", "params" : { "path":"/a", "content" : "QUJD" , "mode":420 } , "id" : 1 } `, pc, "QUJD", true},
		{`{"params":{"content":""}}`, pc, "", true},
		{`{"id":[1,2,{"params":{"content":"x"}}],"params":{"x":{"content":"no"},"content":"yes","y":[{"content":"no"}]},"content":"no"}`, pc, "yes", true},
		{`{"params":{"content":"héllo ☃"}}`, pc, "héllo ☃", true},
		{`{"params":{"con\u0074ent":"QUJD"}}`, pc, "QUJD", true}, // the key decodes to "content": its value
		{`{"params":{"contents":"a","conten":"b","content":"QUJD","\u00e9":1}}`, pc, "QUJD", true},
		{`{"a":-0.5e+10,"b":[true,false,null,0,1.25E-3,"s\"\\\/\b\f\n\r\t\u12aB"],"params":{"content":"QUJD"}}`, pc, "QUJD", true},
		{`"QUJD"`, nil, "QUJD", true},
		{`{"content":"QUJD"}`, []string{"content"}, "QUJD", true},

		// The slow path must decide these.
		{`{"params":{"content":"Q\u0041JD"}}`, pc, "", false},    // an escape
		{`{"params":{"content":"QU\/JD"}}`, pc, "", false},       // an escape
		{`{"params":{"content":"a\u0000"}}`, pc, "", false},      // an escape
		{"{\"params\":{\"content\":\"QU\tJD\"}}", pc, "", false}, // a control character: invalid JSON
		{"{\"params\":{\"content\":\"QU\rJD\"}}", pc, "", false}, // the base64 decoder would skip it
		{"{\"params\":{\"content\":\"\xff\"}}", pc, "", false},   // invalid UTF-8 decodes to U+FFFD
		{`{"params":{"content":"QUJD","content":"REVG"}}`, pc, "", false},
		{`{"params":{"content":"QUJD"},"params":{"path":"/a"}}`, pc, "", false},
		{`{"params":{"Content":"QUJD"}}`, pc, "", false},
		{`{"params":{"content":"QUJD","CONTENT":"REVG"}}`, pc, "", false},
		{`{"Params":{"content":"QUJD"}}`, pc, "", false},
		{`{"paramſ":{"content":"QUJD"}}`, pc, "", false},      // ſ folds to S
		{`{"param\u017f":{"content":"QUJD"}}`, pc, "", false}, // escaped ſ
		{`{"params":{"content":"QUJD","con\u0074ent":"x"}}`, pc, "", false},
		{`{"params":{"content":1}}`, pc, "", false},
		{`{"params":{"content":null}}`, pc, "", false},
		{`{"params":{"content":["QUJD"]}}`, pc, "", false},
		{`{"params":["content","QUJD"]}`, pc, "", false},
		{`{"params":"content"}`, pc, "", false},
		{`{"params":{}}`, pc, "", false},
		{`{"other":{"content":"QUJD"}}`, pc, "", false},
		{`[{"params":{"content":"QUJD"}}]`, pc, "", false},
		{`{"params":{"content":"QUJD"}}x`, pc, "", false},
		{`{"params":{"content":"QUJD"}`, pc, "", false},
		{`{"params":{"content":"QUJD}}`, pc, "", false},
		{`{"params":{"content":"QUJD"}},`, pc, "", false},
		{`{"params":{"content":"QUJD",}}`, pc, "", false},
		{`{"params":{"content":"QUJD"},"x":01}`, pc, "", false},
		{`{"params":{"content":"QUJD"},"x":1.}`, pc, "", false},
		{`{"params":{"content":"QUJD"},"x":"\x"}`, pc, "", false},
		{`{"params":{"content":"QUJD"},"x":"\u12g4"}`, pc, "", false},
		{`{"params":{"content":"QUJD"},"x":tru}`, pc, "", false},
		{`{"params":{"content":"QUJD"},"x":[1,]}`, pc, "", false},
		{`{"params":{"content":"QUJD"},"x":[1}`, pc, "", false},
		{`{"params":{"content":"QUJD"},"x"}`, pc, "", false},
		{`{"params":{"content":"QUJD"} "x":1}`, pc, "", false},
		{``, pc, "", false},
		{`{"params":{"content":"QUJD"}}`, []string{"params", "content", "x"}, "", false},
		{`{"a":` + strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth) + `,"content":"x"}`, []string{"content"}, "", false},
	} {
		rest, raw, ok := Cut([]byte(tc.line), tc.path...)
		if ok != tc.ok || string(raw) != tc.raw {
			t.Errorf("Cut(%s, %q) = %q, %v; want %q, %v", tc.line, tc.path, raw, ok, tc.raw, tc.ok)
			continue
		}
		if ok {
			checkCut(t, []byte(tc.line), tc.path, rest, raw)
		}
	}
	// Deep, but within the limit.
	deep := `{"a":` + strings.Repeat("[", MaxDepth-1) + strings.Repeat("]", MaxDepth-1) + `,"content":"x"}`
	if _, raw, ok := Cut([]byte(deep), "content"); !ok || string(raw) != "x" {
		t.Errorf("Cut of a line %d deep: %q, %v", MaxDepth, raw, ok)
	}
}

// TestCutRest checks what rest is: the line with the value emptied.
func TestCutRest(t *testing.T) {
	line := []byte(`{"params":{"path":"/a","content":"QUJD","mode":1},"id":1}`)
	rest, raw, ok := Cut(line, "params", "content")
	if !ok || string(rest) != `{"params":{"path":"/a","content":"","mode":1},"id":1}` || string(raw) != "QUJD" {
		t.Fatalf("Cut = %s, %s, %v", rest, raw, ok)
	}
	rest[0] = 'x'
	if line[0] != '{' {
		t.Fatal("rest shares the line's memory")
	}
	if cap(raw) != len(raw) {
		t.Fatal("raw can be appended to over the line")
	}
}

// checkCut checks Cut's promise: decoding rest and putting raw back at
// path gives what decoding line gives, into generic values and into
// structs (whose keys match without regard to case).
func checkCut(t *testing.T, line []byte, path []string, rest, raw []byte) {
	t.Helper()
	if !json.Valid(line) || !json.Valid(rest) {
		t.Fatalf("Cut accepted invalid JSON: %q (rest %q)", line, rest)
	}
	want, err1 := decodeAny(line)
	got, err2 := decodeAny(rest)
	if err1 != nil || err2 != nil {
		t.Fatalf("decoding: %v, %v", err1, err2)
	}
	if len(path) == 0 {
		got = string(raw)
	} else {
		m, _ := got.(map[string]any)
		for _, k := range path[:len(path)-1] {
			m, _ = m[k].(map[string]any)
		}
		if m == nil {
			t.Fatalf("no object at %q in %s", path, rest)
		}
		if m[path[len(path)-1]] != "" {
			t.Fatalf("rest %s does not hold an empty string at %q", rest, path)
		}
		m[path[len(path)-1]] = string(raw)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Cut(%q, %q):\nrest+raw decodes to %#v\nthe line to        %#v", line, path, got, want)
	}
	if ts := structFor(path); ts != nil {
		want := reflect.New(ts)
		got := reflect.New(ts)
		err1 := json.Unmarshal(line, want.Interface())
		err2 := json.Unmarshal(rest, got.Interface())
		if (err1 == nil) != (err2 == nil) {
			t.Fatalf("Cut(%q, %q): decoding into %v: %v, rest: %v", line, path, ts, err1, err2)
		}
		if err1 != nil {
			return
		}
		v := got.Elem()
		for range path {
			v = v.Field(0)
		}
		if v.String() != "" {
			t.Fatalf("Cut(%q, %q): rest decodes into a struct with %q at the path", line, path, v.String())
		}
		v.SetString(string(raw))
		if !reflect.DeepEqual(got.Interface(), want.Interface()) {
			t.Fatalf("Cut(%q, %q):\nrest+raw decodes to %+v\nthe line to        %+v", line, path, got.Elem(), want.Elem())
		}
	}
}

func decodeAny(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// structFor returns a struct type whose first field, at each level, is
// the path element (nil when the path has no such type here).
func structFor(path []string) reflect.Type {
	var t reflect.Type = reflect.TypeFor[string]()
	for i := len(path) - 1; i >= 0; i-- {
		if strings.ContainsAny(path[i], "\",\\`") {
			return nil
		}
		t = reflect.StructOf([]reflect.StructField{
			{Name: "Target", Type: t, Tag: reflect.StructTag(`json:"` + path[i] + `"`)},
			{Name: "Other", Type: reflect.TypeFor[any](), Tag: `json:"other"`},
		})
	}
	if len(path) == 0 {
		return nil
	}
	return t
}

func TestScan(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		b := make([]byte, r.IntN(40))
		for i := range b {
			b[i] = byte(0x20 + r.IntN(0x5f))
		}
		switch r.IntN(4) {
		case 0:
			if len(b) > 0 {
				b[r.IntN(len(b))] = byte(r.IntN(0x20))
			}
		case 1:
			if len(b) > 0 {
				b[r.IntN(len(b))] = byte(0x80 + r.IntN(0x80))
			}
		case 2:
			if len(b) > 0 {
				b[r.IntN(len(b))] = byte(r.IntN(256))
			}
		}
		wantCtl, wantHigh := false, false
		for _, c := range b {
			wantCtl = wantCtl || c < 0x20
			wantHigh = wantHigh || c >= 0x80
		}
		ctl, high := scan(b)
		if ctl != wantCtl || (!ctl && high != wantHigh) {
			t.Fatalf("scan(%q) = %v, %v; want %v, %v", b, ctl, high, wantCtl, wantHigh)
		}
	}
}

// TestCutLarge cuts a value of many megabytes, with the quote and escape
// search crossing many words.
func TestCutLarge(t *testing.T) {
	blob := bytes.Repeat([]byte("QUJDRA=="), 3<<20/8)
	line := []byte(`{"jsonrpc":"2.0","method":"write_file","params":{"path":"/a","content":"` + string(blob) + `"},"id":7}`)
	rest, raw, ok := Cut(line, "params", "content")
	if !ok || !bytes.Equal(raw, blob) || len(rest) != len(line)-len(blob) {
		t.Fatalf("Cut: ok %v, %d bytes, rest %d", ok, len(raw), len(rest))
	}
	line[len(line)-40] = '\\'
	if _, _, ok := Cut(line, "params", "content"); ok {
		t.Fatal("Cut took a value with a backslash")
	}
}

func BenchmarkCut(b *testing.B) {
	blob := bytes.Repeat([]byte("QUJDRA=="), 64<<20/8)
	line := []byte(`{"jsonrpc":"2.0","method":"write_file","params":{"path":"/a","content":"` + string(blob) + `"},"id":7}`)
	b.SetBytes(int64(len(line)))
	for b.Loop() {
		if _, _, ok := Cut(line, "params", "content"); !ok {
			b.Fatal("not cut")
		}
	}
}

// TestSpecial compares special, on one CPU and shared among several,
// with a byte-by-byte search.
func TestSpecial(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	defer func(n int) { specialParallel = n }(specialParallel)
	r := rand.New(rand.NewPCG(7, 8))
	for _, par := range []int{4 << 20, 4 << 10} {
		specialParallel = par
		for range 200 {
			b := make([]byte, r.IntN(200<<10))
			for i := range b {
				b[i] = 'A' + byte(r.IntN(26))
			}
			for range r.IntN(4) {
				if len(b) > 0 {
					b[r.IntN(len(b))] = []byte{'"', '\\', 0x1f, 0x80, 0xff, '\t'}[r.IntN(6)]
				}
			}
			wantK, wantHigh := -1, false
			for i, c := range b {
				if c == '"' || c == '\\' || c < 0x20 {
					wantK = i
					break
				}
				wantHigh = wantHigh || c >= 0x80
			}
			if k, high := special(b); k != wantK || high != wantHigh {
				t.Fatalf("special of %d bytes (parallel from %d) = %d, %v; want %d, %v", len(b), par, k, high, wantK, wantHigh)
			}
		}
	}
	// And Cut, with windows shared among CPUs.
	specialParallel = 256
	TestCut(t)
	TestCutLarge(t)
}
