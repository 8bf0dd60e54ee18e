//go:build linux

package cgroup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containerd/cgroups/v3/cgroup2"
	"golang.org/x/sys/unix"
)

// supervisorLeaf receives the processes of a delegated <base> so that
// controllers can be enabled for its children (see enableControllers).
const supervisorLeaf = "airlock-supervisor"

// v2Group is a sandbox's groups in the unified hierarchy. The parent
// airlock/<id> enables the controllers for its children and so may not hold
// processes; the agent lives in the unlimited leaf airlock/<id>/agent.
type v2Group struct {
	dir    string // <base>/airlock/<id>
	parent *cgroup2.Manager
	agent  *cgroup2.Manager
	user   *cgroup2.Manager
}

func newV2(ctx context.Context, mountpoint, base, id string, l Limits) (backend, error) {
	if err := enableControllers(base); err != nil {
		return nil, err
	}
	rel, err := filepath.Rel(mountpoint, base)
	if err != nil {
		return nil, fmt.Errorf("create cgroup v2 group in %s: %w", base, err)
	}
	g := &v2Group{dir: filepath.Join(base, airlockDir, id)}
	fail := func(err error) (backend, error) {
		_ = g.remove() // best effort: nothing runs in the new groups yet
		return nil, err
	}

	// Every level gets the controllers enabled, so none are given to
	// NewChild as nil: nil would leave them off for the child.
	all := &cgroup2.Resources{Memory: &cgroup2.Memory{}, Pids: &cgroup2.Pids{}, CPU: &cgroup2.CPU{}}
	g.parent, err = cgroup2.NewManager(mountpoint, filepath.Join("/", rel, airlockDir, id), all)
	if err != nil {
		return fail(fmt.Errorf("create cgroup v2 group %s: %w", g.dir, err))
	}
	if err := cancelled(ctx, g.dir); err != nil {
		return fail(err)
	}
	if g.agent, err = g.parent.NewChild("agent", nil); err != nil {
		return fail(fmt.Errorf("create cgroup v2 group %s/agent: %w", g.dir, err))
	}
	if g.user, err = g.parent.NewChild("user", v2Resources(l)); err != nil {
		return fail(fmt.Errorf("create cgroup v2 group %s/user: %w", g.dir, err))
	}
	// memory.swap.max only exists with swap accounting; without it there
	// is no swap to escape to.
	if l.MemoryBytes > 0 && exists(filepath.Join(g.dir, "user", "memory.swap.max")) {
		zero := int64(0)
		if err := g.user.Update(&cgroup2.Resources{Memory: &cgroup2.Memory{Swap: &zero}}); err != nil {
			return fail(fmt.Errorf("limit swap of cgroup v2 group %s/user: %w", g.dir, err))
		}
	}
	return g, nil
}

// v2Resources translates l for the v2 controllers.
func v2Resources(l Limits) *cgroup2.Resources {
	r := &cgroup2.Resources{Memory: &cgroup2.Memory{}, Pids: &cgroup2.Pids{}, CPU: &cgroup2.CPU{}}
	if l.MemoryBytes > 0 {
		mem := l.MemoryBytes
		r.Memory.Max = &mem
	}
	r.Pids.Max = l.Pids // 0 writes nothing: "max"
	if q := l.cpuQuotaUsec(); q > 0 {
		period := uint64(cpuPeriodUsec)
		r.CPU.Max = cgroup2.NewCPUMax(&q, &period)
	}
	return r
}

