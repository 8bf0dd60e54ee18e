package intercept

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/policy"
)

// secretConfig has one secret, scoped to apiHost; otherHost is allowed
// but out of its scope.
func secretConfig() policy.Config {
	return policy.Config{Secrets: map[string]policy.Secret{"API_KEY": {Value: secretValue, Hosts: []string{apiHost}}}}
}

func (h *harness) placeholder() string {
	ph := h.policy.Env()["API_KEY"]
	if !strings.HasPrefix(ph, policy.PlaceholderPrefix) {
		h.t.Fatalf("placeholder %q", ph)
	}
	return ph
}

// bigBody is longer than smallBody, so it streams, with the placeholder
// well past the first reads.
func bigBody(ph string) string {
	return strings.Repeat("a", 200<<10) + ph + strings.Repeat("b", 1000)
}

// secretRequests are the ways a request can carry the placeholder.
var secretRequests = []struct {
	name  string
	make  func(h *harness, url, ph string) *http.Request
	check func(t *testing.T, s seen)
}{
	{"header", func(h *harness, url, ph string) *http.Request {
		req := newRequest(h.t, "GET", url, nil)
		req.Header.Set("Authorization", "Bearer "+ph)
		return req
	}, func(t *testing.T, s seen) {
		if got := s.Header.Get("Authorization"); got != "Bearer "+secretValue {
			t.Errorf("upstream Authorization %q", got)
		}
	}},
	{"basic auth", func(h *harness, url, ph string) *http.Request {
		req := newRequest(h.t, "GET", url, nil)
		req.SetBasicAuth("user", ph)
		return req
	}, func(t *testing.T, s seen) {
		if s.User != "user" || s.Pass != secretValue {
			t.Errorf("upstream Basic credentials %q %q", s.User, s.Pass)
		}
	}},
	{"query", func(h *harness, url, ph string) *http.Request {
		return newRequest(h.t, "GET", url+"?key="+ph, nil)
	}, func(t *testing.T, s seen) {
		if s.Query != secretValue {
			t.Errorf("upstream query key %q (URI %q)", s.Query, s.URI)
		}
	}},
	{"small body", func(h *harness, url, ph string) *http.Request {
		return newRequest(h.t, "POST", url, strings.NewReader(`{"key":"`+ph+`"}`))
	}, func(t *testing.T, s seen) {
		want := `{"key":"` + secretValue + `"}`
		if s.Body != want || s.Length != int64(len(want)) {
			t.Errorf("upstream body %q with Content-Length %d, want %q with its length", s.Body, s.Length, want)
		}
	}},
	{"streamed body", func(h *harness, url, ph string) *http.Request {
		return newRequest(h.t, "POST", url, strings.NewReader(bigBody(ph)))
	}, func(t *testing.T, s seen) {
		if want := bigBody(secretValue); s.Body != want {
			t.Errorf("upstream body of %d bytes, want %d with the value in place", len(s.Body), len(want))
		}
	}},
}

func TestSecretsSubstituted(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		for _, tc := range secretRequests {
			t.Run(fmt.Sprintf("%s/h2=%v", tc.name, h2), func(t *testing.T) {
				h := newHarness(t, harnessConfig{policy: secretConfig(), upstreamH2: h2})
				ph := h.placeholder()
				resp, body := do(t, h.client(h2), tc.make(h, h.url("/v1"), ph))
				if resp.StatusCode != 200 {
					t.Fatalf("%s: %s", resp.Status, body)
				}
				tc.check(t, decodeSeen(t, body))
				ev := h.event()
				if ev.Blocked || strings.Contains(ev.URL, secretValue) || strings.Contains(ev.URL, strings.ReplaceAll(secretValue, "/", "%2F")) {
					t.Errorf("event %+v", ev)
				}
				if tc.name == "query" && !strings.Contains(ev.URL, ph) {
					t.Errorf("event URL %q, want the placeholder in it", ev.URL)
				}
			})
		}
	}
}

// TestSecretsPlaintextRefused: a secret is sent only inside TLS unless it
// allows plain HTTP: its placeholder in a plain-HTTP request to its own
// host, in a header, the URL or the body, blocks the request
// (secret_plaintext) before anything goes upstream, and so does its
// value; with allow_plaintext it is substituted (TestSecretsPlainHTTP).
func TestSecretsPlaintextRefused(t *testing.T) {
	h := newHarness(t, harnessConfig{policy: secretConfig(), plain: true, tlsOnly: true})
	ph := h.placeholder()
	for _, req := range []*http.Request{
		newRequest(t, "GET", h.url("/"), nil),
		newRequest(t, "GET", h.url("/?key="+ph), nil),
		newRequest(t, "POST", h.url("/"), strings.NewReader(`{"key":"`+ph+`"}`)),
		newRequest(t, "POST", h.url("/"), strings.NewReader(bigBody(ph))),
		newRequest(t, "POST", h.url("/"), strings.NewReader("the value itself: "+secretValue)),
	} {
		if req.URL.RawQuery == "" && req.Body == nil {
			req.Header.Set("Authorization", "Bearer "+ph)
		}
		resp, body := do(t, h.client(false), req)
		ev := h.checkBlocked(resp, body, http.StatusForbidden, policy.ReasonSecretPlaintext)
		if !strings.Contains(ev.Reason, "allow_plaintext") {
			t.Errorf("reason %q does not say how to allow it", ev.Reason)
		}
	}
	if n := h.completed.Load(); n != 0 {
		t.Errorf("upstream got %d complete requests, want none", n)
	}
	// Without a placeholder, plain HTTP to the host passes.
	resp, _ := do(t, h.client(false), newRequest(t, "GET", h.url("/"), nil))
	if resp.StatusCode != 200 {
		t.Errorf("plain request without a secret: %s", resp.Status)
	}
	h.event()
}

