package agentproto

import (
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
