//go:build linux

package cgroup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/containerd/cgroups/v3/cgroup1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// v1Group is a sandbox's groups in the v1 hierarchies: the agent lives in
// airlock/<id> itself, user processes in airlock/<id>/user.
type v1Group struct {
	id     string
	rel    string    // airlock/<id>
	mounts []v1Mount // one per controller, memory first
	parent cgroup1.Cgroup
	user   cgroup1.Cgroup
}

func newV1(ctx context.Context, mounts []v1Mount, id string, l Limits) (backend, error) {
	g := &v1Group{id: id, rel: filepath.Join(airlockDir, id), mounts: mounts}
	subsystems := make([]cgroup1.Subsystem, 0, len(mounts))
	for _, m := range mounts {
		subsystems = append(subsystems, m.subsystem())
	}
	hierarchy := func() ([]cgroup1.Subsystem, error) { return subsystems, nil }

	fail := func(err error) (backend, error) {
		_ = g.remove() // best effort: nothing runs in the new groups yet
		return nil, err
	}
	parent, err := cgroup1.New(g.path, &specs.LinuxResources{}, cgroup1.WithHierarchy(hierarchy))
	if err != nil {
		return fail(fmt.Errorf("create cgroup v1 group %s: %w", g.rel, err))
	}
	g.parent = parent
	if err := cancelled(ctx, g.rel); err != nil {
		return fail(err)
	}
	user, err := parent.New("user", g.resources(l))
	if err != nil {
		return fail(fmt.Errorf("create cgroup v1 group %s/user: %w", g.rel, err))
	}
	g.user = user
	return g, nil
}

// path is the cgroup1.Path of the parent group.
func (g *v1Group) path(name cgroup1.Name) (string, error) {
	for _, m := range g.mounts {
		if m.controller == string(name) {
			return m.libPath(g.rel), nil
		}
	}
	return "", cgroup1.ErrControllerNotActive
}

// resources translates l for the v1 controllers.
func (g *v1Group) resources(l Limits) *specs.LinuxResources {
	r := &specs.LinuxResources{}
	if l.MemoryBytes > 0 {
		mem := l.MemoryBytes
		r.Memory = &specs.LinuxMemory{Limit: &mem}
		if g.hasMemsw() {
			r.Memory.Swap = &mem // memory+swap == memory: nothing can be swapped out
		} else {
			// Without swap accounting memsw cannot be limited; keep the
			// group's memory from being swapped instead.
			zero := uint64(0)
			r.Memory.Swappiness = &zero
		}
	}
	if l.Pids > 0 {
		pids := l.Pids
		r.Pids = &specs.LinuxPids{Limit: &pids}
	}
	if q := l.cpuQuotaUsec(); q > 0 {
		period := uint64(cpuPeriodUsec)
		r.CPU = &specs.LinuxCPU{Quota: &q, Period: &period}
	}
	return r
}

// hasMemsw reports whether the kernel accounts swap (memory.memsw.*).
func (g *v1Group) hasMemsw() bool {
	for _, m := range g.mounts {
		if m.controller == "memory" {
			return exists(filepath.Join(m.dir, "memory.memsw.limit_in_bytes"))
		}
	}
	return false
}

// hierarchies returns the distinct mount points in use.
func (g *v1Group) hierarchies() []string {
	var out []string
	for _, m := range g.mounts {
		if !slices.Contains(out, m.dir) {
			out = append(out, m.dir)
		}
	}
	return out
}

func (g *v1Group) dirs() (agent, user []string) {
	for _, h := range g.hierarchies() {
		agent = append(agent, filepath.Join(h, g.rel))
		user = append(user, filepath.Join(h, g.rel, "user"))
	}
	return agent, user
}

func (g *v1Group) addAgent(pid int) error {
	if err := g.parent.AddProc(uint64(pid)); err != nil {
		return fmt.Errorf("add pid %d to cgroup v1 group %s: %w", pid, g.rel, err)
	}
	return nil
}

// userProcsFiles opens cgroup.procs (not "tasks", which moves single
// threads) of the user group in every hierarchy. The library only writes
// pids itself; handing out the open files needs plain file I/O.
func (g *v1Group) userProcsFiles() ([]*os.File, error) {
	_, user := g.dirs()
	return openProcs(user)
}

