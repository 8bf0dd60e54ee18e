package intercept

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gobwas/ws"

	"github.com/airlock-sandbox/airlock/internal/wsframe"
	"github.com/airlock-sandbox/airlock/policy"
)

// rewritesFrames reports whether the frames of a WebSocket are
// rewritten: when the policy has secrets, whose placeholders the
// sandbox's frames may carry (to substitute, or to block as a leak) and
// whose values the upstream's may (to scrub). Otherwise the upgraded
// connection is spliced as it is.
func (i *Interceptor) rewritesFrames() bool { return i.policy.HasSecrets() }

// wsExtensions is the header field that negotiates WebSocket extensions
// (permessage-deflate): dropped from the upgrade request when frames are
// rewritten, so that their payloads are plain.
const wsExtensions = "Sec-WebSocket-Extensions"

// closeWait bounds how long a refused WebSocket waits for its close
// frame to reach the sandbox before the connection is closed.
const closeWait = 5 * time.Second

// rewriteFrames makes the body of a 101 response, the upstream
// connection that the reverse proxy splices with the sandbox's, one
// whose frames are rewritten: substituted on their way up, scrubbed on
// their way down by scrub, the scrubber of the response's header (nil
// for none).
func (i *Interceptor) rewriteFrames(res *http.Response, x *exchange, scrub *policy.Scrubber) error {
	if ext := res.Header.Values(wsExtensions); len(ext) > 0 {
		return fmt.Errorf("the server took WebSocket extensions that were not offered (%s)", strings.Join(ext, ", "))
	}
	up, ok := res.Body.(io.ReadWriteCloser)
	if !ok {
		return errors.New("the body of a 101 response is not the connection")
	}
	sub := x.c.substituter(x.host)
	c := &wsConn{
		up: up,
		x:  x,
		toUp: wsframe.Rewriter{
			Client: true,
			Bytes:  sub.Bytes,
			Stream: func(r io.Reader) io.Reader { return sub.Reader(r, -1) },
		},
		stopped:     make(chan struct{}),
		sandboxDone: make(chan struct{}),
	}
	if scrub != nil && scrub.Active() {
		c.toSandbox.Bytes = func(b []byte) ([]byte, error) { return scrub.Bytes(b), nil }
		c.toSandbox.Stream = scrub.Reader
	}
	res.Body = c
	return nil
}

// wsConn is the upstream connection of a WebSocket whose frames are
// rewritten, as the reverse proxy sees it: what the sandbox sends is
// written to it, what the upstream sends is read from it. The proxy
// copies with io.Copy, which uses ReadFrom and WriteTo; Read and Write,
// for other callers, go through pipes to them.
//
// A frame that cannot go on (a leak, one that cannot be rewritten, one
// that breaks the protocol) stops the WebSocket: the upstream connection
// is closed at once, and the sandbox gets a close frame saying why.
type wsConn struct {
	up              io.ReadWriteCloser
	x               *exchange
	toUp, toSandbox wsframe.Rewriter

	stopOnce    sync.Once
	stopped     chan struct{} // closed by stop, after code and reason are set
	code        ws.StatusCode
	reason      string
	sandboxDone chan struct{} // closed when WriteTo returns
	doneOnce    sync.Once

	rOnce, wOnce sync.Once
	rPipe        *io.PipeReader // nil until Read, and after Close
	wPipe        *io.PipeWriter // nil until Write, and after Close
}

// ReadFrom copies the sandbox's frames upstream, substituted.
func (c *wsConn) ReadFrom(src io.Reader) (int64, error) {
	n, _, err := c.toUp.Copy(c.up, src)
	if err == nil {
		return n, nil
	}
	code, be := sandboxFault(err)
	if be == nil {
		return n, err // the connection ended
	}
	c.x.blockUpgraded(be)
	c.stop(code, "airlock: blocked: "+be.Reason)
	// The proxy closes the sandbox's connection when this returns: the
	// close frame goes first.
	t := time.NewTimer(closeWait)
	defer t.Stop()
	select {
	case <-c.sandboxDone:
	case <-t.C:
	}
	return n, be
}

