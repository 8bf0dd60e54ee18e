package intercept

import (
	"bytes"
	"compress/flate"
	"compress/zlib"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/policy"
)

func compress(t testing.TB, data []byte, raw bool, level int) []byte {
	var b bytes.Buffer
	var zw io.WriteCloser
	var err error
	if raw {
		zw, err = flate.NewWriter(&b, level)
	} else {
		zw, err = zlib.NewWriterLevel(&b, level)
	}
	if err != nil {
		t.Fatal(err)
	}
	zw.Write(data)
	zw.Close()
	return b.Bytes()
}

// TestDeflateBothForms: a deflate body is decoded whether it is wrapped
// in zlib (the standard) or bare (what some servers send), at every
// compression level, empty or not; anything else is an error, never a
// panic or made-up data.
func TestDeflateBothForms(t *testing.T) {
	for _, data := range [][]byte{nil, []byte("x"), []byte(strings.Repeat("value: s3cr3t ", 5000))} {
		for _, raw := range []bool{false, true} {
			for _, level := range []int{flate.NoCompression, flate.BestSpeed, flate.DefaultCompression, flate.BestCompression, flate.HuffmanOnly} {
				r, err := newDeflateReader(bytes.NewReader(compress(t, data, raw, level)))
				if err != nil {
					t.Fatalf("raw %v level %d: %v", raw, level, err)
				}
				got, err := io.ReadAll(r)
				if err != nil || !bytes.Equal(got, data) {
					t.Fatalf("raw %v level %d, %d bytes: got %d bytes, %v", raw, level, len(data), len(got), err)
				}
			}
		}
	}
	for _, bad := range [][]byte{nil, {0x78}, []byte("not deflate at all"), {0x78, 0x9c, 0xff, 0xff}} {
		r, err := newDeflateReader(bytes.NewReader(bad))
		if err == nil {
			_, err = io.ReadAll(r)
		}
		if err == nil {
			t.Errorf("%q decoded without an error", bad)
		}
	}
}

func FuzzDeflate(f *testing.F) {
	f.Add([]byte("hello, hello, hello"), false, []byte{})
	f.Add([]byte(""), true, []byte{0x78, 0x9c})
	f.Add([]byte("\x00\xff"), true, []byte{0x08, 0x1d, 0x00})
	f.Fuzz(func(t *testing.T, data []byte, raw bool, garbage []byte) {
		// What was compressed comes back.
		r, err := newDeflateReader(bytes.NewReader(compress(t, data, raw, flate.DefaultCompression)))
		if err != nil {
			t.Fatal(err)
		}
		if got, err := io.ReadAll(r); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("raw %v: %q came back as %q, %v", raw, data, got, err)
		}
		// Anything else decodes to something bounded, or fails.
		r, err = newDeflateReader(bytes.NewReader(garbage))
		if err == nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(r, 1<<20))
		}
	})
}

// TestScrubDeflateForms: a secret's host that answers with
// Content-Encoding: deflate, in either form, has its body decoded and
// scrubbed; a body that is not deflate data is a 502 that says so
// (upstream_error), and its bytes do not reach the sandbox.
func TestScrubDeflateForms(t *testing.T) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body []byte
		switch r.URL.Path {
		case "/zlib":
			body = compress(t, []byte("value: "+secretValue), false, flate.BestCompression)
		case "/raw":
			body = compress(t, []byte("value: "+secretValue), true, flate.BestCompression)
		default:
			body = []byte("value: " + secretValue + " (not compressed)")
		}
		w.Header().Set("Content-Encoding", "deflate")
		w.Write(body)
	})
	for _, h2 := range []bool{false, true} {
		h := newHarness(t, harnessConfig{policy: secretConfig(), handler: handler, upstreamH2: h2})
		ph := h.placeholder()
		for _, path := range []string{"/zlib", "/raw"} {
			resp, body := do(t, h.client(h2), newRequest(t, "GET", h.url(path), nil))
			if resp.StatusCode != 200 || string(body) != "value: "+ph || resp.Header.Get("Content-Encoding") != "" {
				t.Errorf("h2 %v %s: %s, Content-Encoding %q, body %q; want it decoded and scrubbed", h2, path, resp.Status, resp.Header.Get("Content-Encoding"), body)
			}
			h.event()
		}
		resp, body := do(t, h.client(h2), newRequest(t, "GET", h.url("/garbage"), nil))
		if resp.StatusCode != http.StatusBadGateway || strings.Contains(string(body), secretValue) {
			t.Errorf("h2 %v: not deflate: %s %q, want 502", h2, resp.Status, body)
		}
		if ev := h.event(); policy.ReasonCode(ev.Reason) != policy.ReasonUpstreamError || !strings.Contains(ev.Reason, "deflate") {
			t.Errorf("h2 %v: event %+v, want upstream_error naming deflate", h2, ev)
		}
	}
}
