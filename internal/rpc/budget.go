package rpc

import (
	"context"
	"sync"
)

// budget is a counting semaphore of variable weight: at most max units
// are held at once, except that a single holder may take more than max
// when nothing else is held (so one oversized item still goes through,
// alone).
type budget struct {
	mu   sync.Mutex
	max  int64
	used int64
	wake chan struct{} // closed and replaced on every release
}

func newBudget(max int64) *budget {
	return &budget{max: max, wake: make(chan struct{})}
}

// tryAcquire takes n units if they are free now.
func (b *budget) tryAcquire(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used == 0 || b.used+n <= b.max {
		b.used += n
		return true
	}
	return false
}

// acquire takes n units, waiting until they are free or ctx is done.
func (b *budget) acquire(ctx context.Context, n int64) error {
	for {
		b.mu.Lock()
		if b.used == 0 || b.used+n <= b.max {
			b.used += n
			b.mu.Unlock()
			return nil
		}
		wake := b.wake
		b.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// release returns n units.
func (b *budget) release(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	close(b.wake)
	b.wake = make(chan struct{})
	b.mu.Unlock()
}
