package rpc

import (
	"encoding/json"
	"sync/atomic"
	"syscall"

	"github.com/airlock-sandbox/airlock/api"
)

// target is what "stdin", "signal", "resize" and "cancel" act on: a
// running exec, or an attach to a main command.
type target interface {
	writeStdin(b []byte) error
	closeStdin() error
	signal(sig syscall.Signal) error
	resize(rows, cols uint16) error
	// cancel ends it: an exec is killed with its whole process tree, an
	// attach is detached.
	cancel() error
	// ended reports whether it is over.
	ended() bool
}

// opEntry is a running exec or attach, known by its request's id from the
// moment the request is read, so that requests sent right after it (its
// stdin, a cancel) find it.
type opEntry struct {
	key       string
	id        json.RawMessage
	sandboxID string // set before ready is closed

	// ready is closed once the operation started (tgt set) or failed
	// (tgt nil).
	ready chan struct{}
	tgt   target
	// startErr says why it did not start, when tgt is nil.
	startErr *api.Error

	// stdinHead is closed once the request's own stdin data has been
	// written; "stdin" requests queue behind it. stdinTail is closed when
	// the last "stdin" request queued is done; each new one waits for it.
	// stdinTail is guarded by the session's lock.
	stdinHead chan struct{}
	stdinTail chan struct{}

	cancelled atomic.Bool
}

func newOpEntry(id json.RawMessage) *opEntry {
	head := make(chan struct{})
	return &opEntry{key: idKey(id), id: id, ready: make(chan struct{}), stdinHead: head, stdinTail: head}
}

// started records that the operation runs; stdinWritten must follow.
func (op *opEntry) started(sandboxID string, t target) {
	op.sandboxID, op.tgt = sandboxID, t
	close(op.ready)
}

// stdinWritten lets queued "stdin" requests go.
func (op *opEntry) stdinWritten() { close(op.stdinHead) }

// failed records that the operation did not start.
func (op *opEntry) failed(err *api.Error) {
	op.startErr = err
	close(op.ready)
	close(op.stdinHead)
}
