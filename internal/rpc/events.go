package rpc

import (
	"encoding/json"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/api"
)

// knownEventTypes are the event types a session can select, in the
// order of their bits.
func knownEventTypes() []string {
	return []string{airlock.EventExec, airlock.EventFile, airlock.EventLifecycle, airlock.EventNetwork}
}

// allEvents selects every known type.
const allEvents = 1<<4 - 1

// eventBit returns the bit of an event type, or 0 for an unknown one.
func eventBit(t string) uint32 {
	for i, name := range knownEventTypes() {
		if name == t {
			return 1 << i
		}
	}
	return 0
}

// typeNames lists the types in mask.
func typeNames(mask uint32) []string {
	out := []string{}
	for i, name := range knownEventTypes() {
		if mask&(1<<i) != 0 {
			out = append(out, name)
		}
	}
	return out
}

// eventQueue forwards sandbox events to the client as "event"
// notifications. publish never blocks: events beyond the queue's bound
// are dropped and counted, and the next event delivered says how many.
type eventQueue struct {
	out *lineWriter
	log *slog.Logger
	ch  chan airlock.Event

	mask    atomic.Uint32
	dropped atomic.Int64 // in all
	pending atomic.Int64 // since the last event delivered

	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}
}

func newEventQueue(out *lineWriter, log *slog.Logger) *eventQueue {
	q := &eventQueue{out: out, log: log, ch: make(chan airlock.Event, eventQueueLen), stop: make(chan struct{}), done: make(chan struct{})}
	q.mask.Store(allEvents)
	go q.run()
	return q
}

// wants reports whether events of type t are delivered; types this server
// does not know are delivered while every known type is.
func (q *eventQueue) wants(t string) bool {
	mask := q.mask.Load()
	if bit := eventBit(t); bit != 0 {
		return mask&bit != 0
	}
	return mask == allEvents
}

// publish queues e for the client, or drops it when the queue is full.
func (q *eventQueue) publish(e airlock.Event) {
	if !q.wants(e.Type) {
		return
	}
	select {
	case q.ch <- e:
	default:
		if n := q.dropped.Add(1); n&(n-1) == 0 {
			// Log at 1, 2, 4, 8, ... drops.
			q.log.Warn("client reads events too slowly: dropping them", "dropped", n)
		}
		q.pending.Add(1)
	}
}

func (q *eventQueue) run() {
	defer close(q.done)
	for {
		select {
		case e := <-q.ch:
			if q.send(e) != nil {
				return
			}
		case <-q.stop:
			// Deliver what is queued (a sandbox's "stopped" event).
			for {
				select {
				case e := <-q.ch:
					if q.send(e) != nil {
						return
					}
				default:
					return
				}
			}
		}
	}
}

func (q *eventQueue) send(e airlock.Event) error {
	ev := toAPIEvent(e)
	ev.Dropped = q.pending.Swap(0)
	return q.out.notify(api.NotifyEvent, ev)
}

// close stops the queue after it has written what is queued, waiting at
// most d.
func (q *eventQueue) close(d time.Duration) {
	q.stopOnce.Do(func() { close(q.stop) })
	select {
	case <-q.done:
	case <-time.After(d):
	}
}

// toAPIEvent is e as it goes on the wire: airlock.Event's own JSON, plus
// the drop count.
func toAPIEvent(e airlock.Event) api.Event {
	ev := api.Event{Type: e.Type, Timestamp: e.Timestamp, SandboxID: e.SandboxID}
	raw := func(v any) json.RawMessage {
		b, err := json.Marshal(v)
		if err != nil {
			return nil
		}
		return b
	}
	if e.Exec != nil {
		ev.Exec = raw(e.Exec)
	}
	if e.File != nil {
		ev.File = raw(e.File)
	}
	if e.Lifecycle != nil {
		ev.Lifecycle = raw(e.Lifecycle)
	}
	if e.Network != nil {
		ev.Network = raw(e.Network)
	}
	return ev
}
