package intercept

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/airlock-sandbox/airlock/policy"
)

func TestScriptRequestHook(t *testing.T) {
	pc := policy.Config{PolicyScript: `
def on_request(req):
    if req.url.endswith("/blocked"):
        return None
    req.headers["X-Script"] = "saw " + req.method + " " + req.body
    return req
`}
	for _, h2 := range []bool{false, true} {
		h := newHarness(t, harnessConfig{policy: pc})
		c := h.client(h2)
		resp, body := do(t, c, newRequest(t, "POST", h.url("/blocked"), strings.NewReader("x")))
		h.checkBlocked(resp, body, http.StatusForbidden, policy.ReasonScriptBlocked)
		if h.dials.Load() != 0 {
			t.Error("upstream was dialled for a blocked request")
		}
		resp, body = do(t, c, newRequest(t, "POST", h.url("/ok"), strings.NewReader("payload")))
		if resp.StatusCode != 200 {
			t.Fatalf("%s %s", resp.Status, body)
		}
		if s := decodeSeen(t, body); s.Header.Get("X-Script") != "saw POST payload" || s.Body != "payload" {
			t.Errorf("upstream X-Script %q, body %q", s.Header.Get("X-Script"), s.Body)
		}
		h.event()
		h.noMoreEvents()
	}
}

// TestGoRequestHook: a Go hook sees placeholders (never values), may
// change the header and the body, and the secrets are substituted after
// it.
func TestGoRequestHook(t *testing.T) {
	var mu sync.Mutex
	var sawHeader, sawBody string
	var sawNilBody bool
	pc := secretConfig()
	opts := policy.Options{
		MaxHookBody: 1000,
		OnRequest: func(ctx context.Context, req *policy.Request) (*policy.Request, error) {
			mu.Lock()
			sawHeader, sawBody, sawNilBody = req.Header.Get("Authorization"), string(req.Body), req.Body == nil
			mu.Unlock()
			req.Header.Set("X-Hooked", "yes")
			if req.Body != nil {
				req.Body = bytes.ReplaceAll(req.Body, []byte("hello"), []byte("HELLO"))
			}
			return req, nil
		},
	}
	h := newHarness(t, harnessConfig{policy: pc, opts: opts})
	ph := h.placeholder()
	c := h.client(true)

	req := newRequest(t, "POST", h.url("/"), strings.NewReader("hello "+ph))
	req.Header.Set("Authorization", "Bearer "+ph)
	resp, body := do(t, c, req)
	if resp.StatusCode != 200 {
		t.Fatalf("%s %s", resp.Status, body)
	}
	s := decodeSeen(t, body)
	if s.Header.Get("X-Hooked") != "yes" || s.Header.Get("Authorization") != "Bearer "+secretValue {
		t.Errorf("upstream header %v", s.Header)
	}
	if want := "HELLO " + secretValue; s.Body != want || s.Length != int64(len(want)) {
		t.Errorf("upstream body %q (Content-Length %d), want %q", s.Body, s.Length, want)
	}
	mu.Lock()
	if sawHeader != "Bearer "+ph || sawBody != "hello "+ph {
		t.Errorf("the hook saw %q and %q, want placeholders", sawHeader, sawBody)
	}
	mu.Unlock()
	h.event()

	// A body past MaxHookBody streams: the hook sees none and the body
	// goes as it is (with the secret substituted).
	long := strings.Repeat("hello ", 500) + ph
	resp, body = do(t, c, newRequest(t, "POST", h.url("/long"), strings.NewReader(long)))
	if resp.StatusCode != 200 {
		t.Fatalf("%s %s", resp.Status, body)
	}
	if s := decodeSeen(t, body); s.Body != strings.Repeat("hello ", 500)+secretValue {
		t.Errorf("upstream body of %d bytes", len(s.Body))
	}
	mu.Lock()
	if !sawNilBody {
		t.Error("the hook saw a body longer than MaxHookBody")
	}
	mu.Unlock()
	h.event()
}

