package policy

import (
	"bytes"
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"slices"
	"strings"
)

// MinValueLen is the shortest secret value that is looked for in
// requests to hosts it is not scoped to, and whose encoded forms are
// scrubbed from responses. A shorter value ("1234", "admin") is too
// likely to occur in ordinary data: looking for it would block
// innocent requests. Its placeholder is still looked for, and the value
// as it is still scrubbed from its hosts' responses.
const MinValueLen = 8

// A valueForm is one way a secret's value may be written by ordinary
// software on its way out: as it is, percent-encoded in a URL or form,
// escaped in a JSON string, in base64 (standard or URL-safe, at each of
// the three positions a value can have inside a longer base64 text; and
// standard base64 percent-encoded, as a query string carries it) or in
// hex. These are the encodings that HTTP clients, JSON encoders,
// Basic and bearer credentials, data URLs, and dumps apply without
// anyone meaning to hide the value. A transformation chosen to hide it
// (XOR with a key, a cipher, compression, reversal, splitting it among
// requests) is unbounded, and no list can hold it: the forms catch the
// value leaving by mistake or by a naive program, not one hidden on
// purpose.
type valueForm struct {
	name string
	// encode gives the text of v in this form, which must be found in
	// any text that carries v in this form, whatever surrounds it.
	encode func(v string) string
}

var valueForms = []valueForm{
	{"as it is", func(v string) string { return v }},
	{"percent-encoded", escapeURLValue},
	{"percent-encoded", func(v string) string { return escapeURL(v, lowerHex) }},
	{"percent-encoded", url.QueryEscape},
	{"percent-encoded", url.PathEscape},
	{"JSON-escaped", func(v string) string { return jsonEscape(v, true) }},
	{"JSON-escaped", func(v string) string { return jsonEscape(v, false) }},
	{"in base64", func(v string) string { return base64Core(base64.StdEncoding, v, 0) }},
	{"in base64", func(v string) string { return base64Core(base64.StdEncoding, v, 1) }},
	{"in base64", func(v string) string { return base64Core(base64.StdEncoding, v, 2) }},
	{"in URL-safe base64", func(v string) string { return base64Core(base64.URLEncoding, v, 0) }},
	{"in URL-safe base64", func(v string) string { return base64Core(base64.URLEncoding, v, 1) }},
	{"in URL-safe base64", func(v string) string { return base64Core(base64.URLEncoding, v, 2) }},
	{"in base64, percent-encoded", func(v string) string { return escapeURLValue(base64Core(base64.StdEncoding, v, 0)) }},
	{"in base64, percent-encoded", func(v string) string { return escapeURLValue(base64Core(base64.StdEncoding, v, 1)) }},
	{"in base64, percent-encoded", func(v string) string { return escapeURLValue(base64Core(base64.StdEncoding, v, 2)) }},
	{"in hex", func(v string) string { return hex.EncodeToString([]byte(v)) }},
	{"in hex", func(v string) string { return strings.ToUpper(hex.EncodeToString([]byte(v))) }},
}

// jsonEscape is v as it appears inside a JSON string, without the
// quotes: with or without the HTML escapes (\u003c for '<') that Go's
// encoder adds by default.
func jsonEscape(v string, html bool) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(html)
	_ = enc.Encode(v) // a string always encodes
	out := bytes.TrimSuffix(b.Bytes(), []byte("\n"))
	return string(out[1 : len(out)-1])
}

// base64Core returns the base64 characters that encode v and nothing
// else when v sits at byte offset a (0, 1 or 2) of a 3-byte group of a
// longer text: the characters whose 6 bits all come from v. Any base64
// text that carries v at that offset holds them, whatever comes before
// and after, with or without padding. (Characters at the edges mix bits
// of v with bits of its neighbours, and are left out.)
func base64Core(enc *base64.Encoding, v string, a int) string {
	if v == "" {
		return ""
	}
	buf := make([]byte, a+len(v)+2)
	copy(buf[a:], v)
	text := enc.EncodeToString(buf)
	// Character k holds bits [6k, 6k+6); v has bits [8a, 8a+8len).
	first := (8*a + 5) / 6
	end := (8*a + 8*len(v)) / 6
	if end <= first {
		return ""
	}
	return text[first:end]
}

// formRules returns the rules that find value in each of its forms long
// enough to look for (MinValueLen; when always is set, the value as it
// is and percent-encoded, the forms it goes out in, whatever their
// length), each replaced by the same form of placeholder, or, when leak
// is set, each a leak of secret name. Forms that coincide are given
// once.
func formRules(name, value, placeholder string, leak, always bool) []rule {
	var out []rule
	seen := make(map[string]bool)
	for i, f := range valueForms {
		from := f.encode(value)
		if seen[from] || from == "" {
			continue
		}
		if i > 1 || !always {
			if len(value) < MinValueLen || len(from) < MinValueLen {
				continue
			}
		}
		seen[from] = true
		r := rule{from: []byte(from), form: f.name}
		if leak {
			r.leak = name
		} else {
			r.to = []byte(f.encode(placeholder))
		}
		out = append(out, r)
	}
	return out
}

// nameForms are the forms in which a value can sit in a DNS name, which
// is case-blind and made of letters, digits and '-' (with dots between
// labels, which are left out before the comparison): the value itself,
// lower-cased (when it is made of those characters), hex and base32
// (at each of the five offsets a value can have in a longer base32
// text), the encodings that carry data in DNS names. Each is lower
// case; a form shorter than MinValueLen is left out.
func nameForms(v string) []string {
	if len(v) < MinValueLen {
		return nil
	}
	var out []string
	add := func(f string) {
		if f = strings.ToLower(f); len(f) >= MinValueLen && !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	if isNameText(v) {
		add(v)
	}
	add(hex.EncodeToString([]byte(v)))
	for a := range 5 {
		add(base32Core(v, a))
	}
	return out
}

// isNameText reports whether s is made of the characters a DNS label
// holds.
func isNameText(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// base32Core is base64Core for base32 (RFC 4648), whose characters
// carry 5 bits and whose groups are 5 bytes: a is 0 to 4.
func base32Core(v string, a int) string {
	buf := make([]byte, a+len(v)+4)
	copy(buf[a:], v)
	text := base32.StdEncoding.EncodeToString(buf)
	first := (8*a + 4) / 5
	end := (8*a + 8*len(v)) / 5
	if end <= first {
		return ""
	}
	return text[first:end]
}