func (g *v1Group) stats() (Stats, error) {
	_, user := g.dirs()
	if err := checkAlive(user[0]); err != nil {
		return Stats{}, err
	}
	// Missing files (e.g. cpuacct not mounted) leave their fields zero.
	m, err := g.user.Stat(cgroup1.IgnoreNotExist)
	if err != nil {
		return Stats{}, fmt.Errorf("read cgroup v1 stats of %s/user: %w", g.rel, err)
	}
	var s Stats
	if m.MemoryOomControl != nil {
		s.OOMKills = m.MemoryOomControl.OomKill
	}
	if m.Memory != nil && m.Memory.Usage != nil {
		s.MemoryPeakBytes = m.Memory.Usage.Max
		s.MemoryCurrentBytes = m.Memory.Usage.Usage
	}
	if m.Pids != nil {
		s.PidsCurrent = m.Pids.Current
	}
	if m.CPU != nil && m.CPU.Usage != nil {
		s.CPUUsageNanos = m.CPU.Usage.Total
	}
	s.PidsLimitHits = pidsLimitHits(user)
	return s, nil
}

// kill kills the processes of both groups in every hierarchy. v1 has no
// cgroup.kill, so it lists and kills until nothing is left.
func (g *v1Group) kill() error {
	agent, _ := g.dirs()
	list := func() ([]int, error) {
		var all []int
		for _, d := range agent {
			pids, err := procsUnder(d)
			if err != nil {
				return nil, err
			}
			for _, p := range pids {
				if !slices.Contains(all, p) {
					all = append(all, p)
				}
			}
		}
		return all, nil
	}
	// A frozen v1 process dies of SIGKILL only once thawed: the kill is
	// sent first, so that none runs a user instruction after the thaw.
	// A group that is not frozen (nearly all) is killed as it is.
	if state, frozen, err := g.freezer(); err == nil && g.frozen(state, frozen) {
		if pids, err := list(); err == nil {
			for _, pid := range pids {
				if pid != os.Getpid() {
					_ = unix.Kill(pid, unix.SIGKILL)
				}
			}
		}
		if err := os.WriteFile(state.path, state.thaw, 0); err != nil {
			return fmt.Errorf("thaw cgroup %s to kill it: %w", g.rel, err)
		}
	}
	return killAll(g.rel, list)
}

// frozen reports whether the group is frozen or being frozen.
func (g *v1Group) frozen(state freezeFile, frozen frozenFile) bool {
	b, err := os.ReadFile(frozen.path)
	return err == nil && !bytes.Equal(bytes.TrimSpace(b), state.thaw)
}

func (g *v1Group) remove() error {
	agent, _ := g.dirs()
	var errs []error
	for _, d := range agent {
		errs = append(errs, rmdirAll(d, removeTimeout))
	}
	return errors.Join(errs...)
}

// subsystem returns the library controller for m.
func (m v1Mount) subsystem() cgroup1.Subsystem {
	root := filepath.Dir(m.dir)
	switch m.controller {
	case "memory":
		// Kernel memory (inodes, dentries, pipe buffers, IPC
		// messages) is charged to memory.limit_in_bytes with user
		// memory: the kernel does so for every v1 group unless booted
		// with cgroup.memory=nokmem. Its own limit, deprecated, adds
		// nothing to that; skip its files, which newer kernels drop.
		if exists(filepath.Join(m.dir, "memory.memsw.usage_in_bytes")) {
			return cgroup1.NewMemory(root, cgroup1.IgnoreModules("kmem", "kmem.tcp"))
		}
		return cgroup1.NewMemory(root, cgroup1.IgnoreModules("kmem", "kmem.tcp", "memsw"))
	case "pids":
		return cgroup1.NewPids(root)
	case "cpu":
		return cgroup1.NewCpu(root)
	case "cpuacct":
		return cgroup1.NewCpuacct(root)
	case "freezer":
		return cgroup1.NewFreezer(root)
	}
	panic("cgroup: no v1 subsystem for " + m.controller)
}

// libPath returns the group rel (relative to the mount) in the form the
// library's controllers take: they address controller c at
// <parent of mount>/<c>/<path>. When the mount point is named otherwise,
// e.g. a co-mounted "cpu,cpuacct" without a "cpu" symlink, the path steps
// over to the real directory; the library's filepath.Join resolves the "..".
func (m v1Mount) libPath(rel string) string {
	if name := filepath.Base(m.dir); name != m.controller {
		return "../" + name + "/" + rel
	}
	return "/" + rel
}