// TestResponseHooksAndScrubbing: secret values echoed by the server come
// back as placeholders (header, body, trailer); response hooks see the
// scrubbed response and may change it or block it.
func TestResponseHooksAndScrubbing(t *testing.T) {
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		w.Header().Set("Trailer", "X-Trailer-Echo")
		w.Header().Set("X-Echo", auth)
		if r.URL.Path == "/missing" {
			w.WriteHeader(http.StatusNotFound)
		}
		w.Write([]byte("you sent " + auth))
		w.Header().Set("X-Trailer-Echo", auth)
	})
	var mu sync.Mutex
	var hookSaw string
	pc := secretConfig()
	pc.ScrubResponses = true
	pc.PolicyScript = `
def on_response(resp, req):
    if resp.status_code == 404:
        return None
    return resp
`
	opts := policy.Options{OnResponse: func(ctx context.Context, resp *policy.Response, req *policy.Request) (*policy.Response, error) {
		mu.Lock()
		hookSaw = string(resp.Body) + "|" + resp.Header.Get("X-Echo") + "|" + req.Header.Get("Authorization")
		mu.Unlock()
		if strings.HasSuffix(req.URL, "/rewrite") {
			resp.Body = append(resp.Body, " (checked)"...)
			resp.Header.Set("X-Hook", "1")
		}
		return resp, nil
	}}
	for _, h2 := range []bool{false, true} {
		h := newHarness(t, harnessConfig{policy: pc, opts: opts, handler: echo, upstreamH2: h2})
		ph := h.placeholder()
		c := h.client(h2)

		req := newRequest(t, "GET", h.url("/rewrite"), nil)
		req.Header.Set("Authorization", "Bearer "+ph)
		resp, body := do(t, c, req)
		if want := "you sent Bearer " + ph + " (checked)"; resp.StatusCode != 200 || string(body) != want {
			t.Errorf("%s %q, want %q", resp.Status, body, want)
		}
		if resp.Header.Get("X-Echo") != "Bearer "+ph || resp.Header.Get("X-Hook") != "1" {
			t.Errorf("header %v", resp.Header)
		}
		if cl := resp.Header.Get("Content-Length"); cl != "" && cl != strconv.Itoa(len(body)) {
			t.Errorf("Content-Length %s for %d bytes", cl, len(body))
		}
		mu.Lock()
		if strings.Contains(hookSaw, secretValue) || !strings.Contains(hookSaw, ph) {
			t.Errorf("the response hook saw %q", hookSaw)
		}
		mu.Unlock()
		ev := h.event()
		if ev.ResponseBytes != int64(len(body)) || ev.StatusCode != 200 {
			t.Errorf("event %+v", ev)
		}

		// No hook change: the body streams scrubbed, with the trailer.
		req = newRequest(t, "GET", h.url("/plain"), nil)
		req.Header.Set("Authorization", "Bearer "+ph)
		resp, body = do(t, c, req)
		if string(body) != "you sent Bearer "+ph || resp.Trailer.Get("X-Trailer-Echo") != "Bearer "+ph {
			t.Errorf("body %q, trailer %v", body, resp.Trailer)
		}
		h.event()

		req = newRequest(t, "GET", h.url("/missing"), nil)
		resp, body = do(t, c, req)
		h.checkBlocked(resp, body, http.StatusForbidden, policy.ReasonScriptBlocked)
		h.noMoreEvents()
	}
}

// TestScrubScope: the responses of a secret's host are scrubbed of its
// value whether or not scrub_responses is set, since that host is the
// one airlock sent it to; with scrub_responses, those of every other
// host are too.
func TestScrubScope(t *testing.T) {
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Echo", secretValue)
		w.Write([]byte("value: " + secretValue))
	})
	for _, scrub := range []bool{false, true} {
		pc := secretConfig()
		pc.AllowedHosts = []string{apiHost, otherHost}
		pc.ScrubResponses = scrub
		h := newHarness(t, harnessConfig{policy: pc, handler: echo})
		ph := h.placeholder()
		for _, host := range []string{apiHost, otherHost} {
			resp, body := do(t, h.client(false), newRequest(t, "GET", h.hostURL(host, "/"), nil))
			h.event()
			want := secretValue
			if scrub || host == apiHost {
				want = ph
			}
			if string(body) != "value: "+want || resp.Header.Get("X-Echo") != want {
				t.Errorf("scrub_responses=%v, %s: body %q, X-Echo %q; want %q in both", scrub, host, body, resp.Header.Get("X-Echo"), want)
			}
		}
		h.close()
	}
}

