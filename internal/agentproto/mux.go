package agentproto

import (
	"encoding/binary"
	"io"
	"math"
	"time"

	"github.com/hashicorp/yamux"
)

// The stream multiplexer has no timer that ends a stream or the session on
// its own: a peer that is slow (stopped, swapped out, throttled) is not a
// dead one, and a timer cannot tell them apart. Death needs none: the
// channel is a socket to the peer's process (or to the monitor of its
// VM), so a peer that dies closes it and the other side reads EOF, and the
// host also sees the process exit. So there is no keepalive, no open
// timeout, and no write timeout (yamux has no switch for the last, so it is
// set beyond reach). A request whose peer hangs ends with its context or
// when the sandbox is closed, which closes the channel.
const never = time.Duration(math.MaxInt64)

// muxConfig is what both sides share. The window bounds how much of one
// stream's data may be in flight, which is what keeps a command printing
// gigabytes from growing either side's memory.
func muxConfig() *yamux.Config {
	cfg := yamux.DefaultConfig()
	cfg.LogOutput = io.Discard
	cfg.EnableKeepAlive = false
	cfg.MaxStreamWindowSize = 1 << 20
	cfg.ConnectionWriteTimeout = never
	cfg.StreamOpenTimeout = 0
	cfg.StreamCloseTimeout = 0
	return cfg
}

// HostMuxConfig is the host's side of the multiplexer. The host closes a
// stream only once it wants nothing more from it: its request answered, or
// abandoned by the caller. If the agent has not closed its end by
// hostCloseTimeout after that, the stream is reset, so that an agent that
// never closes its streams cannot make the host keep them, with up to a
// window of unread data each. Nothing waits for a stream so reset.
func HostMuxConfig() *yamux.Config {
	cfg := muxConfig()
	cfg.StreamCloseTimeout = hostCloseTimeout
	return cfg
}

// hostCloseTimeout bounds how long the host keeps a stream it has closed.
const hostCloseTimeout = 5 * time.Second

// AgentMuxConfig is the agent's side of the multiplexer. The agent closes a
// stream after its last frame (an exit status, a file's end), which the
// host may not have read yet: if the host is paused, that frame must still
// be there when it reads. So the agent never resets a stream it has
// closed; the host closes its end when it has read it.
func AgentMuxConfig() *yamux.Config { return muxConfig() }

// yamux frame header layout (github.com/hashicorp/yamux const.go): version,
// type, flags, stream id, length; type 0 is a data frame.
const (
	muxHeaderSize = 12
	muxTypeData   = 0
)

// CoalesceWrites returns conn with each small yamux data frame written in
// one call. yamux's send loop writes the 12-byte header and the body with
// two calls; on a stream socket that is two system calls per frame and
// often a second wake-up of the reader, which shows on the exec round
// trip. Bodies above coalesceMax are written as they come: the extra call
// is small next to them. Only the single send loop of one yamux session
// may write to the result.
func CoalesceWrites(conn io.ReadWriteCloser) io.ReadWriteCloser {
	return &coalescingConn{ReadWriteCloser: conn}
}

// coalesceMax bounds the copy made to join a header and its body.
const coalesceMax = 64 << 10

type coalescingConn struct {
	io.ReadWriteCloser
	held bool   // buf holds a data-frame header waiting for its body
	buf  []byte // header, then header+body
}

func (c *coalescingConn) Write(p []byte) (int, error) {
	if c.held {
		c.held = false
		c.buf = append(c.buf, p...)
		n, err := c.ReadWriteCloser.Write(c.buf)
		if err == nil && n != len(c.buf) {
			err = io.ErrShortWrite
		}
		if err != nil {
			return 0, err
		}
		return len(p), nil
	}
	if len(p) == muxHeaderSize && p[1] == muxTypeData {
		if n := binary.BigEndian.Uint32(p[8:]); n > 0 && n <= coalesceMax {
			c.buf = append(c.buf[:0], p...)
			c.held = true
			return len(p), nil
		}
	}
	return c.ReadWriteCloser.Write(p)
}
