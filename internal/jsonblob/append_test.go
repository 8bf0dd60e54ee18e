package jsonblob

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
)

type fileResult struct {
	Content string `json:"content"`
	Size    int64  `json:"size"`
	Note    string `json:"note"`
	Inner   any    `json:"inner,omitempty"`
}

func TestAppendMarshal(t *testing.T) {
	blob := []byte("hello, world\x00\xff")
	for _, v := range []any{
		fileResult{Size: 5, Note: `x","content":"`},
		&fileResult{Note: `{"content":""}`},
		fileResult{Inner: map[string]string{`x","content":"`: ""}},
		fileResult{Inner: map[string]any{"other": []string{"content", ""}}},
		map[string]any{"content": "", "a": 1},
	} {
		got, err := AppendMarshal([]byte("prefix:"), v, "content", blob)
		if err != nil {
			t.Errorf("AppendMarshal(%+v): %v", v, err)
			continue
		}
		// The same, through encoding/json.
		var m map[string]any
		b, _ := json.Marshal(v)
		json.Unmarshal(b, &m)
		m["content"] = base64.StdEncoding.EncodeToString(blob)
		var gotM map[string]any
		if !bytes.HasPrefix(got, []byte("prefix:")) || json.Unmarshal(got[len("prefix:"):], &gotM) != nil || fmt.Sprint(gotM) != fmt.Sprint(m) {
			t.Errorf("AppendMarshal(%+v) = %s, want %v", v, got, m)
		}
	}
	// Exactly what json.Marshal writes.
	r := fileResult{Size: 3, Note: "n"}
	got, _ := AppendMarshal(nil, r, "content", blob)
	r.Content = base64.StdEncoding.EncodeToString(blob)
	if want, _ := json.Marshal(r); !bytes.Equal(got, want) {
		t.Errorf("AppendMarshal = %s, want %s", got, want)
	}

	for _, tc := range []struct {
		v   any
		key string
	}{
		{fileResult{Content: "x"}, "content"},                            // not empty
		{fileResult{Inner: map[string]string{"content": ""}}, "content"}, // twice
		{fileResult{Inner: []fileResult{{}}}, "content"},                 // twice
		{struct{ A string }{}, "content"},                                // absent
		{fileResult{}, `con"tent`},                                       // not written as is
		{fileResult{}, "<b>"},                                            // not written as is
		{fileResult{}, ""},                                               // no key
		{map[string]any{"content": "", "f": func() {}}, "content"},       // cannot be marshaled
	} {
		if out, err := AppendMarshal([]byte("keep"), tc.v, tc.key, blob); err == nil || string(out) != "keep" {
			t.Errorf("AppendMarshal(%+v, %q) = %s, %v; want an error and dst unchanged", tc.v, tc.key, out, err)
		}
	}
}

func TestAppendMarshalBlobs(t *testing.T) {
	type result struct {
		Stdout string `json:"stdout"`
		Code   int    `json:"code"`
		Stderr string `json:"stderr"`
	}
	out, errb := []byte("out\x00\xff"), []byte("err")
	// In either order of the arguments.
	for _, blobs := range [][]Blob{{{"stdout", out}, {"stderr", errb}}, {{"stderr", errb}, {"stdout", out}}} {
		got, err := AppendMarshalBlobs([]byte("p:"), result{Code: 2}, blobs...)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(result{Stdout: base64.StdEncoding.EncodeToString(out), Code: 2, Stderr: base64.StdEncoding.EncodeToString(errb)})
		if string(got) != "p:"+string(want) {
			t.Errorf("AppendMarshalBlobs = %s, want p:%s", got, want)
		}
	}
	if got, err := AppendMarshalBlobs([]byte("keep"), result{}, Blob{"stdout", out}, Blob{"stdout", out}); err == nil || string(got) != "keep" {
		t.Errorf("a key given twice: %s, %v", got, err)
	}
}

