package policy

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// refMatch is a reference matcher that works on labels, where the
// policy's matcher works on strings. pattern and name are normalised.
func refMatch(pattern, name string) bool {
	nl := strings.Split(name, ".")
	if pattern == "*" {
		switch nl[len(nl)-1] {
		case "localhost", "local", "internal", "arpa", "test", "invalid", "onion", "alt":
			return false
		}
		return len(nl) >= 2
	}
	pl := strings.Split(pattern, ".")
	if pl[0] == "*" {
		suffix := pl[1:]
		return len(nl) > len(suffix) && slices.Equal(nl[len(nl)-len(suffix):], suffix)
	}
	return slices.Equal(pl, nl)
}

func FuzzHostGlob(f *testing.F) {
	for _, s := range [][2]string{
		{"api.openai.com", "api.openai.com"},
		{"*.amazonaws.com", "s3.us-east-1.amazonaws.com"},
		{"*.amazonaws.com", "amazonaws.com"},
		{"*.amazonaws.com", "evilamazonaws.com"},
		{"*", "localhost"},
		{"*", "a.b"},
		{"*", "127.1"},
		{"*.", "com"},
		{"a*b.com", "axb.com"},
		{"API.Example.COM.", "api.example.com."},
		{"*.example.com", "x..example.com"},
		{"*.com", "0x7f.com"},
	} {
		f.Add(s[0], s[1])
	}
	f.Add("api.example.com:8443", "api.example.com")
	f.Add("*:08080", "a.b")
	f.Fuzz(func(t *testing.T, pattern, name string) {
		// An allowed_hosts pattern, with or without a port, normalises
		// to a text that compiles to itself, and names a real port.
		if g, err := compileHostPort(pattern); err == nil {
			if g2, err := compileHostPort(g.text); err != nil || g2 != g {
				t.Fatalf("allowed pattern %q normalises to %q, which compiles to %+v, %v", pattern, g.text, g2, err)
			}
			if strings.Contains(g.text, ":") != (g.port != 0) {
				t.Fatalf("allowed pattern %q: text %q, port %d", pattern, g.text, g.port)
			}
		}
		got := MatchHost(pattern, name)
		g, err := compileGlob(pattern)
		if err != nil {
			if got {
				t.Fatalf("invalid pattern %q matched %q", pattern, name)
			}
			return
		}
		// The normalised pattern compiles to itself.
		if g2, err := compileGlob(g.text); err != nil || g2 != g {
			t.Fatalf("pattern %q normalises to %q, which compiles to %+v, %v", pattern, g.text, g2, err)
		}
		n, ok := normalizeName(name)
		if !ok {
			if got {
				t.Fatalf("invalid name %q matched %q", name, pattern)
			}
			return
		}
		if want := refMatch(g.text, n); got != want {
			t.Fatalf("MatchHost(%q, %q) = %v, reference says %v", pattern, name, got, want)
		}
		// Case and one trailing dot do not matter.
		if MatchHost(pattern, strings.ToUpper(name)) != got || !strings.HasSuffix(name, ".") && MatchHost(pattern, name+".") != got {
			t.Fatalf("MatchHost(%q, %q) depends on case or a trailing dot", pattern, name)
		}
		if n2, ok := normalizeName(n); !ok || n2 != n {
			t.Fatalf("normalizeName is not idempotent on %q: %q, %v", n, n2, ok)
		}
	})
}

// Fuzz inputs for the rewriter use marker bytes that expand to the
// placeholders and values of these secrets, which the fuzzer could not
// guess.
var fuzzSecrets = map[string]Secret{
	"A":   {Value: "\xa1\xa1value-a", Hosts: []string{"a.example.com"}},
	"A_B": {Value: "\xa2\xa2value-ab", Hosts: []string{"a.example.com", "*.b.example.com"}},
	"C":   {Value: "\xa3\xa3value-c", Hosts: []string{"c.example.com"}},
}

var fuzzHosts = []string{"a.example.com", "x.b.example.com", "c.example.com", "evil.com"}

// fuzzScope is which secrets each host of fuzzHosts may get, written out
// by hand rather than computed by the code under test.
var fuzzScope = [][]string{{"A", "A_B"}, {"A_B"}, {"C"}, nil}

