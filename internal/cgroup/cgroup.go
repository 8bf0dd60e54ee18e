// Package cgroup places a sandbox's processes into Linux control groups.
//
// Every sandbox gets two groups:
//
//	<base>/airlock/<id>        the trusted agent; no memory, pids or cpu limits
//	<base>/airlock/<id>/user   every user process; carries the Limits
//
// so the agent keeps serving when user code exhausts its resources.
//
// cgroup v2 is used when memory, pids and cpu can be enabled for children of
// <base>; otherwise the v1 memory, pids, cpu (and cpuacct, for CPU usage)
// hierarchies are used when they are writable. <base> is the root of the
// hierarchy for root, or on v2 the caller's own cgroup when it has been
// delegated to the caller. Detect reports what is usable and, when nothing
// is, why and how to fix it.
//
// cgroup v2 does not allow a group that has controllers enabled for its
// children to hold processes itself ("no internal processes"). There the
// agent therefore lives in the unlimited leaf <base>/airlock/<id>/agent.
package cgroup

import (
	"errors"
	"fmt"
	"math"
	"os"
	"regexp"
	"sync"
)

// Limits are the resource limits applied to a sandbox's user group.
type Limits struct {
	MemoryBytes int64   // 0 = unlimited; memory+swap set equal (no swap escape)
	Pids        int64   // 0 = unlimited
	CPUs        float64 // 0 = unlimited; quota = CPUs*period, period 100ms
}

// cpuPeriodUsec is the CFS period used for CPU limits (100ms).
const cpuPeriodUsec = 100_000

// minCPUQuotaUsec is the smallest quota the kernel accepts (1ms).
const minCPUQuotaUsec = 1_000

// cpuQuotaUsec returns the CFS quota for l.CPUs, or 0 for unlimited.
func (l Limits) cpuQuotaUsec() int64 {
	if l.CPUs <= 0 {
		return 0
	}
	return max(int64(math.Round(l.CPUs*cpuPeriodUsec)), minCPUQuotaUsec)
}

func (l Limits) validate() error {
	switch {
	case l.MemoryBytes < 0:
		return fmt.Errorf("invalid memory limit %d: must be >= 0", l.MemoryBytes)
	case l.Pids < 0:
		return fmt.Errorf("invalid pids limit %d: must be >= 0", l.Pids)
	case l.CPUs < 0 || math.IsNaN(l.CPUs) || math.IsInf(l.CPUs, 0):
		return fmt.Errorf("invalid cpu limit %v: must be a finite number >= 0", l.CPUs)
	}
	return nil
}

// Version is a cgroup hierarchy version.
type Version int

const (
	V1 Version = 1 // legacy per-controller hierarchies
	V2 Version = 2 // unified hierarchy
)

func (v Version) String() string {
	switch v {
	case V1:
		return "cgroup v1"
	case V2:
		return "cgroup v2"
	}
	return "no cgroups"
}

// Info describes what this machine offers to the calling user; used by
// `airlock doctor` and for degradation reports.
type Info struct {
	Version     Version  // which hierarchy airlock would use
	Controllers []string // controllers among memory, pids, cpu available in that hierarchy, and freezer (which pausing a sandbox needs)
	Writable    bool     // the calling user can create groups there
	Base        string   // v2: the base directory; v1: the mount roots in use, space separated
	Reason      string   // when !Writable or controllers are missing: the exact reason and fix
}

// Stats are counters of a sandbox's user group.
type Stats struct {
	OOMKills           uint64 // processes killed by the OOM killer in the user group
	MemoryPeakBytes    uint64 // 0 when the kernel does not report a peak (v2 before 5.19)
	MemoryCurrentBytes uint64
	PidsCurrent        uint64
	CPUUsageNanos      uint64 // 0 on v1 without a cpuacct hierarchy
	// PidsLimitHits counts forks refused because the pids limit was
	// reached (pids.events "max"), in the user group.
	PidsLimitHits uint64
}

var (
	// ErrUnavailable is wrapped by errors of New and Sweep when the calling
	// user cannot use cgroups here; the message carries Info.Reason.
	ErrUnavailable = errors.New("cgroups unavailable")
	// ErrInvalidID is wrapped when a sandbox id is not 1..64 of [a-zA-Z0-9_-].
	ErrInvalidID = errors.New("invalid sandbox id")
)

var idPattern = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// validateID ensures id is a single, harmless path element.
func validateID(id string) error {
	if !idPattern.MatchString(id) {
		return fmt.Errorf("%w %q: want 1 to 64 characters of [a-zA-Z0-9_-]", ErrInvalidID, id)
	}
	return nil
}

// Group is the pair of cgroups of one sandbox. Create it with New and
// release it with Delete.
type Group struct {
	id      string
	version Version
	impl    backend

	// The two files Events reads, opened once and re-read with pread:
	// Events runs twice around every command.
	eventsMu sync.Mutex
	eventsOK bool
	oomFile  *os.File
	pidsFile *os.File
}

// backend is the version specific part of a Group.
type backend interface {
	addAgent(pid int) error
	userProcsFiles() ([]*os.File, error)
	stats() (Stats, error)
	kill() error
	// freezer names the files that freeze the groups and tell whether
	// they are frozen.
	freezer() (freezeFile, frozenFile, error)
	// remove deletes the groups, children first; it succeeds if they are gone.
	remove() error
	// dirs returns the directories of the agent's and of the user group,
	// one per hierarchy.
	dirs() (agent, user []string)
}

// ID returns the sandbox id the group was created for.
func (g *Group) ID() string { return g.id }

// Version returns the hierarchy the group lives in.
func (g *Group) Version() Version { return g.version }

// AddAgent places a host pid into the agent's unlimited group (the parent
// group on v1, its "agent" leaf on v2).
func (g *Group) AddAgent(pid int) error {
	if pid <= 0 {
		return fmt.Errorf("add agent to cgroup %s: invalid pid %d", g.id, pid)
	}
	return g.impl.addAgent(pid)
}

// UserProcsFiles opens, for each hierarchy in use, the user group's
// cgroup.procs write-only and returns the files. A process that writes "0"
// into each of them moves itself into the user group; this works across pid
// namespaces, but must happen before the process unshares its cgroup
// namespace. The caller closes the files.
func (g *Group) UserProcsFiles() ([]*os.File, error) { return g.impl.userProcsFiles() }

// Stats reads the counters of the user group.
func (g *Group) Stats() (Stats, error) { return g.impl.stats() }

// Events is the cheap subset of Stats that is read around every command:
// OOM kills and refused forks of the user group.
type Events struct {
	OOMKills      uint64
	PidsLimitHits uint64
}

// Kill sends SIGKILL to every process in both groups and waits, bounded,
// until they are gone. The calling process is never killed; Kill fails if it
// is inside the group.
func (g *Group) Kill() error { return g.impl.kill() }

// Delete kills every process and removes the user and the parent group from
// every hierarchy. It is idempotent.
func (g *Group) Delete() error {
	g.closeEvents()
	if err := g.impl.kill(); err != nil {
		return err
	}
	return g.impl.remove()
}

// closeEvents releases the files Events keeps open.
func (g *Group) closeEvents() {
	g.eventsMu.Lock()
	defer g.eventsMu.Unlock()
	for _, f := range []*os.File{g.oomFile, g.pidsFile} {
		if f != nil {
			f.Close()
		}
	}
	g.oomFile, g.pidsFile = nil, nil
}
