package airlock

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/airlock-sandbox/airlock/internal/agentbin"
	"github.com/airlock-sandbox/airlock/internal/agentproto"
	"github.com/airlock-sandbox/airlock/internal/boundary/process"
	"github.com/airlock-sandbox/airlock/internal/cgroup"
)

func startBoundary(ctx context.Context, id string, c *Config, st storage, boot *agentproto.Boot) (backend, error) {
	switch c.Isolation {
	case IsolationProcess:
	case IsolationGVisor, IsolationVM:
		return nil, fmt.Errorf("%w: isolation %q has no backend in this version of airlock; use --isolation process (run `airlock doctor` to see what this machine supports)", ErrUnavailable, c.Isolation)
	}
	agent, err := agentbin.Find(c.AgentPath)
	if err != nil {
		return nil, err
	}
	lim := cgroup.Limits{MemoryBytes: max(c.Resources.MemoryMB, 0) << 20, Pids: c.PidsLimit, CPUs: c.Resources.CPUs}
	o := process.Options{ID: id, AgentPath: agent, Limits: lim, Log: c.Logger}
	if st.OnDisk {
		home, err := Home()
		if err != nil {
			return nil, fmt.Errorf("a disk larger than memory allows lives under the state directory: %w", err)
		}
		o.DiskDir = filepath.Join(home, "disks")
	}
	b, err := process.Start(ctx, o, boot)
	if err != nil {
		return nil, fmt.Errorf("start process sandbox: %w", err)
	}
	return b, nil
}

// Sweep removes what sandboxes whose supervisor died (for example by
// SIGKILL) left on the host: their empty cgroups. Everything else such a
// sandbox had lived in its own namespaces and died with it. The airlock CLI
// calls it once per invocation; a long-running embedder may call it
// periodically. It returns the ids of the sandboxes cleaned.
func Sweep() []string { return process.Sweep(nil) }

// Reclaim removes what sandbox id left on the host after its supervisor
// died: any process still in its cgroups, and the cgroups. Call it only for
// a sandbox whose supervisor is known to be gone (airlock prune does).
func Reclaim(id string) error { return process.Reclaim(id) }
