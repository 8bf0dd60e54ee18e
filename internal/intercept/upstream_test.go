package intercept

import (
	"net/http"
	"testing"
)

// TestUpstreamSharedAcrossSandboxConnections: a new connection from the
// sandbox to the same destination and name reuses the idle upstream
// connection of an earlier one, rather than paying a new handshake, over
// HTTP/1.1 and HTTP/2 upstream alike.
func TestUpstreamSharedAcrossSandboxConnections(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		h := newHarness(t, harnessConfig{upstreamH2: h2})
		for i := range 3 {
			c := h.client(false) // a new transport: a new sandbox connection
			resp, _ := do(t, c, newRequest(t, http.MethodGet, h.url("/x"), nil))
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("request %d: %s", i, resp.Status)
			}
			h.event()
			c.CloseIdleConnections()
		}
		if n := h.dials.Load(); n != 1 {
			t.Errorf("upstream h2=%v: %d dials for 3 sandbox connections, want 1", h2, n)
		}
		h.close()
	}
}