func TestSecretsPlainHTTP(t *testing.T) {
	h := newHarness(t, harnessConfig{policy: secretConfig(), plain: true})
	ph := h.placeholder()
	req := newRequest(t, "GET", h.url("/"), nil)
	req.Header.Set("X-Key", ph)
	resp, body := do(t, h.client(false), req)
	if s := decodeSeen(t, body); resp.StatusCode != 200 || s.Header.Get("X-Key") != secretValue {
		t.Errorf("%s: upstream X-Key %q", resp.Status, s.Header.Get("X-Key"))
	}
	h.event()
	req = newRequest(t, "GET", h.hostURL(otherHost, "/"), nil)
	req.Header.Set("X-Key", ph)
	resp, body = do(t, h.client(false), req)
	h.checkBlocked(resp, body, http.StatusForbidden, policy.ReasonSecretLeak)
}

// TestSecretsLeak sends the placeholder to a host out of the secret's
// scope: every way is blocked, and upstream never sees a complete
// request (a leak in a streamed body is found after the request began:
// it is aborted).
func TestSecretsLeak(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		for _, tc := range secretRequests {
			t.Run(fmt.Sprintf("%s/h2=%v", tc.name, h2), func(t *testing.T) {
				h := newHarness(t, harnessConfig{policy: secretConfig(), upstreamH2: h2})
				c := h.client(h2)
				resp, body := do(t, c, tc.make(h, h.hostURL(otherHost, "/v1"), h.placeholder()))
				ev := h.checkBlocked(resp, body, http.StatusForbidden, policy.ReasonSecretLeak)
				if ev.Host != otherHost || !strings.Contains(ev.Reason, "API_KEY") {
					t.Errorf("event %+v", ev)
				}
				if tc.name != "streamed body" && h.dials.Load() != 0 {
					t.Error("upstream was dialled for a request blocked before it was sent")
				}
				if tc.name == "streamed body" && ev.RequestBytes == 0 {
					t.Error("the streamed body was blocked before any of it was sent: the abort was not exercised")
				}
				if n := h.completed.Load(); n != 0 {
					t.Errorf("upstream completed %d requests", n)
				}
				// The connection still serves requests.
				resp, body = do(t, c, newRequest(t, "GET", h.hostURL(otherHost, "/after"), nil))
				if resp.StatusCode != 200 {
					t.Errorf("the next request: %s %s", resp.Status, body)
				}
				h.event()
				h.noMoreEvents()
				if n := h.completed.Load(); n != 1 {
					t.Errorf("upstream completed %d requests, want 1", n)
				}
			})
		}
	}
}

func TestSecretsUnrewritable(t *testing.T) {
	t.Run("gzip body", func(t *testing.T) {
		h := newHarness(t, harnessConfig{policy: secretConfig()})
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		fmt.Fprintf(zw, `{"key":"%s"}`, h.placeholder())
		zw.Close()
		req := newRequest(t, "POST", h.url("/"), &buf)
		req.Header.Set("Content-Encoding", "gzip")
		resp, body := do(t, h.client(false), req)
		h.checkBlocked(resp, body, http.StatusForbidden, policy.ReasonSecretUnrewritable)
		if h.dials.Load() != 0 {
			t.Error("upstream was dialled")
		}
	})
	for _, size := range []int{2000, 100 << 10} {
		for _, declared := range []bool{true, false} {
			t.Run(fmt.Sprintf("body of %d bytes past MaxBody, length declared %v", size, declared), func(t *testing.T) {
				h := newHarness(t, harnessConfig{policy: secretConfig(), maxBody: 1024})
				var src io.Reader = strings.NewReader(strings.Repeat("x", size))
				if !declared {
					src = io.MultiReader(src) // no length: chunked
				}
				resp, body := do(t, h.client(false), newRequest(t, "POST", h.url("/"), src))
				h.checkBlocked(resp, body, http.StatusForbidden, policy.ReasonSecretUnrewritable)
				if h.completed.Load() != 0 {
					t.Error("upstream completed the request")
				}
				// A declared length past the bound is refused before
				// anything goes upstream; a chunked body, once the bound
				// is reached.
				if declared && h.started.Load() != 0 {
					t.Error("upstream got the request")
				}
			})
		}
	}
	t.Run("no secrets, no bound", func(t *testing.T) {
		h := newHarness(t, harnessConfig{maxBody: 1024})
		payload := bigBody("x")
		resp, body := do(t, h.client(false), newRequest(t, "POST", h.url("/"), strings.NewReader(payload)))
		if resp.StatusCode != 200 {
			t.Fatal(resp.Status)
		}
		if s := decodeSeen(t, body); s.Body != payload || s.Length != int64(len(payload)) {
			t.Errorf("upstream got %d bytes with Content-Length %d, want %d with its length", len(s.Body), s.Length, len(payload))
		}
	})
}
