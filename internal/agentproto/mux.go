package agentproto

import (
	"encoding/binary"
	"io"
	"time"

	"github.com/hashicorp/yamux"
)

// MuxConfig is the stream multiplexer configuration both sides use. The
// window bounds how much of one stream's data may be in flight, which is
// what keeps a command printing gigabytes from growing either side's
// memory.
func MuxConfig() *yamux.Config {
	cfg := yamux.DefaultConfig()
	cfg.LogOutput = io.Discard
	cfg.EnableKeepAlive = false
	cfg.MaxStreamWindowSize = 1 << 20
	cfg.ConnectionWriteTimeout = 30 * time.Second
	// A stream closed by one side is reset if the other has not closed
	// its end by then, which stops any work still being done for it.
	cfg.StreamCloseTimeout = 5 * time.Second
	return cfg
}

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
