package policy

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
)

// PlaceholderPrefix begins every placeholder. A placeholder is
// PlaceholderPrefix, the secret's name, '_' and 32 hexadecimal digits
// from crypto/rand (128 bits): recognisable in logs, impossible to
// guess, and made only of characters that URLs, headers and JSON carry
// unescaped.
const PlaceholderPrefix = "AIRLOCK_SECRET_"

// secret is a secret with its placeholder.
type secret struct {
	secretSpec
	placeholder string
	// names are the forms of the value that a DNS name can carry
	// (nameForms).
	names []string
}

// carriedBy returns the first of the secrets whose value name carries,
// in one of the forms a DNS name can carry (nameForms: in any case, and
// across labels), with the form found; nil when there is none. Secrets
// scoped to name are left out unless scopedToo is set.
func carriedBy(secrets []secret, name string, scopedToo bool) (*secret, string) {
	if len(name) < MinValueLen {
		return nil, ""
	}
	n, ok := normalizeName(name)
	compact := strings.ToLower(strings.ReplaceAll(name, ".", ""))
	for i := range secrets {
		s := &secrets[i]
		if len(s.names) == 0 || !scopedToo && s.inScope(n, ok) {
			continue
		}
		for _, f := range s.names {
			if strings.Contains(compact, f) {
				return s, f
			}
		}
	}
	return nil, ""
}

// nameLeak returns why a normalised host name is refused because it
// carries the value of a secret not scoped to it (a DNS question for
// such a name takes the value to the zone's servers, and a request to
// it, in its SNI and Host), or "" when it carries none.
func nameLeak(secrets []secret, name string) string {
	s, f := carriedBy(secrets, name, false)
	if s == nil {
		return ""
	}
	shown := "(with the value across its labels)"
	if i := strings.Index(name, f); i >= 0 {
		shown = name[:i] + "<value>" + name[i+len(f):]
	}
	return fmt.Sprintf("%s: the name %s holds the value of secret %s, which would go to the servers of its domain", ReasonSecretLeak, shown, s.name)
}

// RedactName returns name as it is, or, when it carries a secret's
// value (as nameLeak finds it), a description that does not: for the
// host of an event or a log line about a name the sandbox chose.
func (p *Policy) RedactName(name string) string {
	if s, _ := carriedBy(p.secrets, name, true); s != nil {
		return "(a name that carries the value of secret " + s.name + ")"
	}
	return name
}

func makePlaceholder(name string) (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("making the placeholder of secret %s: %w", name, err)
	}
	return PlaceholderPrefix + name + "_" + hex.EncodeToString(b[:]), nil
}

// inScope reports whether the secret may be sent to a normalised host.
func (s *secret) inScope(host string, ok bool) bool {
	if !ok {
		return false
	}
	_, m := s.hosts.match(host)
	return m
}

// Substituter replaces the placeholders in the parts of one request (its
// URL, headers and body) for the request's destination host. Make one
// with Policy.Substituter; it is safe for concurrent use.
//
// Placeholders of secrets scoped to the host become the secret values.
// A placeholder of any other secret makes the call fail with a
// BlockError whose Reason is ReasonSecretLeak: the caller must then
// block the whole request, and must not send any part of it that was
// not yet sent.
type Substituter struct {
	host string
	// plain substitutes values as they are; url escapes them for a URL.
	plain, url *engine
	// headerUnsafe is set when an in-scope value holds CR, LF or NUL,
	// which cannot go into a header.
	headerUnsafe bool

	// scope turns the values of the secrets scoped to the host back into
	// their placeholders, in each of their forms (formRules): the forms
	// in which they may go out or be echoed.
	scope []rule

	// encoded holds the credentials Header re-encoded with a value in
	// them (base64 of "user:value" -> base64 of "user:placeholder"), so
	// that a response echoing them can be scrubbed too; scrub caches the
	// response scrubber (Policy.ResponseScrubber).
	mu      sync.Mutex
	encoded []rule
	scrub   *Scrubber
}