// TestBase64 compares the encoder and decoder with encoding/base64 at
// sizes around the pieces' boundaries, with errors at various places.
func TestBase64(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	defer func(n int) { splitMin = n }(splitMin)
	splitMin = 2 * fastMin
	r := rand.New(rand.NewPCG(3, 4))
	src := make([]byte, 4*splitMin+10)
	for i := range src {
		src[i] = byte(r.Uint32())
	}
	for _, n := range []int{0, 1, 2, 3, fastMin - 1, fastMin, fastMin + 1, fastMin + 2, splitMin - 1, 2*splitMin - 1, 2 * splitMin, 2*splitMin + 1, 2*splitMin + 2, 3*splitMin + 5, len(src)} {
		want := base64.StdEncoding.EncodeToString(src[:n])
		got := AppendEncode([]byte("x"), src[:n])
		if string(got) != "x"+want {
			t.Fatalf("AppendEncode of %d bytes differs", n)
		}
		checkDecode(t, []byte(want))
		if n < fastMin {
			continue
		}
		// Corrupt it in each piece and at the edges.
		for _, at := range []int{0, 1, 15, 16, 17, len(want)/4 - 1, len(want) / 4, len(want)/2 - 2, len(want) / 2, len(want) - 17, len(want) - 3, len(want) - 1} {
			for _, c := range []byte{'=', '\n', '\r', '"', '\\', 0, 0x80, 'A'} {
				b := []byte(want)
				b[at] = c
				checkDecode(t, b)
			}
		}
		checkDecode(t, []byte(want)[:len(want)-1])
		checkDecode(t, []byte(want)[:len(want)-2])
		checkDecode(t, append([]byte(want), "===="...))
		checkDecode(t, append([]byte(want), "\r\n"...))
		checkDecode(t, append([]byte(want), "QQ=="...))
	}
	// Random corruption, sizes and padding.
	for range 300 {
		n := r.IntN(6 * fastMin)
		b := []byte(base64.StdEncoding.EncodeToString(src[:n]))
		for range r.IntN(3) {
			if len(b) > 0 {
				b[r.IntN(len(b))] = "=\n\r!A/+"[r.IntN(7)]
			}
		}
		checkDecode(t, b)
	}
}

func checkDecode(t *testing.T, s []byte) {
	t.Helper()
	want, wantErr := base64.StdEncoding.DecodeString(string(s))
	got, err := DecodeString(s)
	if !bytes.Equal(got, want) || fmt.Sprint(err) != fmt.Sprint(wantErr) {
		t.Fatalf("DecodeString of %d bytes = %d bytes, %v; want %d bytes, %v", len(s), len(got), err, len(want), wantErr)
	}
	// Into a buffer of exactly DecodedLen: enough, whatever s holds.
	exact := make([]byte, 3, 3+DecodedLen(s))
	got, err = AppendDecode(exact, s)
	if !bytes.Equal(got[3:], want) || fmt.Sprint(err) != fmt.Sprint(wantErr) || &got[0] != &exact[0] {
		t.Fatalf("AppendDecode of %d bytes into an exact buffer = %d bytes, %v; want %d bytes, %v", len(s), len(got)-3, err, len(want), wantErr)
	}
	if wantErr == nil && !bytes.ContainsAny(s, "\r\n") && DecodedLen(s) != len(want) {
		t.Fatalf("DecodedLen of %d bytes = %d, want %d", len(s), DecodedLen(s), len(want))
	}
}

func BenchmarkAppendEncode(b *testing.B) {
	src := make([]byte, 64<<20)
	b.SetBytes(int64(len(src)))
	dst := make([]byte, 0, base64.StdEncoding.EncodedLen(len(src)))
	for b.Loop() {
		AppendEncode(dst[:0], src)
	}
}

func BenchmarkDecodeString(b *testing.B) {
	src := base64.StdEncoding.AppendEncode(nil, make([]byte, 64<<20))
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		if _, err := DecodeString(src); err != nil {
			b.Fatal(err)
		}
	}
}

func TestBuffers(t *testing.T) {
	defer func() {
		kept.mu.Lock()
		clear(kept.bufs)
		kept.bufs, kept.total = nil, 0
		kept.mu.Unlock()
	}()
	if b := Buffer(10); cap(b) < 10 || len(b) != 0 {
		t.Fatalf("Buffer(10): len %d cap %d", len(b), cap(b))
	}
	a, b := Buffer(3<<20), Buffer(5<<20)
	Recycle(a[:7])
	Recycle(b)
	Recycle(make([]byte, 100)) // too small to keep
	if got := Buffer(2 << 20); cap(got) != cap(a) || &got[:1][0] != &a[:1][0] {
		t.Errorf("Buffer(2 MiB) did not reuse the 3 MiB buffer: cap %d", cap(got))
	}
	if got := Buffer(1 << 20); cap(got) == cap(b) {
		t.Errorf("Buffer(1 MiB) took a buffer more than twice as large")
	}
	if got := Buffer(4 << 20); cap(got) != cap(b) {
		t.Errorf("Buffer(4 MiB) did not reuse the 5 MiB buffer: cap %d", cap(got))
	}
	if got := Buffer(4 << 20); cap(got) == cap(b) {
		t.Errorf("a buffer was handed out twice")
	}
	// The total is bounded, the smallest going first.
	for range 5 {
		Recycle(make([]byte, 0, keepBytes/3+1))
	}
	Recycle(make([]byte, 0, 2<<20))
	kept.mu.Lock()
	total, n := kept.total, len(kept.bufs)
	kept.mu.Unlock()
	if total > keepBytes || n != 3 {
		t.Errorf("kept %d bytes in %d buffers", total, n)
	}
}