// enableControllers enables memory, pids and cpu for the children of base.
// cgroup v2 refuses that (EBUSY) while base holds processes, the normal
// state of a delegated systemd scope airlock was started in; those
// processes are first moved to the leaf <base>/airlock-supervisor. The
// library's ToggleControllers cannot do this, and it writes every ancestor
// up to the mount, which fails above a delegated base.
func enableControllers(base string) error {
	ctl := filepath.Join(base, "cgroup.subtree_control")
	b, err := os.ReadFile(ctl)
	if err != nil {
		return fmt.Errorf("enable cgroup v2 controllers: %w", err)
	}
	have := strings.Fields(string(b))
	if !slices.ContainsFunc(needed, func(c string) bool { return !slices.Contains(have, c) }) {
		return nil
	}
	enable := "+" + strings.Join(needed, " +")
	err = os.WriteFile(ctl, []byte(enable), 0)
	if !errors.Is(err, unix.EBUSY) {
		if err != nil {
			return fmt.Errorf("enable cgroup v2 controllers: %w", err)
		}
		return nil
	}
	leaf := filepath.Join(base, supervisorLeaf)
	if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("create cgroup v2 group %s: %w", leaf, err)
	}
	// Processes may fork while being moved; a few rounds settle it.
	for range 10 {
		pids, err := readProcs(filepath.Join(base, "cgroup.procs"))
		if err != nil {
			return fmt.Errorf("enable cgroup v2 controllers: %w", err)
		}
		if len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte(fmt.Sprint(pid)), 0)
			if err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("move pid %d to cgroup %s: %w", pid, leaf, err)
			}
		}
	}
	if err := os.WriteFile(ctl, []byte(enable), 0); err != nil {
		return fmt.Errorf("enable cgroup v2 controllers in %s after moving its processes to %s: %w", base, leaf, err)
	}
	return nil
}

func (g *v2Group) dirs() (agent, user []string) {
	return []string{filepath.Join(g.dir, "agent")}, []string{filepath.Join(g.dir, "user")}
}

func (g *v2Group) addAgent(pid int) error {
	if err := g.agent.AddProc(uint64(pid)); err != nil {
		return fmt.Errorf("add pid %d to cgroup %s/agent: %w", pid, g.dir, err)
	}
	return nil
}

// userProcsFiles opens the user group's cgroup.procs; the library only
// writes pids itself, handing out the open file needs plain file I/O.
func (g *v2Group) userProcsFiles() ([]*os.File, error) {
	_, user := g.dirs()
	return openProcs(user)
}

func (g *v2Group) stats() (Stats, error) {
	_, user := g.dirs()
	if err := checkAlive(user[0]); err != nil {
		return Stats{}, err
	}
	m, err := g.user.StatFiltered(cgroup2.StatPids | cgroup2.StatCPU | cgroup2.StatMemory | cgroup2.StatMemoryEvents)
	if err != nil {
		return Stats{}, fmt.Errorf("read cgroup v2 stats of %s: %w", user[0], err)
	}
	var s Stats
	if m.MemoryEvents != nil {
		s.OOMKills = m.MemoryEvents.OomKill
	}
	if m.Memory != nil {
		s.MemoryPeakBytes = m.Memory.MaxUsage // memory.peak, 0 if absent
		s.MemoryCurrentBytes = m.Memory.Usage
	}
	if m.Pids != nil {
		s.PidsCurrent = m.Pids.Current
	}
	if m.CPU != nil {
		s.CPUUsageNanos = m.CPU.UsageUsec * 1000
	}
	s.PidsLimitHits = pidsLimitHits(user)
	return s, nil
}

// kill uses cgroup.kill (Linux 5.14+) on the parent, which kills the whole
// subtree at once, then waits until the processes are gone. Older kernels
// freeze the subtree, kill each process and thaw. The library's fallback is
// not used: it reaps the killed processes, stealing exit statuses from
// their parents (e.g. exec.Cmd.Wait) when they are our children, and its
// Freeze waits for the frozen state without bound.
func (g *v2Group) kill() error {
	if !exists(g.dir) {
		return nil
	}
	list := func() ([]int, error) { return procsUnder(g.dir) }
	if exists(filepath.Join(g.dir, "cgroup.kill")) {
		if err := g.parent.Kill(); err != nil {
			return fmt.Errorf("kill cgroup %s: %w", g.dir, err)
		}
		return killAll(g.dir, list)
	}
	freeze := filepath.Join(g.dir, "cgroup.freeze")
	if exists(freeze) {
		// SIGKILL still reaches frozen processes on v2.
		if err := os.WriteFile(freeze, []byte("1"), 0); err != nil {
			return fmt.Errorf("freeze cgroup %s: %w", g.dir, err)
		}
		defer os.WriteFile(freeze, []byte("0"), 0)
	}
	return killAll(g.dir, list)
}

func (g *v2Group) remove() error {
	return rmdirAll(g.dir, removeTimeout)
}
