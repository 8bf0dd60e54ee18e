package jsonblob

import (
	"encoding/base64"
	"encoding/json"
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
