package boundary

import (
	"errors"

	"github.com/airlock-sandbox/airlock/internal/cgroup"
)

// GroupCounters reads a backend's host cgroup's limit events (only the
// two counters: it is read around every command); a backend without one
// (g nil) measures nothing.
func GroupCounters(g *cgroup.Group) (Counters, error) {
	if g == nil {
		return Counters{}, errors.ErrUnsupported
	}
	ev, err := g.Events()
	if err != nil {
		return Counters{}, err
	}
	return Counters{OOMKills: ev.OOMKills, PidsLimitHits: ev.PidsLimitHits}, nil
}

// GroupUsage reads a backend's host cgroup's figures; a backend without
// one (g nil) measures nothing.
func GroupUsage(g *cgroup.Group) (Usage, error) {
	if g == nil {
		return Usage{}, errors.ErrUnsupported
	}
	st, err := g.Stats()
	if err != nil {
		return Usage{}, err
	}
	return Usage{
		CPUNanos: st.CPUUsageNanos, MemoryBytes: st.MemoryCurrentBytes, MemoryPeakBytes: st.MemoryPeakBytes,
		Pids: st.PidsCurrent, OOMKills: st.OOMKills, PidsLimitHits: st.PidsLimitHits,
	}, nil
}
