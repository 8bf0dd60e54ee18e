// Package spare keeps one stream to a sandbox's agent open ahead of the
// request that will use it.
package spare

import (
	"context"
	"sync"

	"github.com/hashicorp/yamux"
)

// Stream holds one stream to the agent opened ahead of the request
// that will use it. Opening a stream is a frame of its own that the agent
// must accept before it can read a request; done ahead, while the caller
// looks at the previous result, a request costs the agent one frame.
//
// At most one open is in flight; its outcome waits in ch until one
// request takes it. A request that finds the open still in flight waits
// for it, since it will complete sooner than a new one; concurrent
// requests do not queue behind each other but open their own streams.
type Stream struct {
	sess *yamux.Session
	ch   chan spareResult // capacity 1: the outcome of the open in flight

	mu       sync.Mutex
	inFlight bool // an open was started and its outcome not yet taken
	taking   bool // a request is waiting for that outcome
}

type spareResult struct {
	st  *yamux.Stream
	err error
}

// New returns the spare of sess; nothing is opened until Refill or Kick.
func New(sess *yamux.Session) *Stream {
	return &Stream{sess: sess, ch: make(chan spareResult, 1)}
}

// Kick starts Refill in the background unless a spare is open or
// opening: every request ends with one, most find nothing to do.
func (sp *Stream) Kick() {
	sp.mu.Lock()
	busy := sp.inFlight
	sp.mu.Unlock()
	if !busy {
		go sp.Refill()
	}
}

// Refill opens the next spare unless one is open or opening.
func (sp *Stream) Refill() {
	sp.mu.Lock()
	if sp.inFlight {
		sp.mu.Unlock()
		return
	}
	sp.inFlight = true
	sp.mu.Unlock()
	st, err := sp.sess.OpenStream()
	sp.ch <- spareResult{st, err} // never blocks: one open in flight
}

// Take returns the spare stream, waiting for it if it is being opened, or
// nil when there is none for this request.
func (sp *Stream) Take(ctx context.Context) *yamux.Stream {
	sp.mu.Lock()
	if !sp.inFlight || sp.taking {
		sp.mu.Unlock()
		return nil
	}
	sp.taking = true
	sp.mu.Unlock()
	select {
	case r := <-sp.ch:
		sp.mu.Lock()
		sp.inFlight, sp.taking = false, false
		sp.mu.Unlock()
		if r.err != nil {
			return nil // the caller opens its own and reports the failure
		}
		return r.st
	case <-ctx.Done():
		// The outcome stays for the next request.
		sp.mu.Lock()
		sp.taking = false
		sp.mu.Unlock()
		return nil
	}
}
