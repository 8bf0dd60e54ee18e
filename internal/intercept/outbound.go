package intercept

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/airlock-sandbox/airlock/policy"
)

// readForHooks decides how the body goes: known (and empty) when there is
// none; read whole for the request hooks when it is no longer than
// policy.MaxHookBody; otherwise it streams from the sandbox.
func (x *exchange) readForHooks(r *http.Request) *refusal {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		x.whole = []byte{}
		return nil
	}
	x.stream = true
	x.length = r.ContentLength
	p := x.c.i.policy
	if !p.HasRequestHooks() {
		return nil
	}
	limit := int64(p.MaxHookBody())
	if r.ContentLength > limit {
		return nil
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return refuse(http.StatusBadRequest, policy.ReasonBadRequest, "reading the request body: %v", err)
	}
	if int64(len(b)) <= limit {
		x.whole, x.stream = b, false
	} else {
		x.prefix = b // streams, after what was read
	}
	return nil
}

// runRequestHooks runs the policy's request hooks, which see
// placeholders, and takes what they return. It keeps the request as they
// left it for the response hooks.
func (x *exchange) runRequestHooks(ctx context.Context, host string) *refusal {
	p := x.c.i.policy
	if !p.HasRequestHooks() && !p.HasResponseHooks() {
		return nil
	}
	preq := &policy.Request{Method: x.outMethod, URL: x.target, Host: host, Header: x.header, Body: x.whole}
	if p.HasRequestHooks() {
		out, err := p.FilterRequest(ctx, preq)
		if err != nil {
			return blockedBy(err)
		}
		preq = out
	}
	x.hooked = preq
	x.method, x.url = preq.Method, preq.URL
	x.outMethod, x.target = preq.Method, preq.URL
	if x.outMethod == http.MethodConnect {
		return refuse(http.StatusForbidden, policy.ReasonPolicyError, "a request hook made the request a CONNECT")
	}
	x.header = preq.Header.Clone() // x.hooked keeps the placeholders
	cleanHeader(x.header)
	switch {
	case !x.stream:
		x.whole = preq.Body
		if x.whole == nil {
			x.whole = []byte{} // the hook removed the body
		}
	case preq.Body != nil:
		// A hook gave a body to a request whose body streamed: it
		// replaces the stream.
		x.whole, x.stream, x.prefix = preq.Body, false, nil
	}
	return nil
}

// substitute replaces the placeholders in the URL, the header values and
// the body for host, when the policy has secrets. A short body of known
// length is read whole, so that it keeps an exact Content-Length and a
// leak in it stops the request before any of it is sent; a longer one is
// rewritten as it streams (rewrite does it), without a length.
func (x *exchange) substitute(r *http.Request, host string) *refusal {
	p := x.c.i.policy
	if !p.HasSecrets() {
		return nil
	}
	s := x.c.substituter(host)
	var err error
	if x.target, err = s.URL(x.target); err != nil {
		return blockedBy(err)
	}
	for k, vs := range x.header {
		for j, v := range vs {
			if vs[j], err = s.Header(k, v); err != nil {
				return blockedBy(err)
			}
		}
	}
	if x.scrubber().Active() {
		// The response will be scrubbed, which compressed data defeats:
		// ask for it plain (modifyResponse decodes what comes
		// compressed anyway). And ask for all of it: a value stored on
		// the host and read back in ranges would come in pieces that no
		// scrubber can recognise (modifyResponse refuses a partial
		// response that comes anyway).
		x.header.Set("Accept-Encoding", "identity")
		x.header.Del("Range")
		x.header.Del("If-Range")
	}
	if x.stream || len(x.whole) > 0 {
		if err := p.CheckBodyEncoding(strings.Join(x.header.Values("Content-Encoding"), ", ")); err != nil {
			return blockedBy(err)
		}
	}
	if x.stream && x.prefix == nil && r.ContentLength > 0 && r.ContentLength <= smallBody {
		b := make([]byte, r.ContentLength)
		if _, err := io.ReadFull(r.Body, b); err != nil {
			return refuse(http.StatusBadRequest, policy.ReasonBadRequest, "reading the request body: %v", err)
		}
		x.whole, x.stream = b, false
	}
	maxBody := x.c.i.maxBody
	switch {
	case !x.stream && int64(len(x.whole)) > maxBody, x.stream && r.ContentLength > maxBody:
		// A streamed body whose declared length passes the bound is
		// refused before any of it goes upstream.
		return blockedBy(&policy.BlockError{Reason: policy.ReasonSecretUnrewritable, Detail: fmt.Sprintf("the body is longer than %d bytes, the most that is scanned for secret placeholders", maxBody)})
	case !x.stream:
		if x.whole, err = s.Bytes(x.whole); err != nil {
			return blockedBy(err)
		}
	default:
		x.rewrite = s
		x.length = -1 // rewriting changes the length
	}
	return nil
}

// upstreamBody is the request body the transport sends: it counts the
// bytes and records a block (a placeholder leak found mid-body, or a
// body past the bound) so that the sandbox gets a 403 whatever error the
// transport reports.
type upstreamBody struct {
	r io.Reader
	x *exchange
}

func (b *upstreamBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.x.reqBytes.Add(int64(n))
	if err != nil && err != io.EOF {
		var be *policy.BlockError
		if errors.As(err, &be) {
			b.x.blocked.note(be)
		}
	}
	return n, err
}

// Close does nothing: the sandbox's body belongs to its server.
func (b *upstreamBody) Close() error { return nil }
