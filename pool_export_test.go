package airlock

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
