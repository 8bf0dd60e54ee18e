package airlock

import (
	"errors"
	"fmt"
	"time"

	"github.com/airlock-sandbox/airlock/api"
)

// Usage is what a sandbox uses at one moment, as `airlock stats` shows
// it; the embed API, the JSON-RPC server and the clients share it.
type Usage = api.Usage

// Usage reads what the sandbox uses now. Without cgroups (see `airlock
// doctor`) there is nothing to read and it fails with errors.ErrUnsupported.
func (s *Sandbox) Usage() (Usage, error) {
	select {
	case <-s.closed:
		return Usage{}, fmt.Errorf("read the usage of sandbox %s: %w", s.id, ErrClosed)
	default:
	}
	u, err := s.b.Usage()
	if errors.Is(err, errors.ErrUnsupported) {
		return Usage{}, fmt.Errorf("read the usage of sandbox %s: it has no cgroup to read it from (airlock doctor says why and how to get one): %w", s.id, err)
	}
	if err != nil {
		return Usage{}, fmt.Errorf("read the usage of sandbox %s: %w", s.id, err)
	}
	out := Usage{
		Time: time.Now(), CPUNanos: u.CPUNanos, CPUs: s.cfg.Resources.CPUs,
		MemoryBytes: u.MemoryBytes, MemoryPeakBytes: u.MemoryPeakBytes, MemoryLimitBytes: uint64(max(s.cfg.Resources.MemoryMB, 0)) << 20,
		Pids: u.Pids, PidsLimit: uint64(max(s.cfg.PidsLimit, 0)),
		OOMKills: u.OOMKills, PidsLimitHits: u.PidsLimitHits,
	}
	if s.net != nil && s.net.stack != nil {
		out.NetRxBytes, out.NetTxBytes = s.net.stack.Traffic()
	}
	return out, nil
}
