package intercept

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/policy"
)

// handshake dials the harness and runs a TLS handshake with cfg.
func (h *harness) handshake(cfg *tls.Config) (*tls.Conn, error) {
	raw, err := net.Dial("tcp", h.ln.Addr().String())
	if err != nil {
		h.t.Fatal(err)
	}
	conn := tls.Client(raw, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := conn.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, err
	}
	return conn, nil
}

// checkRefused checks the one event of a refused handshake.
func (h *harness) checkRefused(sni, code string) {
	h.t.Helper()
	ev := h.event()
	want := api.NetworkEvent{Kind: api.NetTCP, Host: sni, IP: "203.0.113.10", Port: h.dst.Port(), Proto: "tcp", Blocked: true}
	got := ev
	got.Reason, got.DurationMs = "", 0
	if !eventEqual(got, want) || policy.ReasonCode(ev.Reason) != code {
		h.t.Errorf("event %+v, want %+v with reason %s", ev, want, code)
	}
}

// TestSNIRefused: the handshake is refused when the SNI is missing, an
// address, not pinned to the destination (forged: a raw-IP connection to
// an allowed host's address, or another allowed name), or not allowed.
func TestSNIRefused(t *testing.T) {
	for _, tc := range []struct {
		name, sni, code string
	}{
		{"forged", otherHost, policy.ReasonSNIMismatch},
		{"unpinned unknown", "unknown.example.com", policy.ReasonSNIMismatch},
		{"no SNI", "", policy.ReasonNoSNI},
		{"pinned but not allowed", "evil.example.net", policy.ReasonHostNotAllowed},
		{"pinned but denied", "denied.example.com", policy.ReasonHostDenied},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{
				names:  []string{apiHost, "evil.example.net", "denied.example.com"},
				policy: policy.Config{AllowedHosts: []string{apiHost, otherHost, "*.example.com"}, DeniedHosts: []string{"denied.example.com"}},
			})
			cfg := &tls.Config{ServerName: tc.sni, RootCAs: h.pool()}
			if tc.sni == "" {
				cfg.InsecureSkipVerify = true // the client sends no SNI; the server must refuse anyway
			}
			if conn, err := h.handshake(cfg); err == nil {
				conn.Close()
				t.Fatal("the handshake succeeded")
			}
			h.checkRefused(tc.sni, tc.code)
			if h.ca.Minted() != 0 {
				t.Error("a leaf was minted for a refused name")
			}
			h.noMoreEvents()
		})
	}
}

// TestSNIOpenSSL does the same with openssl s_client, including an
// address given as the server name, which Go's client never sends.
func TestSNIOpenSSL(t *testing.T) {
	openssl, err := exec.LookPath("openssl")
	if err != nil {
		t.Skip("openssl is not installed")
	}
	h := newHarness(t, harnessConfig{names: []string{apiHost}})
	run := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		cmd := exec.CommandContext(ctx, openssl, append([]string{"s_client", "-connect", h.ln.Addr().String(), "-CAfile", h.caFile}, args...)...)
		cmd.Stdin = strings.NewReader("")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	out, err := run("-servername", apiHost, "-verify_return_error")
	if err != nil || !strings.Contains(out, "Verify return code: 0 (ok)") {
		t.Fatalf("a pinned SNI: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		args []string
		sni  string
		code string
	}{
		{[]string{"-servername", otherHost}, otherHost, policy.ReasonSNIMismatch},
		{[]string{"-noservername"}, "", policy.ReasonNoSNI},
		{[]string{"-servername", "203.0.113.10"}, "203.0.113.10", policy.ReasonNoSNI},
	} {
		out, err := run(tc.args...)
		if err == nil && strings.Contains(out, "Verify return code: 0 (ok)") {
			t.Errorf("%v: the handshake succeeded:\n%s", tc.args, out)
		}
		h.checkRefused(tc.sni, tc.code)
	}
	h.noMoreEvents()
}

// TestLeafCachedAcrossConnections: connections to one name share its
// leaf, and resume TLS sessions.
func TestLeafCachedAcrossConnections(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	cache := tls.NewLRUClientSessionCache(8)
	resumed := 0
	for i := range 5 {
		tr := &http.Transport{
			DialTLSContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				conn, err := h.handshake(&tls.Config{ServerName: apiHost, RootCAs: h.pool(), ClientSessionCache: cache, NextProtos: []string{"http/1.1"}})
				if err == nil && conn.ConnectionState().DidResume {
					resumed++
				}
				return conn, err
			},
			DisableKeepAlives: true,
		}
		resp, body := do(t, &http.Client{Transport: tr, Timeout: waitLimit}, newRequest(t, "GET", h.url("/"), nil))
		if resp.StatusCode != 200 {
			t.Fatalf("connection %d: %s %s", i, resp.Status, body)
		}
		h.event()
	}
	if h.ca.Minted() != 1 {
		t.Errorf("minted %d leaves for one name, want 1", h.ca.Minted())
	}
	if resumed == 0 {
		t.Error("no connection resumed a TLS session")
	}
	h.ca.Prewarm(apiHost) // cached: nothing to do
	if h.ca.Minted() != 1 {
		t.Errorf("minted %d", h.ca.Minted())
	}
}
