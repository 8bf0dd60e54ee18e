package policy

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// Request is an HTTP request as policy hooks see it: the policy script's
// on_request and on_response, and Go OnRequest and OnResponse hooks.
// Hooks run before secret substitution, so they see placeholders, never
// secret values.
type Request struct {
	// Method is the request method, such as "GET".
	Method string
	// URL is the absolute URL, such as "https://api.openai.com/v1/models".
	URL string
	// Host is the normalised destination host name, without a port. It
	// is read-only for hooks: a hook cannot send a request elsewhere.
	Host string
	// Header holds the request's header fields, with canonical keys,
	// without Host.
	Header http.Header
	// Body is the whole request body, or nil when the caller streams it
	// instead (for example, because it is longer than
	// Policy.MaxHookBody). A hook that sets a body on a request that had
	// none replaces the stream.
	Body []byte
}

// Clone returns a deep copy of r.
func (r *Request) Clone() *Request {
	if r == nil {
		return nil
	}
	c := *r
	c.Header = r.Header.Clone()
	if r.Body != nil {
		c.Body = append([]byte{}, r.Body...)
	}
	return &c
}

// Response is an HTTP response as policy hooks see it. The caller scrubs
// it (Policy.Scrubber) before the hooks see it.
type Response struct {
	StatusCode int
	Header     http.Header
	// Body is the whole response body, or nil when the caller streams it.
	Body []byte
}

// Clone returns a deep copy of r.
func (r *Response) Clone() *Response {
	if r == nil {
		return nil
	}
	c := *r
	c.Header = r.Header.Clone()
	if r.Body != nil {
		c.Body = append([]byte{}, r.Body...)
	}
	return &c
}

// OnRequest is a Go hook run on each HTTP request, after the policy
// script's on_request. It returns the request to send (req itself,
// modified or not, or another), or nil to block it. An error blocks the
// request with ReasonPolicyError. It must return when ctx is done.
type OnRequest func(ctx context.Context, req *Request) (*Request, error)

// OnResponse is a Go hook run on each HTTP response, after the policy
// script's on_response. It returns the response to hand to the sandbox,
// or nil to block it. req is the request as it was sent, with
// placeholders in place of secret values.
type OnResponse func(ctx context.Context, resp *Response, req *Request) (*Response, error)

// checkRequest verifies what a hook returned: the host is unchanged,
// the URL still points at it, and the header fields are well formed.
func checkRequest(orig, got *Request, who string) error {
	if got.Host != orig.Host {
		return fmt.Errorf("%s changed the request's host from %q to %q: a hook cannot send a request elsewhere", who, orig.Host, got.Host)
	}
	if got.URL != orig.URL {
		if err := checkURL(orig.URL, got.URL); err != nil {
			return fmt.Errorf("%s: %v", who, err)
		}
	}
	if got.Method == "" {
		return fmt.Errorf("%s returned a request with no method", who)
	}
	if err := checkHeader(got.Header); err != nil {
		return fmt.Errorf("%s: %v", who, err)
	}
	if vs, ok := got.Header["Host"]; ok && (len(vs) != 1 || vs[0] != orig.Host) {
		return fmt.Errorf("%s set a Host header: the host cannot be changed", who)
	}
	return nil
}

// checkURL verifies that a hook's URL goes where the original did: the
// same scheme and host (and port) for an absolute URL, a path for an
// origin-form one.
func checkURL(orig, got string) error {
	u, err := url.Parse(got)
	if err != nil {
		return fmt.Errorf("the url %q is not valid: %v", got, err)
	}
	o, err := url.Parse(orig)
	if err != nil || o.Host == "" {
		// Origin-form ("/path?query"): keep it so.
		if u.Scheme != "" || u.Host != "" || !strings.HasPrefix(got, "/") || strings.HasPrefix(got, "//") {
			return fmt.Errorf("the url %q must be a path starting with '/': a hook cannot send a request elsewhere", got)
		}
		return nil
	}
	if u.Opaque != "" || !strings.EqualFold(u.Scheme, o.Scheme) || !strings.EqualFold(strings.TrimSuffix(u.Hostname(), "."), strings.TrimSuffix(o.Hostname(), ".")) || u.Port() != o.Port() {
		return fmt.Errorf("changed the url's host or scheme (%q to %q): a hook cannot send a request elsewhere", orig, got)
	}
	return nil
}

func checkResponse(got *Response, who string) error {
	if got.StatusCode < 100 || got.StatusCode > 999 {
		return fmt.Errorf("%s returned status code %d", who, got.StatusCode)
	}
	if err := checkHeader(got.Header); err != nil {
		return fmt.Errorf("%s: %v", who, err)
	}
	return nil
}

// checkHeader refuses header fields that would not survive the trip to
// the wire intact (a line break in a value could add fields).
func checkHeader(h http.Header) error {
	for k, vs := range h {
		if !validFieldName(k) {
			return fmt.Errorf("header name %q is not valid", k)
		}
		for _, v := range vs {
			if !validFieldValue(v) {
				return fmt.Errorf("the value of header %s has a character that is not allowed (such as a line break)", k)
			}
		}
	}
	return nil
}

// validFieldName reports whether s is a token (RFC 9110 section 5.1).
func validFieldName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// validFieldValue reports whether s has no control character but
// horizontal tab (RFC 9110 section 5.5): no line break can add a field.
func validFieldValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}
