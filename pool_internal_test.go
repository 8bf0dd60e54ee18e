package airlock

import (
	"context"
	"testing"
	"time"
)

// TestPoolHoldOfClosedSandbox: holding back the refill for a sandbox that
// closed (crashed) between Get's check and the hold ends the hold at
// once, without taking the pool's lock on the caller's goroutine, which
// holds it.
func TestPoolHoldOfClosedSandbox(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := Create(ctx, Config{})
	if err != nil {
		t.Fatal(err)
	}
	sb.Close()
	p := &Pool{refillHold: time.Hour, closed: true}
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.mu.Lock()
		p.hold(sb)
		p.mu.Unlock()
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("hold of a closed sandbox did not return: it waits for the lock its caller holds")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		p.mu.Lock()
		holds := p.holds
		p.mu.Unlock()
		if holds == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the hold of a closed sandbox was never released")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
