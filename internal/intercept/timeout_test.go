package intercept

import (
	"net/http"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/policy"
)

// TestResponseHeaderTimeout: an upstream that takes the request and
// never begins its response gets the sandbox a 504 once
// response_header_timeout_seconds has passed, over HTTP/1.1 and HTTP/2,
// with an upstream_error event that says timeout; one that answers in
// time is not cut, whatever its body takes after.
func TestResponseHeaderTimeout(t *testing.T) {
	release := make(chan struct{})
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			select {
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		w.Write([]byte("ok"))
	})
	defer close(release)
	for _, h2 := range []bool{false, true} {
		h := newHarness(t, harnessConfig{policy: policy.Config{ResponseHeaderTimeoutSeconds: 0.5}, handler: handler, upstreamH2: h2})
		resp, body := do(t, h.client(h2), newRequest(t, "GET", h.url("/slow"), nil))
		if resp.StatusCode != http.StatusGatewayTimeout || !strings.Contains(string(body), "timeout") {
			t.Errorf("h2 %v: %s %q, want 504 saying timeout", h2, resp.Status, body)
		}
		ev := h.event()
		if ev.Blocked || policy.ReasonCode(ev.Reason) != policy.ReasonUpstreamError || !strings.Contains(ev.Reason, "timeout") || ev.StatusCode != http.StatusGatewayTimeout {
			t.Errorf("h2 %v: event %+v, want upstream_error with timeout and status 504", h2, ev)
		}
		resp, body = do(t, h.client(h2), newRequest(t, "GET", h.url("/fast"), nil))
		if resp.StatusCode != 200 || string(body) != "ok" {
			t.Errorf("h2 %v: %s %q", h2, resp.Status, body)
		}
		h.event()
	}
}
