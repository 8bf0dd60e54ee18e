package netstack

import (
	"testing"
	"time"
)

func TestEmitterNeverBlocks(t *testing.T) {
	release := make(chan struct{})
	got := 0
	e := newEmitter(func(Event) {
		<-release
		got++
	})
	start := time.Now()
	for range 3 * eventQueue {
		e.emit(Event{Kind: EventConnect})
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("emit blocked for %v", d)
	}
	if e.dropped.Load() == 0 {
		t.Error("nothing dropped")
	}
	close(release)
	e.close()
	if uint64(got)+e.dropped.Load() != 3*eventQueue {
		t.Errorf("delivered %d, dropped %d", got, e.dropped.Load())
	}
	e.emit(Event{}) // after close: dropped, no panic
}
