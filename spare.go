package airlock

import (
	"context"
	"sync"

	"github.com/hashicorp/yamux"
)

// spareStream holds one stream to the agent opened ahead of the request
// that will use it. Opening a stream is a frame of its own that the agent
// must accept before it can read a request; done ahead, while the caller
// looks at the previous result, a request costs the agent one frame.
//
// At most one open is in flight; its outcome waits in ch until one
// request takes it. A request that finds the open still in flight waits
// for it, since it will complete sooner than a new one; concurrent
// requests do not queue behind each other but open their own streams.
type spareStream struct {
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

func newSpareStream(sess *yamux.Session) *spareStream {
	return &spareStream{sess: sess, ch: make(chan spareResult, 1)}
}

// kick starts refill in the background unless a spare is open or
// opening: every request ends with one, most find nothing to do.
func (sp *spareStream) kick() {
	sp.mu.Lock()
	busy := sp.inFlight
	sp.mu.Unlock()
	if !busy {
		go sp.refill()
	}
}

// refill opens the next spare unless one is open or opening.
func (sp *spareStream) refill() {
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

// take returns the spare stream, waiting for it if it is being opened, or
// nil when there is none for this request.
func (sp *spareStream) take(ctx context.Context) *yamux.Stream {
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