// TestScrubCompressed: a request whose response is scrubbed asks for no
// content coding; a server that compresses anyway has its gzip or
// deflate body decoded, scrubbed and passed on plain, and any other
// coding refused (secret_unrewritable). A host whose responses are not
// scrubbed gets the sandbox's Accept-Encoding and sends its body as it
// is.
func TestScrubCompressed(t *testing.T) {
	var mu sync.Mutex
	var accepted string
	compressed := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		accepted = r.Header.Get("Accept-Encoding")
		mu.Unlock()
		var b bytes.Buffer
		var zw io.WriteCloser
		coding := strings.TrimPrefix(r.URL.Path, "/")
		switch coding {
		case "gzip":
			zw = gzip.NewWriter(&b)
		case "deflate":
			zw = zlib.NewWriter(&b)
		default:
			zw = nopWriteCloser{&b} // claimed, not applied: never read
		}
		io.WriteString(zw, "value: "+secretValue)
		zw.Close()
		w.Header().Set("Content-Encoding", coding)
		w.Write(b.Bytes())
	})
	h := newHarness(t, harnessConfig{policy: secretConfig(), handler: compressed})
	ph := h.placeholder()
	get := func(host, coding string) (*http.Response, []byte, string) {
		req := newRequest(t, "GET", h.hostURL(host, "/"+coding), nil)
		req.Header.Set("Accept-Encoding", "gzip, deflate, br")
		resp, body := do(t, h.client(false), req)
		mu.Lock()
		defer mu.Unlock()
		return resp, body, accepted
	}
	for _, coding := range []string{"gzip", "deflate"} {
		resp, body, sent := get(apiHost, coding)
		h.event()
		if sent != "identity" {
			t.Errorf("%s: the secret's host was sent Accept-Encoding %q, want identity", coding, sent)
		}
		if string(body) != "value: "+ph || resp.Header.Get("Content-Encoding") != "" {
			t.Errorf("%s: %s, Content-Encoding %q, body %q; want it decoded and scrubbed", coding, resp.Status, resp.Header.Get("Content-Encoding"), body)
		}
	}
	resp, body, _ := get(apiHost, "br")
	h.checkBlocked(resp, body, http.StatusForbidden, policy.ReasonSecretUnrewritable)

	resp, body, sent := get(otherHost, "gzip")
	h.event()
	if sent != "gzip, deflate, br" || resp.Header.Get("Content-Encoding") != "gzip" {
		t.Errorf("another host: Accept-Encoding %q sent, Content-Encoding %q back; want both untouched", sent, resp.Header.Get("Content-Encoding"))
	}
	if zr, err := gzip.NewReader(bytes.NewReader(body)); err != nil {
		t.Errorf("another host: body is not gzip: %v", err)
	} else if plain, _ := io.ReadAll(zr); string(plain) != "value: "+secretValue {
		t.Errorf("another host: body %q", plain)
	}
}

// TestScrubEarlyHints: an interim response (103 Early Hints), which
// the proxy passes on before the final one, is scrubbed too.
func TestScrubEarlyHints(t *testing.T) {
	hints := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</app.js?k="+secretValue+">; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		w.Write([]byte("ok"))
	})
	for _, h2 := range []bool{false, true} {
		h := newHarness(t, harnessConfig{policy: secretConfig(), handler: hints, upstreamH2: h2})
		ph := h.placeholder()
		var mu sync.Mutex
		var links []string
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
			Got1xxResponse: func(code int, hdr textproto.MIMEHeader) error {
				mu.Lock()
				defer mu.Unlock()
				links = append(links, fmt.Sprintf("%d %s", code, hdr.Get("Link")))
				return nil
			},
		})
		resp, body := do(t, h.client(h2), newRequest(t, "GET", h.url("/"), nil).WithContext(ctx))
		h.event()
		mu.Lock()
		want := []string{"103 </app.js?k=" + ph + ">; rel=preload"}
		if resp.StatusCode != 200 || string(body) != "ok" || !slices.Equal(links, want) {
			t.Errorf("h2=%v: %s %q, interim responses %q; want %q", h2, resp.Status, body, links, want)
		}
		mu.Unlock()
		h.close()
	}
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// TestScrubStreaming: without hooks, a scrubbed body streams (and loses
// its Content-Length, since placeholders and values differ in length).
func TestScrubStreaming(t *testing.T) {
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		body := strings.Repeat("x", 100<<10) + auth + strings.Repeat("y", 10)
		w.Header().Set("Trailer", "X-Trailer-Echo")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Header().Set("X-Echo", auth)
		w.Write([]byte(body))
		w.Header().Set("X-Trailer-Echo", auth)
	})
	pc := secretConfig()
	pc.ScrubResponses = true
	for _, h2 := range []bool{false, true} {
		h := newHarness(t, harnessConfig{policy: pc, handler: echo, upstreamH2: h2})
		ph := h.placeholder()
		req := newRequest(t, "GET", h.url("/"), nil)
		req.Header.Set("Authorization", ph)
		resp, body := do(t, h.client(h2), req)
		if want := strings.Repeat("x", 100<<10) + ph + strings.Repeat("y", 10); string(body) != want {
			t.Errorf("body of %d bytes, want %d with the placeholder", len(body), len(want))
		}
		if resp.Header.Get("X-Echo") != ph {
			t.Errorf("X-Echo %q", resp.Header.Get("X-Echo"))
		}
		if h2 && resp.Trailer.Get("X-Trailer-Echo") != ph {
			t.Errorf("trailer %v", resp.Trailer)
		}
		if ev := h.event(); ev.ResponseBytes != int64(len(body)) {
			t.Errorf("event %+v", ev)
		}
	}
}
