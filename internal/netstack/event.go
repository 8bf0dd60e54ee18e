package netstack

import (
	"github.com/airlock-sandbox/airlock/api"
	"sync"
	"sync/atomic"
)

// Event kinds.
const (
	EventDNS     = api.NetDNS
	EventConnect = api.NetTCP
	EventUDP     = api.NetUDP
)

// Event reports a DNS answer, a TCP connection or a UDP flow, allowed or
// blocked: the wire type of network events, shared with the embed API
// and the JSON-RPC server. RequestBytes went from the sandbox upstream;
// ResponseBytes came back.
type Event = api.NetworkEvent

const eventQueue = 1024

// emitter hands events to a callback from its own goroutine, dropping them
// when the queue is full.
type emitter struct {
	fn      func(Event)
	ch      chan Event
	dropped atomic.Uint64
	done    chan struct{}
	once    sync.Once
	mu      sync.RWMutex
	closed  bool
}

func newEmitter(fn func(Event)) *emitter {
	e := &emitter{fn: fn, done: make(chan struct{})}
	if fn == nil {
		close(e.done)
		return e
	}
	e.ch = make(chan Event, eventQueue)
	go func() {
		defer close(e.done)
		for ev := range e.ch {
			e.fn(ev)
		}
	}()
	return e
}

func (e *emitter) emit(ev Event) {
	if e.fn == nil {
		return
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.closed {
		e.dropped.Add(1)
		return
	}
	select {
	case e.ch <- ev:
	default:
		e.dropped.Add(1)
	}
}

// close stops accepting events and waits until the queued ones are handed
// over.
func (e *emitter) close() {
	e.once.Do(func() {
		if e.ch != nil {
			e.mu.Lock()
			e.closed = true
			close(e.ch)
			e.mu.Unlock()
		}
	})
	<-e.done
}
