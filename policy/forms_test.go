package policy

import (
	"bytes"
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"
)

// checkFormsIn fails when text, an encoding of prefix+v+suffix, does not
// hold the form of v that the policy looks for.
func checkFormsIn(t *testing.T, prefix, v, suffix string) {
	t.Helper()
	whole := prefix + v + suffix
	a := len(prefix) % 3
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		text := enc.EncodeToString([]byte(whole))
		alpha := base64.StdEncoding
		if enc == base64.URLEncoding || enc == base64.RawURLEncoding {
			alpha = base64.URLEncoding
		}
		core := base64Core(alpha, v, a)
		if !strings.Contains(text, core) {
			t.Fatalf("base64 of %q+%q+%q = %q does not hold the core %q (offset %d)", prefix, v, suffix, text, core, a)
		}
		if !strings.Contains(url.QueryEscape(text), escapeURLValue(core)) {
			t.Fatalf("percent-encoded base64 %q does not hold %q", url.QueryEscape(text), escapeURLValue(core))
		}
	}
	if text, core := base32.StdEncoding.EncodeToString([]byte(whole)), base32Core(v, len(prefix)%5); !strings.Contains(text, core) {
		t.Fatalf("base32 of %q+%q+%q = %q does not hold the core %q", prefix, v, suffix, text, core)
	}
	for _, f := range []func(string) string{escapeURLValue, url.QueryEscape, url.PathEscape, func(s string) string { return hex.EncodeToString([]byte(s)) }} {
		if !strings.Contains(f(whole), f(v)) {
			t.Fatalf("%q does not hold %q", f(whole), f(v))
		}
	}
	if utf8.ValidString(prefix) && utf8.ValidString(v) {
		b, _ := json.Marshal(whole)
		if !strings.Contains(string(b), jsonEscape(v, true)) {
			t.Fatalf("JSON %s does not hold %q", b, jsonEscape(v, true))
		}
	}
}

func TestValueFormsFoundInLongerTexts(t *testing.T) {
	for _, v := range []string{"sk-live-0123456789abcdef", "a", "ab", "abc", "abcd", "p@ss w/rd+=?&<>\"\\", "\x00\xff\x80binary\x01", "ключ-секрет"} {
		for _, prefix := range []string{"", "x", "xy", "Bearer ", "user:"} {
			for _, suffix := range []string{"", "!", "!!", "&more=1"} {
				checkFormsIn(t, prefix, v, suffix)
			}
		}
	}
}

func FuzzValueForms(f *testing.F) {
	f.Add("", "sk-live-0123456789", "")
	f.Add("u:", "p@ss", "\n")
	f.Add("ab", "\xff\x00\x80", "z")
	f.Fuzz(func(t *testing.T, prefix, v, suffix string) {
		if v == "" {
			return
		}
		checkFormsIn(t, prefix, v, suffix)
	})
}

