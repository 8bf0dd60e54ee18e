package intercept

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock/policy"
)

// modifyResponse applies the policy to a response before the sandbox
// sees it: a block found in the request body meanwhile wins; then
// scrubbing (headers at once, the body as it streams, trailers at its
// end); then the response hooks, which see the scrubbed response, whole
// when it is short enough.
func (i *Interceptor) modifyResponse(res *http.Response) error {
	x := exchangeOf(res.Request.Context())
	if be := x.blocked.Load(); be != nil {
		return be
	}
	p := i.policy
	var scrub *policy.Scrubber
	if sc := x.scrubber(); sc.Active() {
		scrub = sc
		scrub.Header(res.Header)
	}
	if res.StatusCode == http.StatusSwitchingProtocols {
		// The body is the upgraded connection (a WebSocket: rewrite
		// passes on no other upgrade), which the proxy splices with the
		// sandbox's once it has written the 101 there.
		x.switched = true
		if err := i.upgradeHooks(res, x); err != nil {
			return err
		}
		if i.rewritesFrames() {
			return i.rewriteFrames(res, x, scrub)
		}
		return nil
	}

	if scrub != nil {
		if err := checkWhole(res); err != nil {
			return err
		}
	}
	hasBody := res.Body != http.NoBody
	orig := res.Body
	var body io.Reader = res.Body
	if scrub != nil && hasBody {
		plain, err := decodedBody(res)
		if err != nil {
			return err
		}
		// Scrubbing changes the length.
		body = scrub.Reader(plain)
		res.ContentLength = -1
		res.Header.Del("Content-Length")
	}
	if p.HasResponseHooks() {
		var whole []byte
		switch limit := int64(p.MaxHookBody()); {
		case !hasBody:
			whole = []byte{}
		case res.ContentLength <= limit:
			b, err := io.ReadAll(io.LimitReader(body, limit+1))
			if err != nil {
				return fmt.Errorf("reading the response for the hooks: %w", err)
			}
			if int64(len(b)) <= limit {
				whole = b
			} else {
				body = io.MultiReader(bytes.NewReader(b), body)
			}
		}
		out, err := p.FilterResponse(res.Request.Context(), &policy.Response{StatusCode: res.StatusCode, Header: res.Header, Body: whole}, x.hooked)
		if err != nil {
			return err
		}
		res.StatusCode = out.StatusCode
		res.Status = strconv.Itoa(out.StatusCode) + " " + http.StatusText(out.StatusCode)
		res.Header = out.Header
		cleanResponseHeader(res.Header)
		if hasBody && (whole != nil || out.Body != nil) {
			b := out.Body
			if b == nil {
				b = []byte{}
			}
			body = bytes.NewReader(b)
			if len(res.Trailer) == 0 {
				res.ContentLength = int64(len(b))
				res.Header.Set("Content-Length", strconv.Itoa(len(b)))
			} else {
				// Trailers need a body without a declared length.
				res.ContentLength = -1
				res.Header.Del("Content-Length")
			}
		}
	}
	if hasBody {
		res.Body = &downstreamBody{r: body, orig: orig, x: x, res: res, scrub: scrub}
	}
	return nil
}

// upgradeHooks runs the response hooks on a 101 Switching Protocols
// response: they may change its header or block it, not its status.
func (i *Interceptor) upgradeHooks(res *http.Response, x *exchange) error {
	p := i.policy
	if !p.HasResponseHooks() {
		return nil
	}
	out, err := p.FilterResponse(res.Request.Context(), &policy.Response{StatusCode: res.StatusCode, Header: res.Header}, x.hooked)
	if err != nil {
		return err
	}
	if out.StatusCode != http.StatusSwitchingProtocols {
		return &policy.BlockError{Reason: policy.ReasonPolicyError, Detail: fmt.Sprintf("a response hook changed a protocol switch's status to %d", out.StatusCode)}
	}
	res.Header = out.Header
	return nil
}

// cleanResponseHeader drops the hop-by-hop fields a hook may have added;
// the server sets them itself.
func cleanResponseHeader(h http.Header) {
	for _, k := range hopHeaders {
		delete(h, k)
	}
}