// maxEncoded bounds the re-encoded credentials a Substituter remembers.
const maxEncoded = 16

// noteEncoded remembers that the credential orig went out as sent.
func (s *Substituter) noteEncoded(sent, orig string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.encoded {
		if string(r.from) == sent {
			return
		}
	}
	if len(s.encoded) >= maxEncoded {
		return
	}
	s.encoded = append(s.encoded, rule{from: []byte(sent), to: []byte(orig)})
	s.scrub = nil
}

// newSubstituter makes the Substituter of requests to host, sent over
// TLS or not. A secret scoped to host is substituted when the request
// goes over TLS or the secret allows plain HTTP; otherwise its
// placeholder blocks (ReasonSecretPlaintext). Every other secret's
// placeholder is a leak, and so is its value in each form that
// formRules looks for: the sandbox must not send a value it obtained
// (from an echo a scrubber missed, or in pieces) to another host.
func newSubstituter(secrets []secret, host string, overTLS bool) *Substituter {
	name, ok := normalizeName(host)
	s := &Substituter{host: host}
	var plain, url []rule
	for i := range secrets {
		sec := &secrets[i]
		from := []byte(sec.placeholder)
		scoped := sec.inScope(name, ok)
		if scoped {
			s.scope = append(s.scope, formRules(sec.name, sec.value, sec.placeholder, false, true)...)
		}
		if scoped && (overTLS || sec.allowPlaintext) {
			plain = append(plain, rule{from: from, to: []byte(sec.value)})
			url = append(url, rule{from: from, to: []byte(escapeURLValue(sec.value))})
			if strings.ContainsAny(sec.value, "\r\n\x00") {
				s.headerUnsafe = true
			}
			continue
		}
		leaks := append([]rule{{from: from, leak: sec.name}}, formRules(sec.name, sec.value, sec.placeholder, true, false)...)
		for j := range leaks {
			leaks[j].cleartext = scoped
		}
		plain = append(plain, leaks...)
		url = append(url, leaks...)
	}
	s.plain = newEngine(plain, host)
	s.url = newEngine(url, host)
	return s
}

// Host returns the destination host the Substituter was made for.
func (s *Substituter) Host() string { return s.host }

// Bytes rewrites a whole buffer: a body, or any other part of a request
// that is not a URL or a header. It returns b itself when nothing
// changes.
func (s *Substituter) Bytes(b []byte) ([]byte, error) {
	return s.plain.bytes(b)
}

// String rewrites a string, as Bytes does.
func (s *Substituter) String(v string) (string, error) {
	if s.plain.quiet([]byte(v)) {
		return v, nil
	}
	out, err := s.plain.bytes([]byte(v))
	if err != nil {
		return "", err
	}
	return string(out), nil
}

// URL rewrites a request URL (absolute or origin-form). Values are
// percent-encoded (every byte outside A-Z, a-z, 0-9, '-', '.', '_' and
// '~'), which servers decode back to the value in a path or a query.
func (s *Substituter) URL(u string) (string, error) {
	if s.url.quiet([]byte(u)) {
		return u, nil
	}
	out, err := s.url.bytes([]byte(u))
	if err != nil {
		return "", err
	}
	return string(out), nil
}

// Header rewrites the value of one header field. The credentials of
// "Authorization: Basic" and "Proxy-Authorization: Basic" are decoded,
// rewritten and encoded again, so that a placeholder given as a user's
// password (curl -u, git over https) works. A value with CR, LF or NUL
// cannot go into a header: the result is then a BlockError with
// ReasonSecretUnrewritable.
func (s *Substituter) Header(name, value string) (string, error) {
	if http.CanonicalHeaderKey(name) == "Authorization" || http.CanonicalHeaderKey(name) == "Proxy-Authorization" {
		if scheme, cred, ok := strings.Cut(value, " "); ok && strings.EqualFold(scheme, "Basic") {
			if dec, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred)); err == nil {
				out, err := s.Bytes(dec)
				if err != nil {
					return "", err
				}
				if string(out) != string(dec) {
					// base64 carries any byte, line breaks included.
					sent := base64.StdEncoding.EncodeToString(out)
					s.noteEncoded(sent, strings.TrimSpace(cred))
					return scheme + " " + sent, nil
				}
			}
		}
	}
	out, err := s.String(value)
	if err != nil {
		return "", err
	}
	if out != value && s.headerUnsafe && strings.ContainsAny(out, "\r\n\x00") {
		return "", s.unsafeHeader(name)
	}
	return out, nil
}

