package intercept

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// holdConn is a sandbox connection as the HTTP server reads it. A
// client may shut down its write side once it has sent a request (a
// half-close, as `nc -N` and many scripts do) and still wait for the
// response, which HTTP/1.1 allows and proxies honour. net/http takes the EOF for a
// client that went away and cancels the request before it is forwarded.
// So while a request is active (http.StateActive, which the server sets
// once it has read a request and before it reads on) an EOF is held
// back: the read waits until the server is done with the request
// (StateIdle), sets a read deadline that passes (as it does to end its
// background read), or the connection closes, and only then reports the
// EOF. A connection whose client really went away fails its writes,
// which end the request anyway. An EOF met while the request's body is
// being read is not held: that body is cut short, and stays so.
type holdConn struct {
	net.Conn
	bodyReads atomic.Int32 // reads of a request body under way (bodyWatch)

	mu       sync.Mutex
	active   bool
	eof      bool          // the connection said EOF; every later read does
	deadline time.Time     // the read deadline the server set last
	wake     chan struct{} // closed, and replaced, to wake a held read
	closed   bool
	done     <-chan struct{} // closed when the sandbox's connection is
}

// newHoldConn wraps c, which serves a sandbox connection whose raw
// connection closes done when it closes.
func newHoldConn(c net.Conn, done <-chan struct{}) *holdConn {
	return &holdConn{Conn: c, wake: make(chan struct{}), done: done}
}

func (c *holdConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	eof := c.eof
	c.mu.Unlock()
	if !eof {
		n, err := c.Conn.Read(p)
		if !errors.Is(err, io.EOF) {
			return n, err
		}
		c.mu.Lock()
		c.eof = true
		c.mu.Unlock()
		if n > 0 {
			return n, nil
		}
	}
	if len(p) > 1 && c.bodyReads.Load() > 0 {
		// A read for the request's body, which is cut short. (The
		// server's own probe for a client gone, which may start while
		// the last read of a complete body returns, reads one byte.)
		return 0, io.EOF
	}
	return 0, c.holdEOF()
}

// holdEOF waits, while a request is active, for it to end, the read
// deadline to pass or the connection to close; it returns the error the
// read gives then (os.ErrDeadlineExceeded, a net.Error whose Timeout is
// true, as the connection itself would give, for a deadline).
func (c *holdConn) holdEOF() error {
	for {
		c.mu.Lock()
		if !c.active || c.closed {
			c.mu.Unlock()
			return io.EOF
		}
		wake, deadline := c.wake, c.deadline
		c.mu.Unlock()
		var timeout <-chan time.Time
		var t *time.Timer
		if !deadline.IsZero() {
			d := time.Until(deadline)
			if d <= 0 {
				return os.ErrDeadlineExceeded
			}
			t = time.NewTimer(d)
			timeout = t.C
		}
		select {
		case <-wake:
		case <-timeout:
			return os.ErrDeadlineExceeded
		case <-c.done:
			return net.ErrClosed
		}
		if t != nil {
			t.Stop()
		}
	}
}

// poke wakes a held read; c.mu is held.
func (c *holdConn) poke() {
	close(c.wake)
	c.wake = make(chan struct{})
}

// setState follows the server's view of the connection
// (http.Server.ConnState).
func (c *holdConn) setState(s http.ConnState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.active = s == http.StateActive
	c.poke()
}

func (c *holdConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.poke()
	c.mu.Unlock()
	return c.Conn.SetReadDeadline(t)
}

func (c *holdConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.poke()
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}

func (c *holdConn) Close() error {
	c.mu.Lock()
	c.closed = true
	c.poke()
	c.mu.Unlock()
	return c.Conn.Close()
}

// CloseWrite passes a half-close on when the connection underneath can
// do it.
func (c *holdConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// bodyWatch is a request body whose reads hc knows of, so that an EOF
// they meet is reported at once rather than held; it records in cut
// that the body failed (ended before its declared length, or broke).
type bodyWatch struct {
	io.ReadCloser
	hc  *holdConn
	cut *atomic.Bool
}

func (b *bodyWatch) Read(p []byte) (int, error) {
	b.hc.bodyReads.Add(1)
	defer b.hc.bodyReads.Add(-1)
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		b.cut.Store(true)
	}
	return n, err
}