// downstreamBody is the response body the sandbox gets. It stops with the
// block when one is found in the request body while the response
// streams, and scrubs the trailers once the body is over.
type downstreamBody struct {
	r     io.Reader
	orig  io.Closer
	x     *exchange
	res   *http.Response
	scrub *policy.Scrubber
}

func (b *downstreamBody) Read(p []byte) (int, error) {
	if be := b.x.blocked.Load(); be != nil {
		return 0, be
	}
	n, err := b.r.Read(p)
	if err == io.EOF && b.scrub != nil && len(b.res.Trailer) > 0 {
		b.scrub.Header(b.res.Trailer)
	}
	var de *decodeError
	if errors.As(err, &de) && b.x.reason == "" {
		// The event says why the response was cut off.
		b.x.reason = policy.ReasonUpstreamError + ": " + de.Error()
	}
	return n, err
}

func (b *downstreamBody) Close() error { return b.orig.Close() }

// scrubber returns the scrubber of the exchange's responses (interim
// and final), for its host.
func (x *exchange) scrubber() *policy.Scrubber {
	return x.c.i.policy.ResponseScrubber(x.c.substituter(x.host))
}

// checkWhole refuses a response to be scrubbed that carries part of a
// representation (206 Partial Content, or a Content-Range that names
// bytes): a value cut into ranges is in no single response whole, so no
// scrubber can recognise it, and the sandbox could put the pieces
// together. Requests whose responses are scrubbed go without Range and
// If-Range, so this is for servers that send a range anyway (from a
// query parameter, say). A 416's "bytes */length" carries no content
// and passes.
func checkWhole(res *http.Response) error {
	cr := res.Header.Get("Content-Range")
	if res.StatusCode != http.StatusPartialContent && (cr == "" || strings.Contains(cr, "*/")) {
		return nil
	}
	return &policy.BlockError{Reason: policy.ReasonSecretUnrewritable, Detail: fmt.Sprintf("a partial response (status %d, Content-Range %q) from a host whose responses are scrubbed of secret values: a value cut into ranges cannot be recognised, so only whole responses pass", res.StatusCode, cr)}
}

// decodedBody returns a response body to be scrubbed, decoded of its
// Content-Encoding, since a value inside compressed data cannot be
// found: gzip and deflate are decoded as they stream, and the sandbox
// gets the body plain (without Content-Encoding). Any other coding is
// refused (secret_unrewritable); a range never comes this far
// (checkWhole). Requests whose responses are scrubbed
// ask for no coding, so this is for servers that ignore that.
func decodedBody(res *http.Response) (io.Reader, error) {
	coding := strings.ToLower(strings.TrimSpace(strings.Join(res.Header.Values("Content-Encoding"), ",")))
	if coding == "" || coding == "identity" {
		return res.Body, nil
	}
	unrewritable := func(detail string) error {
		return &policy.BlockError{Reason: policy.ReasonSecretUnrewritable, Detail: detail}
	}
	var r io.Reader
	var err error
	switch coding {
	case "gzip", "x-gzip":
		r, err = gzip.NewReader(res.Body)
	case "deflate":
		r, err = newDeflateReader(res.Body)
	default:
		return nil, unrewritable(fmt.Sprintf("a response with Content-Encoding %q cannot be scanned for secret values", coding))
	}
	if err == nil {
		// Decode a first byte now: a body that is not what its coding
		// says is a 502 with the reason, before any of it is sent.
		br := bufio.NewReader(r)
		if _, perr := br.Peek(1); perr != nil && perr != io.EOF {
			err = perr
		}
		r = br
	}
	if err != nil {
		return nil, fmt.Errorf("decoding the response's %s body to scrub it: %w", coding, err)
	}
	res.Header.Del("Content-Encoding")
	return &decodeErrors{r: r, coding: coding}, nil
}

// decodeErrors names the coding in an error of the decoder it wraps.
type decodeErrors struct {
	r      io.Reader
	coding string
}

// decodeError is a failure to decode a response body.
type decodeError struct{ err error }

func (e *decodeError) Error() string { return e.err.Error() }
func (e *decodeError) Unwrap() error { return e.err }

func (d *decodeErrors) Read(p []byte) (int, error) {
	n, err := d.r.Read(p)
	if err != nil && err != io.EOF {
		err = &decodeError{fmt.Errorf("decoding the response's %s body: %w", d.coding, err)}
	}
	return n, err
}