var fuzzNames = []string{"A", "A_B", "C"}

func expandFuzz(data []byte, env map[string]string) []byte {
	var out []byte
	for _, c := range data {
		switch {
		case c >= 0xf0 && c <= 0xf2:
			out = append(out, env[fuzzNames[c-0xf0]]...)
		case c == 0xf3:
			out = append(out, PlaceholderPrefix...)
		case c == 0xf4:
			ph := env["A"]
			out = append(out, ph[:len(ph)-1]...)
		case c >= 0xf5 && c <= 0xf7:
			out = append(out, fuzzSecrets[fuzzNames[c-0xf5]].Value...)
		default:
			out = append(out, c)
		}
	}
	return out
}

// refRewrite is a naive whole-buffer rewrite: at each position, the
// longest pattern that matches there.
func refRewrite(data []byte, from, to [][]byte, leak []bool) ([]byte, bool) {
	var out []byte
	for i := 0; i < len(data); {
		best := -1
		for k := range from {
			if bytes.HasPrefix(data[i:], from[k]) && (best < 0 || len(from[k]) > len(from[best])) {
				best = k
			}
		}
		if best < 0 {
			out = append(out, data[i])
			i++
			continue
		}
		if leak[best] {
			return nil, true
		}
		out = append(out, to[best]...)
		i += len(from[best])
	}
	return out, false
}

// chunked reads src in chunks whose sizes the fuzzer picks.
type chunked struct {
	src   []byte
	sizes []byte
}

func (c *chunked) Read(p []byte) (int, error) {
	if len(c.src) == 0 {
		return 0, io.EOF
	}
	n := len(c.src)
	if len(c.sizes) > 0 {
		n = min(n, int(c.sizes[0]%80)) // 0 is a legal empty read
		c.sizes = c.sizes[1:]
	}
	n = min(n, len(p))
	copy(p, c.src[:n])
	c.src = c.src[n:]
	return n, nil
}

func FuzzRewrite(f *testing.F) {
	p, err := New(Config{Secrets: fuzzSecrets, ScrubResponses: true}, Options{})
	if err != nil {
		f.Fatal(err)
	}
	env := p.Env()
	f.Add([]byte("x\xf0y"), []byte{1, 2, 3}, uint8(0))
	f.Add([]byte("\xf1\xf0\xf1"), []byte{5, 40, 0, 7}, uint8(1))
	f.Add([]byte("\xf3\xf4\xf0"), []byte{16}, uint8(0))
	f.Add([]byte("ok \xf2 then \xf0"), []byte{}, uint8(3))
	f.Add([]byte("\xf5\xf6\xf7 echo"), []byte{3, 3, 3}, uint8(2))
	f.Fuzz(func(t *testing.T, data, sizes []byte, hostSel uint8) {
		hi := int(hostSel) % len(fuzzHosts)
		host := fuzzHosts[hi]
		in := expandFuzz(data, env)
		s := p.Substituter(host)

		var from, to [][]byte
		var leak []bool
		for _, name := range fuzzNames {
			from = append(from, []byte(env[name]))
			scoped := slices.Contains(fuzzScope[hi], name)
			to = append(to, []byte(fuzzSecrets[name].Value))
			leak = append(leak, !scoped)
			if !scoped {
				// The value, in each form, is a leak too.
				for _, f := range formPairs(fuzzSecrets[name].Value, env[name], true) {
					from, to, leak = append(from, []byte(f[0])), append(to, nil), append(leak, true)
				}
			}
		}
		want, wantLeak := refRewrite(in, from, to, leak)

		whole, werr := s.Bytes(in)
		if wantLeak != (werr != nil) || !wantLeak && !bytes.Equal(whole, want) {
			t.Fatalf("host %s, input %q: Bytes = %q, %v; reference %q, leak %v", host, in, whole, werr, want, wantLeak)
		}
		got, gerr := io.ReadAll(s.Reader(&chunked{src: in, sizes: sizes}, -1))
		if wantLeak {
			if ReasonOf(gerr) != ReasonSecretLeak {
				t.Fatalf("host %s, input %q: stream err = %v, want a leak", host, in, gerr)
			}
		} else if gerr != nil || !bytes.Equal(got, want) {
			t.Fatalf("host %s, input %q, sizes %v: stream = %q, %v; want %q", host, in, sizes, got, gerr, want)
		}
		// A value never comes out for a host it is not scoped to.
		for _, name := range fuzzNames {
			if slices.Contains(fuzzScope[hi], name) {
				continue
			}
			v := []byte(fuzzSecrets[name].Value)
			if bytes.Contains(got, v) || bytes.Contains(whole, v) {
				t.Fatalf("host %s got the value of %s: input %q, output %q / %q", host, name, in, got, whole)
			}
		}

		// Scrubbing: stream and whole buffer agree with the reference,
		// and no value survives unless it was made from parts.
		var vals, phs [][]byte
		for _, name := range fuzzNames {
			for _, f := range formPairs(fuzzSecrets[name].Value, env[name], false) {
				vals = append(vals, []byte(f[0]))
				phs = append(phs, []byte(f[1]))
			}
		}
		wantScrub, _ := refRewrite(in, vals, phs, make([]bool, len(vals)))
		if sc := p.Scrubber().Bytes(in); !bytes.Equal(sc, wantScrub) {
			t.Fatalf("Scrub(%q) = %q, reference %q", in, sc, wantScrub)
		}
		sc, err := io.ReadAll(p.Scrubber().Reader(&chunked{src: in, sizes: sizes}))
		if err != nil || !bytes.Equal(sc, wantScrub) {
			t.Fatalf("scrub stream of %q, sizes %v = %q, %v; want %q", in, sizes, sc, err, wantScrub)
		}
	})
}

