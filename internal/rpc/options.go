package rpc

import (
	"context"
	"log/slog"
	"syscall"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/api"
)

// Defaults of Options.
const (
	// DefaultMaxMessage fits a 64 MiB write_file in base64 in one line.
	DefaultMaxMessage       = 128 << 20
	DefaultMaxInFlight      = 256
	DefaultMaxInFlightBytes = 256 << 20
	// DefaultMaxReadBytes bounds read_file unless max_bytes says otherwise.
	DefaultMaxReadBytes = 64 << 20
	// eventQueueLen bounds the events waiting to be written per session.
	eventQueueLen = 1024
	// controlReserve is the number of extra slots for control requests
	// (cancel, signal, ...) when MaxInFlight requests are running.
	controlReserve = 32
)

// Options configure a Server. The zero value serves with the defaults and
// refuses "create".
type Options struct {
	// Version is reported by "info".
	Version string
	// MaxMessage bounds one request line, in bytes. Default
	// DefaultMaxMessage.
	MaxMessage int64
	// MaxInFlight bounds the requests a session handles at once; the
	// reader waits beyond it. Default DefaultMaxInFlight.
	MaxInFlight int
	// MaxInFlightBytes bounds the total size of the request lines being
	// handled (and of file content read for responses); the reader waits
	// beyond it. Default DefaultMaxInFlightBytes.
	MaxInFlightBytes int64
	// AllowCreate enables "create"; off on a control socket.
	AllowCreate bool
	// Configure, when set, turns the configuration a create asks for
	// into the one the sandbox is created with, before it is validated
	// (a program's built-in configuration under it); its error answers
	// the request as invalid params.
	Configure func(airlock.Config) (airlock.Config, error)
	// Create starts a sandbox; default airlock.Create. The server sets
	// cfg.OnEvent and cfg.Logger before calling it.
	Create func(ctx context.Context, cfg airlock.Config) (*airlock.Sandbox, error)
	// NewPool starts a pool ("pool.create"); default airlock.NewPool. The
	// server sets cfg.OnEvent and cfg.Logger before calling it.
	NewPool func(ctx context.Context, cfg airlock.Config, size int) (*airlock.Pool, error)
	// OnCreate, when set, is called with each sandbox a session created
	// or took from one of its pools (with the pool's params);
	// the release func it returns (may be nil) runs after that sandbox is
	// closed.
	OnCreate func(sb *airlock.Sandbox, params api.CreateParams) (release func())
	// Logger receives diagnostics (never the protocol); default discard.
	Logger *slog.Logger
	// EndWithLastSandbox ends the session, as the end of its input
	// would, once a "close" has closed the last sandbox it created and
	// been answered: one process serves one sandbox (airlock --rpc, as
	// the protocol's example clients expect).
	EndWithLastSandbox bool
}

func (o Options) withDefaults() Options {
	if o.MaxMessage <= 0 {
		o.MaxMessage = DefaultMaxMessage
	}
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = DefaultMaxInFlight
	}
	if o.MaxInFlightBytes <= 0 {
		o.MaxInFlightBytes = DefaultMaxInFlightBytes
	}
	if o.Create == nil {
		o.Create = airlock.Create
	}
	if o.NewPool == nil {
		o.NewPool = airlock.NewPool
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// maxReadBytes is the largest file read_file may return: what fits in one
// message once base64-encoded (read_file's default is the smaller of this
// and DefaultMaxReadBytes).
func (o *Options) maxReadBytes() int64 {
	return max((o.MaxMessage-4096)/4*3, 0)
}

// ServeOptions are what one session serves besides its own sandboxes.
type ServeOptions struct {
	// Shared sandboxes are available to the session but not closed when
	// it ends; "close" on one stops it.
	Shared []*airlock.Sandbox
	// Main, when set, is the main command "attach" streams.
	Main Main
	// Events delivers the events of the Shared sandboxes (whose OnEvent
	// this session did not set), for example a Hub.
	Events EventSource
}

// Main is the main command of a detached sandbox, as "attach" sees it.
type Main interface {
	// Attach streams the main command's output from now on until it ends
	// (the channel is closed) or stop is called.
	Attach() (out <-chan api.ExecChunk, stop func())
	WriteStdin(b []byte) error
	CloseStdin() error
	// Signal sends sig to the main command.
	Signal(sig syscall.Signal) error
	// Resize changes the size of the main command's terminal.
	Resize(rows, cols uint16) error
	// Wait blocks until the main command has ended.
	Wait() (*airlock.ExecResult, error)
}

// EventSource delivers sandbox events to subscribers. f must not block.
type EventSource interface {
	Subscribe(f func(airlock.Event)) (cancel func())
}
