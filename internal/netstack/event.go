package netstack

import (
	"sync"
	"sync/atomic"
	"time"
)

// Event types.
const (
	EventDNS     = "dns"
	EventConnect = "connect"
	EventUDP     = "udp"
)

// Event reports a DNS answer, a TCP connection or a UDP flow, allowed or
// blocked.
type Event struct {
	Time time.Time `json:"time"`
	// Type is "dns", "connect" or "udp".
	Type string `json:"type"`
	// Host is the DNS question, or the first name pinned to IP.
	Host string `json:"host,omitempty"`
	// IP is the destination address of a connection or flow.
	IP string `json:"ip,omitempty"`
	// Answers are the addresses a DNS answer gave the sandbox.
	Answers []string `json:"answers,omitempty"`
	Port    uint16   `json:"port,omitempty"`
	// Proto is "tcp" or "udp" (for DNS: how the question came).
	Proto string `json:"proto,omitempty"`
	// QType is the DNS question's type ("A", "AAAA", ...).
	QType   string `json:"qtype,omitempty"`
	Blocked bool   `json:"blocked"`
	// Reason says why a flow was blocked (a policy reason string), or why
	// some DNS answers were dropped.
	Reason string `json:"reason,omitempty"`
	// BytesSent went from the sandbox upstream; BytesReceived came back.
	BytesSent     int64 `json:"bytes_sent,omitempty"`
	BytesReceived int64 `json:"bytes_received,omitempty"`
	DurationMs    int64 `json:"duration_ms,omitempty"`
}

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
	if ev.Time.IsZero() {
		ev.Time = time.Now()
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
