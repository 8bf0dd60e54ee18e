package intercept

import (
	"context"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/policy"
)

// curl runs curl against the harness, with apiHost and otherHost
// resolved to its listener, and returns the response header block, the
// body and the HTTP version curl reports.
func (h *harness) curl(args ...string) (header, body, version string) {
	h.t.Helper()
	curl, err := exec.LookPath("curl")
	if err != nil {
		h.t.Skip("curl is not installed")
	}
	_, port, err := net.SplitHostPort(h.ln.Addr().String())
	if err != nil {
		h.t.Fatal(err)
	}
	base := []string{"-sS", "--max-time", "20", "--cacert", h.caFile, "-D", "-", "-w", "\n%{http_version}",
		"--resolve", apiHost + ":" + port + ":127.0.0.1", "--resolve", otherHost + ":" + port + ":127.0.0.1"}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	out, err := exec.CommandContext(ctx, curl, append(base, args...)...).CombinedOutput()
	if err != nil {
		h.t.Fatalf("curl %v: %v\n%s", args, err, out)
	}
	s := string(out)
	header, rest, ok := strings.Cut(s, "\r\n\r\n")
	if !ok {
		h.t.Fatalf("curl output without a header: %q", s)
	}
	i := strings.LastIndexByte(rest, '\n')
	return header, rest[:i], rest[i+1:]
}

func TestCurl(t *testing.T) {
	for _, tc := range []struct {
		name    string
		plain   bool
		flag    string
		version string
	}{
		{"tls h1", false, "--http1.1", "1.1"},
		{"tls h2", false, "--http2", "2"},
		{"plain h1", true, "--http1.1", "1.1"},
		{"plain h2 prior knowledge", true, "--http2-prior-knowledge", "2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{policy: secretConfig(), plain: tc.plain, upstreamH2: true})
			ph := h.placeholder()

			_, body, version := h.curl(tc.flag, "-H", "Authorization: Bearer "+ph, h.url("/get?key="+ph))
			if version != tc.version {
				t.Errorf("curl spoke HTTP/%s, want %s", version, tc.version)
			}
			s := decodeSeen(t, []byte(body))
			if s.Header.Get("Authorization") != "Bearer "+secretValue || s.Query != secretValue || s.Method != "GET" {
				t.Errorf("upstream saw %+v", s)
			}
			if ev := h.eventFor("/get?key=" + ph); ev.StatusCode != 200 || ev.Blocked {
				t.Errorf("event %+v", ev)
			}

			_, body, _ = h.curl(tc.flag, "--data-binary", `{"token":"`+ph+`"}`, "-u", "me:"+ph, h.url("/post"))
			s = decodeSeen(t, []byte(body))
			if s.Body != `{"token":"`+secretValue+`"}` || s.Pass != secretValue || s.Method != "POST" {
				t.Errorf("upstream saw %+v", s)
			}
			h.eventFor("/post")

			header, body, _ := h.curl(tc.flag, "-H", "Authorization: Bearer "+ph, h.hostURL(otherHost, "/leak"))
			if !strings.Contains(header, " 403") || !strings.Contains(strings.ToLower(header), "x-airlock-blocked: secret_leak") || !strings.HasPrefix(body, "airlock: blocked: secret_leak") {
				t.Errorf("a leak answered\n%s\n\n%s", header, body)
			}
			ev := h.eventFor("/leak")
			if !ev.Blocked || policy.ReasonCode(ev.Reason) != policy.ReasonSecretLeak || ev.StatusCode != http.StatusForbidden {
				t.Errorf("event %+v", ev)
			}
			if h.completed.Load() != 2 {
				t.Errorf("upstream completed %d requests, want 2", h.completed.Load())
			}
			h.noMoreEvents()
		})
	}
}

// TestCurlHostMismatch: curl with a Host header other than the SNI.
func TestCurlHostMismatch(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	header, body, _ := h.curl("-H", "Host: "+otherHost, h.url("/"))
	if !strings.Contains(header, " 421") || !strings.HasPrefix(body, "airlock: blocked: "+policy.ReasonHostMismatch) {
		t.Errorf("answered\n%s\n\n%s", header, body)
	}
	if ev := h.event(); ev.Reason == "" || !ev.Blocked {
		t.Errorf("event %+v", ev)
	}
	if h.dials.Load() != 0 {
		t.Errorf("upstream dialled %d times", h.dials.Load())
	}
}