// formPairs is each form of value (as it is, percent-encoded, JSON-escaped,
// base64 at each offset, hex) with the same form of placeholder, in the
// order the policy looks for them, written out here rather than taken
// from the code under test. Forms other than the value as it is, and
// all of them when leak is set, are kept only for values of MinValueLen
// bytes or more. A form given already is left out.
func formPairs(value, placeholder string, leak bool) [][2]string {
	b64 := func(enc *base64.Encoding, v string, a int) string {
		text := enc.EncodeToString(append(append(make([]byte, a), v...), 0, 0))
		var out []byte
		for k := range len(text) {
			if 6*k >= 8*a && 6*k+6 <= 8*a+8*len(v) {
				out = append(out, text[k])
			}
		}
		return string(out)
	}
	esc := func(v string, digits string) string {
		var out []byte
		for _, c := range []byte(v) {
			if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-._~", c) >= 0 {
				out = append(out, c)
			} else {
				out = append(out, '%', digits[c>>4], digits[c&15])
			}
		}
		return string(out)
	}
	js := func(v string, html bool) string {
		var b bytes.Buffer
		e := json.NewEncoder(&b)
		e.SetEscapeHTML(html)
		e.Encode(v)
		s := strings.TrimSpace(b.String())
		return s[1 : len(s)-1]
	}
	encs := []func(string) string{
		func(v string) string { return v },
		func(v string) string { return esc(v, "0123456789ABCDEF") },
		func(v string) string { return esc(v, "0123456789abcdef") },
		url.QueryEscape,
		url.PathEscape,
		func(v string) string { return js(v, true) },
		func(v string) string { return js(v, false) },
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
		for a := range 3 {
			encs = append(encs, func(v string) string { return b64(enc, v, a) })
		}
	}
	for a := range 3 {
		encs = append(encs, func(v string) string { return esc(b64(base64.StdEncoding, v, a), "0123456789ABCDEF") })
	}
	encs = append(encs,
		func(v string) string { return hex.EncodeToString([]byte(v)) },
		func(v string) string { return strings.ToUpper(hex.EncodeToString([]byte(v))) })
	var out [][2]string
	seen := map[string]bool{}
	for i, enc := range encs {
		f := enc(value)
		if f == "" || seen[f] || (i > 1 || leak) && (len(value) < MinValueLen || len(f) < MinValueLen) {
			continue
		}
		seen[f] = true
		out = append(out, [2]string{f, enc(placeholder)})
	}
	return out
}
