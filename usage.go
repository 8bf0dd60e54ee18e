package airlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/agentproto"
	"github.com/airlock-sandbox/airlock/internal/boundary"
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
	u, err := s.measure()
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

// agentUsageTimeout bounds the agent's answer to a usage request.
const agentUsageTimeout = 10 * time.Second

// measure reads what the sandbox's user commands use now: from its
// boundary on the host, or from its agent where the host cannot (a
// micro-VM's commands live in its guest kernel's cgroups).
func (s *Sandbox) measure() (boundary.Usage, error) {
	u, err := s.b.Usage()
	if !errors.Is(err, errors.ErrUnsupported) || s.sess == nil || s.agentNoUsage.Load() {
		return u, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), agentUsageTimeout)
	defer cancel()
	st, err := s.open(ctx, agentproto.Request{Op: agentproto.OpUsage})
	if err != nil {
		return boundary.Usage{}, err
	}
	defer st.Close()
	var m agentproto.Msg
	if err := s.readReply(ctx, st.c, &m); err != nil {
		var ae *agentproto.Error
		if errors.As(err, &ae) && ae.Code == agentproto.CodeUnsupported {
			s.agentNoUsage.Store(true)
			return boundary.Usage{}, errors.ErrUnsupported
		}
		return boundary.Usage{}, err
	}
	if m.Usage == nil {
		return boundary.Usage{}, errors.New("the agent answered a usage request without usage")
	}
	a := m.Usage
	return boundary.Usage{
		CPUNanos: a.CPUNanos, MemoryBytes: a.MemoryBytes, MemoryPeakBytes: a.MemoryPeakBytes,
		Pids: a.Pids, OOMKills: a.OOMKills, PidsLimitHits: a.PidsLimitHits,
	}, nil
}
