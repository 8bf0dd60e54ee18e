package egress_test

import (
	"crypto/rand"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/testnet"
	"github.com/airlock-sandbox/airlock/policy"
)

// TestPlaintextSecretRefused proves that a secret's value crosses the
// network only inside TLS: its placeholder in a plain-HTTP request to
// its own host (header, Basic credentials, query, body; HTTP/1.1 and
// h2c) is blocked with secret_plaintext before anything is sent, while
// the same request over HTTPS gets the value; a secret with
// allow_plaintext is substituted in plain HTTP too.
func TestPlaintextSecretRefused(t *testing.T) {
	e := start(t)
	strict, loose := "sk-tls-only-"+rand.Text(), "sk-plain-ok-"+rand.Text()
	e.secret(strict)
	e.secret(loose)
	n := e.network(testnet.API, testnet.Other)
	n.Secrets = map[string]policy.Secret{
		"API_KEY":   {Value: strict, Hosts: []string{testnet.API}},
		"PLAIN_KEY": {Value: loose, Hosts: []string{testnet.API}, AllowPlaintext: true},
	}
	sb := e.box(t, n)
	before := len(e.w.Requests(testnet.APIAddr + ":80"))
	for _, c := range []struct{ name, cmd, url string }{
		{"header", `curl -sS -H "Authorization: Bearer $API_KEY" http://api.example.com/echo?h`, "http://api.example.com/echo?h"},
		{"basic", `curl -sS -u "user:$API_KEY" http://api.example.com/echo?u`, "http://api.example.com/echo?u"},
		{"query", `curl -sS "http://api.example.com/echo?key=$API_KEY"`, "http://api.example.com/echo?key=" + sb.Env()["API_KEY"]},
		{"body", `curl -sS --data "key=$API_KEY" http://api.example.com/echo?b`, "http://api.example.com/echo?b"},
		{"h2c", `curl -sS --http2-prior-knowledge -H "X-Key: $API_KEY" http://api.example.com/echo?h2c`, "http://api.example.com/echo?h2c"},
	} {
		m := e.mark()
		out := ok(t, sb, c.cmd)
		if !strings.Contains(out, "airlock: blocked: secret_plaintext") || !strings.Contains(out, "allow_plaintext") {
			t.Errorf("%s: %q, want a secret_plaintext refusal that says how to allow it", c.name, out)
		}
		ev := e.request(t, m, c.url)
		wantBlocked(t, ev, api.NetHTTP, policy.ReasonSecretPlaintext)
		if ev.StatusCode != 403 {
			t.Errorf("%s: event status %d, want 403", c.name, ev.StatusCode)
		}
	}
	if got := len(e.w.Requests(testnet.APIAddr + ":80")); got != before {
		t.Errorf("api.example.com:80 got %d requests, want none", got-before)
	}

	// Over TLS the same request gets the value.
	echo := echoOf(t, ok(t, sb, `curl -sS -H "Authorization: Bearer $API_KEY" https://api.example.com/echo`))
	if req, _ := e.w.LastRequest(testnet.API); req.Header.Get("Authorization") != "Bearer "+strict {
		t.Errorf("over TLS the server got %q (the sandbox saw %q)", req.Header.Get("Authorization"), echo.Headers["Authorization"])
	}
	// allow_plaintext: substituted in plain HTTP.
	ok(t, sb, `curl -sS -H "X-Key: $PLAIN_KEY" http://api.example.com/echo`)
	if req, _ := e.w.LastRequest(testnet.APIAddr + ":80"); req.Header.Get("X-Key") != loose {
		t.Errorf("allow_plaintext: the server got X-Key %q, want the value", req.Header.Get("X-Key"))
	}
	// The other host is a leak, in plain HTTP as in TLS.
	m := e.mark()
	ok(t, sb, `curl -sS -H "X-Key: $PLAIN_KEY" http://other.example.org/echo`)
	e.blocked(t, m, api.NetHTTP, policy.ReasonSecretLeak, testnet.OtherAddr, 80)
}