// TestValueLeaksToOtherHosts: a secret's value, in each form ordinary
// software writes it in, is a leak in the URL, a header and the body of
// a request to a host it is not scoped to (and in plain HTTP to its own
// host), streamed or whole, split anywhere; a value shorter than
// MinValueLen is not looked for; the secret's own host over TLS may get
// it.
func TestValueLeaksToOtherHosts(t *testing.T) {
	const value = "sk-live/0123+456789=="
	p := newPolicy(t, Config{
		AllowedHosts: []string{"*"},
		Secrets: map[string]Secret{
			"KEY":   {Value: value, Hosts: []string{"api.example.com"}},
			"SHORT": {Value: "pin1", Hosts: []string{"api.example.com"}},
		},
	}, Options{})
	forms := map[string]string{
		"as it is":              value,
		"percent-encoded":       url.QueryEscape(value),
		"lower percent":         strings.ToLower(url.QueryEscape(value)),
		"path-escaped":          url.PathEscape(value),
		"base64":                base64.StdEncoding.EncodeToString([]byte(value)),
		"base64, no padding":    base64.RawStdEncoding.EncodeToString([]byte(value)),
		"URL-safe base64":       base64.URLEncoding.EncodeToString([]byte(value)),
		"base64 at offset 1":    base64.StdEncoding.EncodeToString([]byte("x" + value + "y")),
		"base64 at offset 2":    base64.RawURLEncoding.EncodeToString([]byte("xy" + value)),
		"base64 in a query":     url.QueryEscape(base64.StdEncoding.EncodeToString([]byte("xy" + value))),
		"Basic credentials":     "Basic " + base64.StdEncoding.EncodeToString([]byte("user:"+value)),
		"hex":                   hex.EncodeToString([]byte(value)),
		"HEX":                   strings.ToUpper(hex.EncodeToString([]byte(value))),
		"JSON":                  mustJSON(t, map[string]string{"k": value}),
		"JSON, HTML escapes":    mustJSON(t, value+"<>"),
		"inside a longer token": "prefix" + value + "suffix",
	}
	for name, text := range forms {
		for _, c := range []struct {
			host  string
			tls   bool
			code  string
			allow bool
		}{
			{"other.example.com", true, ReasonSecretLeak, false},
			{"api.example.com", false, ReasonSecretPlaintext, false},
			{"api.example.com", true, "", true},
		} {
			s := p.SubstituterFor(c.host, c.tls)
			_, err := s.Bytes([]byte("data " + text + " end"))
			if c.allow {
				if err != nil {
					t.Errorf("%s to %s: %v, want it allowed", name, c.host, err)
				}
				continue
			}
			if ReasonOf(err) != c.code {
				t.Errorf("%s in a body to %s (tls %v): %v, want %s", name, c.host, c.tls, err, c.code)
			}
			if err != nil && strings.Contains(err.Error(), value) {
				t.Errorf("the error quotes the value: %v", err)
			}
			if _, err := s.Header("X-Data", text); ReasonOf(err) != c.code {
				t.Errorf("%s in a header to %s: %v", name, c.host, err)
			}
			if _, err := s.URL("/path?q=" + text); ReasonOf(err) != c.code {
				t.Errorf("%s in a URL to %s: %v", name, c.host, err)
			}
			// Streamed, one byte at a time: a form split across reads
			// is found.
			in := []byte(strings.Repeat("z", 100) + text + "tail")
			_, err = io.ReadAll(s.Reader(&chunked{src: in, sizes: bytes.Repeat([]byte{1}, len(in))}, -1))
			if ReasonOf(err) != c.code {
				t.Errorf("%s streamed to %s: %v", name, c.host, err)
			}
		}
	}
	// A short value is not looked for: it would be found in innocent
	// data.
	s := p.Substituter("other.example.com")
	if out, err := s.Bytes([]byte("pin1 and cGluMQ== and 70696e31")); err != nil || string(out) != "pin1 and cGluMQ== and 70696e31" {
		t.Errorf("short value: %q, %v", out, err)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestScrubValueForms: a secret's host's responses are scrubbed of its
// value in each form, replaced by the placeholder in the same form, so
// that a value stored there and read back encoded does not reach the
// sandbox either; Redact does the same for every secret.
func TestScrubValueForms(t *testing.T) {
	const value = "sk-live/0123+456789=="
	p := newPolicy(t, Config{
		AllowedHosts: []string{"*"},
		Secrets:      map[string]Secret{"KEY": {Value: value, Hosts: []string{"api.example.com"}}},
	}, Options{})
	ph := p.Env()["KEY"]
	sc := p.ResponseScrubber(p.Substituter("api.example.com"))
	for name, c := range map[string][2]string{
		"as it is": {value, ph},
		"base64":   {base64.StdEncoding.EncodeToString([]byte(value)), base64.StdEncoding.EncodeToString([]byte(ph))},
		"hex":      {hex.EncodeToString([]byte(value)), hex.EncodeToString([]byte(ph))},
		"escaped":  {url.QueryEscape(value), ph},
	} {
		out := sc.String("<" + c[0] + ">")
		if strings.Contains(out, c[0]) || !strings.Contains(out, ph) && !strings.Contains(out, c[1][:len(c[1])-4]) {
			t.Errorf("%s: scrubbed to %q, want the placeholder's form %q", name, out, c[1])
		}
		if got := p.Redact("x" + c[0]); strings.Contains(got, c[0]) {
			t.Errorf("Redact left the value %s: %q", name, got)
		}
	}
	for _, a := range []string{"", "x", "xy"} {
		text := base64.StdEncoding.EncodeToString([]byte(a + value + "tail"))
		out := sc.String(text)
		dec, _ := base64.StdEncoding.DecodeString(out)
		if strings.Contains(out, base64Core(base64.StdEncoding, value, len(a))) || bytes.Contains(dec, []byte(value)) {
			t.Errorf("base64 at offset %d: %q still carries the value", len(a), out)
		}
	}
}

// TestNameLeaks: a host name that carries a secret's value (as it is,
// in hex or in base32, in any case, across labels) is refused with
// secret_leak for DNS, TLS and HTTP alike, unless the secret is scoped
// to that name; a short value is not looked for.
func TestNameLeaks(t *testing.T) {
	const value = "Sk-Live-0123456789abcdef"
	p := newPolicy(t, Config{
		AllowedHosts: []string{"*.example.com", "*.example.org"},
		Egress:       []EgressRule{{Destination: "*.example.net", Ports: []uint16{22}}},
		Secrets: map[string]Secret{
			"KEY":   {Value: value, Hosts: []string{"*.example.org"}},
			"SHORT": {Value: "abc", Hosts: []string{"api.example.org"}},
		},
	}, Options{})
	h := hex.EncodeToString([]byte(value))
	b32 := strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString([]byte("xy" + value)))
	for _, name := range []string{
		"sk-live-0123456789abcdef.example.com",
		"SK-LIVE-0123456789ABCDEF.x.example.com",
		h + ".example.com",
		h[:20] + "." + h[20:] + ".example.com",
		strings.ToUpper(h[:30]) + "." + h[30:] + ".example.com",
		b32[:40] + "." + b32[40:] + ".example.com",
		h + ".example.net", // an egress rule's name
	} {
		checks := []func() (bool, string){
			func() (bool, string) { return p.NameResolvable(name) },
			func() (bool, string) { return p.HostPortDecision(name, 443) },
		}
		if strings.HasSuffix(name, ".net") {
			checks = checks[:1]
		}
		for _, f := range checks {
			ok, reason := f()
			if ok || ReasonCode(reason) != ReasonSecretLeak {
				t.Errorf("%s: %v, %q; want secret_leak", name, ok, reason)
			}
			if strings.Contains(strings.ToLower(reason), strings.ToLower(value)) || strings.Contains(reason, h) {
				t.Errorf("the reason carries the value: %q", reason)
			}
		}
	}
	for _, name := range []string{h + ".example.org", "api.example.com", "abc.example.com", "616263.example.com", "sk-live-0123456789abcde.example.com"} {
		if ok, reason := p.NameResolvable(name); !ok {
			t.Errorf("%s: refused: %s", name, reason)
		}
	}
}

func TestRedactName(t *testing.T) {
	const value = "Sk-Live-0123456789abcdef"
	p := newPolicy(t, Config{AllowedHosts: []string{"*"}, Secrets: map[string]Secret{"KEY": {Value: value, Hosts: []string{"api.example.com"}}}}, Options{})
	h := hex.EncodeToString([]byte(value))
	for _, name := range []string{"SK-LIVE-0123456789ABCDEF.example.com", h[:10] + "." + h[10:] + ".example.com"} {
		got := p.RedactName(name)
		if strings.Contains(strings.ToLower(got), strings.ToLower(value)) || strings.Contains(got, h[:16]) || !strings.Contains(got, "secret KEY") {
			t.Errorf("RedactName(%q) = %q", name, got)
		}
	}
	if got := p.RedactName("api.example.com"); got != "api.example.com" {
		t.Errorf("RedactName(api.example.com) = %q", got)
	}
}

// TestScrubShortValue: a value shorter than MinValueLen is still
// scrubbed from its host's responses as it is and percent-encoded, the
// forms it goes out in.
func TestScrubShortValue(t *testing.T) {
	p := newPolicy(t, Config{AllowedHosts: []string{"*"}, Secrets: map[string]Secret{"PIN": {Value: "a/b+c", Hosts: []string{"api.example.com"}}}}, Options{})
	ph := p.Env()["PIN"]
	sc := p.ResponseScrubber(p.Substituter("api.example.com"))
	if got := sc.String("x a/b+c y a%2Fb%2Bc z"); got != "x "+ph+" y "+ph+" z" {
		t.Errorf("scrubbed to %q", got)
	}
}
