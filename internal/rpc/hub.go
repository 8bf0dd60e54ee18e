package rpc

import (
	"sync"

	"github.com/airlock-sandbox/airlock"
)

// Hub fans out the events of sandboxes to the sessions that serve them:
// set a sandbox's Config.OnEvent to Publish and give the Hub to
// ServeWith as ServeOptions.Events.
type Hub struct {
	mu   sync.Mutex
	next int
	subs map[int]func(airlock.Event)
}

// Publish delivers e to every subscriber. Subscribers do not block.
func (h *Hub) Publish(e airlock.Event) {
	h.mu.Lock()
	subs := make([]func(airlock.Event), 0, len(h.subs))
	for _, f := range h.subs {
		subs = append(subs, f)
	}
	h.mu.Unlock()
	for _, f := range subs {
		f(e)
	}
}

// Subscribe registers f until cancel is called.
func (h *Hub) Subscribe(f func(airlock.Event)) (cancel func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.subs == nil {
		h.subs = map[int]func(airlock.Event){}
	}
	id := h.next
	h.next++
	h.subs[id] = f
	return func() {
		h.mu.Lock()
		delete(h.subs, id)
		h.mu.Unlock()
	}
}
