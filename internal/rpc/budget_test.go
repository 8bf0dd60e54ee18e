package rpc

import (
	"context"
	"testing"
	"time"
)

func TestBudget(t *testing.T) {
	b := newBudget(10)
	if !b.tryAcquire(8) || b.tryAcquire(3) {
		t.Fatal("tryAcquire over the budget")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := b.acquire(ctx, 3); err == nil {
		t.Fatal("acquire over the budget did not wait")
	}
	done := make(chan error, 1)
	go func() { done <- b.acquire(context.Background(), 3) }()
	b.release(8)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// An item larger than the whole budget goes through alone.
	b.release(3)
	if !b.tryAcquire(100) || b.tryAcquire(1) {
		t.Error("an oversized item must go through alone")
	}
}