// sandboxFault returns the block that a failed copy of the sandbox's
// frames amounts to, with the close frame's status code; nil when the
// copy failed because a connection ended.
func sandboxFault(err error) (ws.StatusCode, *policy.BlockError) {
	var be *policy.BlockError
	switch {
	case errors.As(err, &be): // a leak
		return ws.StatusPolicyViolation, be
	case errors.Is(err, ws.ErrProtocolNonZeroRsv):
		return ws.StatusPolicyViolation, &policy.BlockError{Reason: policy.ReasonSecretUnrewritable, Detail: "a WebSocket frame with RSV bits set (compressed, or of an extension) cannot be scanned for secret placeholders"}
	case errors.Is(err, wsframe.ErrControlTooLong):
		return ws.StatusPolicyViolation, &policy.BlockError{Reason: policy.ReasonSecretUnrewritable, Detail: "a secret value would make a WebSocket control frame longer than 125 bytes"}
	case errors.Is(err, wsframe.ErrTooLong):
		return ws.StatusMessageTooBig, &policy.BlockError{Reason: policy.ReasonSecretUnrewritable, Detail: err.Error()}
	case errors.Is(err, wsframe.ErrProtocol):
		return ws.StatusProtocolError, &policy.BlockError{Reason: policy.ReasonBadRequest, Detail: err.Error()}
	}
	return 0, nil
}

// upstreamFault returns the close frame's status code for a failed copy
// of the upstream's frames, and whether the WebSocket must stop (false
// when a connection ended).
func upstreamFault(err error) (ws.StatusCode, bool) {
	switch {
	case errors.Is(err, wsframe.ErrTooLong):
		return ws.StatusMessageTooBig, true
	case errors.Is(err, wsframe.ErrProtocol), errors.Is(err, wsframe.ErrControlTooLong):
		return ws.StatusProtocolError, true
	}
	return 0, false
}

// WriteTo copies the upstream's frames to the sandbox, scrubbed; once
// the WebSocket is stopped, it ends them with a close frame.
func (c *wsConn) WriteTo(w io.Writer) (int64, error) {
	defer c.doneOnce.Do(func() { close(c.sandboxDone) })
	_, n, err := c.toSandbox.Copy(w, c.up)
	if err != nil {
		if code, stop := upstreamFault(err); stop {
			c.x.c.i.log.Debug("WebSocket frames from upstream refused", "url", c.x.c.i.policy.Redact(c.x.url), "dst", c.x.c.dst, "err", err)
			c.stop(code, "airlock: the server's frames cannot be passed on")
		}
	}
	select {
	case <-c.stopped:
		_ = c.toSandbox.WriteClose(w, c.code, c.reason) // best effort: the connection closes next
	default:
	}
	return n, err
}

// stop closes the upstream connection, and has WriteTo send the
// sandbox a close frame with code and reason.
func (c *wsConn) stop(code ws.StatusCode, reason string) {
	c.stopOnce.Do(func() {
		c.code, c.reason = code, reason
		close(c.stopped)
		c.up.Close()
	})
}

// Read serves a caller that does not use WriteTo.
func (c *wsConn) Read(p []byte) (int, error) {
	c.rOnce.Do(func() {
		pr, pw := io.Pipe()
		c.rPipe = pr
		go func() {
			_, err := c.WriteTo(pw)
			pw.CloseWithError(err) // nil: io.EOF
		}()
	})
	if c.rPipe == nil {
		return 0, net.ErrClosed
	}
	return c.rPipe.Read(p)
}

// Write serves a caller that does not use ReadFrom.
func (c *wsConn) Write(p []byte) (int, error) {
	c.wOnce.Do(func() {
		pr, pw := io.Pipe()
		c.wPipe = pw
		go func() {
			_, err := c.ReadFrom(pr)
			pr.CloseWithError(err) // nil: io.ErrClosedPipe
		}()
	})
	if c.wPipe == nil {
		return 0, net.ErrClosed
	}
	return c.wPipe.Write(p)
}

// Close closes the upstream connection, and the pipes of Read and
// Write.
func (c *wsConn) Close() error {
	c.rOnce.Do(func() {}) // no pipe after Close
	c.wOnce.Do(func() {})
	if c.rPipe != nil {
		c.rPipe.Close()
	}
	if c.wPipe != nil {
		c.wPipe.Close()
	}
	return c.up.Close()
}

// CloseWrite passes on the sandbox's half-close.
func (c *wsConn) CloseWrite() error {
	if cw, ok := c.up.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// blockUpgraded reports a block found in a WebSocket's frames: in the
// exchange's one event when it has not gone out yet (the reverse proxy
// returns, and the event goes out, once the WebSocket is over), in one
// more event otherwise.
func (x *exchange) blockUpgraded(be *policy.BlockError) {
	x.c.i.log.Debug("WebSocket blocked", "url", x.c.i.policy.Redact(x.url), "dst", x.c.dst, "reason", be.Error())
	if x.blocked.noteOpen(be) {
		return
	}
	ev := x.event()
	ev.StatusCode = http.StatusSwitchingProtocols
	ev.Blocked, ev.Reason = true, be.Error()
	x.c.i.emit(ev)
}