func (s *Substituter) unsafeHeader(name string) error {
	return &BlockError{Reason: ReasonSecretUnrewritable, Detail: fmt.Sprintf("a secret value for %s holds a line break or NUL, which cannot go into the %s header", s.host, http.CanonicalHeaderKey(name))}
}

// Reader rewrites a stream (a request body sent as it arrives). A
// placeholder split across reads is still found: the reader holds back
// at most the length of the longest placeholder. limit bounds the input
// bytes it will scan; past it, Read fails with a BlockError with
// ReasonSecretUnrewritable (the caller blocks, for example because it
// must know the rewritten length before sending). A negative limit means
// no bound. A leak makes Read fail with ReasonSecretLeak, and nothing
// after the last byte already returned is released. When the policy has
// no secrets, Reader returns r itself.
func (s *Substituter) Reader(r io.Reader, limit int64) io.Reader {
	if s.plain.empty() {
		return r
	}
	return newRewriter(s.plain, r, limit)
}

// Request rewrites req's URL, headers and body in place. On error, req
// may be partly rewritten and must be dropped.
func (s *Substituter) Request(req *Request) error {
	u, err := s.URL(req.URL)
	if err != nil {
		return err
	}
	req.URL = u
	for k, vs := range req.Header {
		for i, v := range vs {
			out, err := s.Header(k, v)
			if err != nil {
				return err
			}
			vs[i] = out
		}
	}
	if req.Body != nil {
		b, err := s.Bytes(req.Body)
		if err != nil {
			return err
		}
		req.Body = b
	}
	return nil
}

const (
	upperHex = "0123456789ABCDEF"
	lowerHex = "0123456789abcdef"
)

// escapeURLValue percent-encodes every byte but the unreserved ones.
func escapeURLValue(v string) string { return escapeURL(v, upperHex) }

// escapeURL percent-encodes every byte but the unreserved ones, with
// hexDigits for the digits.
func escapeURL(v, hexDigits string) string {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&15])
	}
	return b.String()
}

// Scrubber replaces secret values in response data by their
// placeholders, so that a server echoing a credential does not hand it
// to the sandbox. Policy.ResponseScrubber gives the one for a request's
// response; one with nothing to scrub returns data unchanged.
type Scrubber struct {
	e *engine
}

// Active reports whether the scrubber can change anything: callers skip
// scrubbing (and keep a body's length) when it cannot.
func (s *Scrubber) Active() bool { return !s.e.empty() }

// Bytes scrubs a whole buffer; it returns b itself when nothing changes.
func (s *Scrubber) Bytes(b []byte) []byte {
	out, _ := s.e.bytes(b) // scrub rules never leak
	return out
}

// String scrubs a string.
func (s *Scrubber) String(v string) string {
	if s.e.empty() {
		return v
	}
	return string(s.Bytes([]byte(v)))
}

// Header scrubs every value of a header in place.
func (s *Scrubber) Header(h http.Header) {
	if s.e.empty() {
		return
	}
	for _, vs := range h {
		for i, v := range vs {
			vs[i] = s.String(v)
		}
	}
}

// Reader scrubs a stream, holding back at most the length of the longest
// secret value.
func (s *Scrubber) Reader(r io.Reader) io.Reader {
	if s.e.empty() {
		return r
	}
	return newRewriter(s.e, r, -1)
}
