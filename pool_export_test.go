package airlock

import "time"

// PoolReady returns the sandboxes waiting in p, for tests that kill or
// watch them.
func PoolReady(p *Pool) []*Sandbox {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*Sandbox, 0, len(p.ready))
	for _, e := range p.ready {
		out = append(out, e.sb)
	}
	return out
}

// SetPoolRefillHold sets how long p's refills wait for the first command
// of the sandbox handed out, for tests that watch them wait.
func SetPoolRefillHold(p *Pool, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refillHold = d
}
