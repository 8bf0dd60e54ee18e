package agent

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
)

// Inside gVisor's Sentry the host's cgroup holds the whole Sentry, so a
// command over the memory limit would end the sandbox, and the host
// cannot count the sandbox's processes. The Sentry has cgroups of its
// own (v1): a pids controller that refuses a fork over pids.max, and a
// memory controller that counts each group's memory but enforces
// nothing. So the commands run in a group of each; the agent watches the
// memory group and, over the limit, kills the largest process in it, as
// Linux's OOM killer would, and counts it.

// sentryCgroupDir is where the agent mounts the Sentry's hierarchies,
// before the root is built (the paths are then out of reach; the agent
// keeps them open).
const sentryCgroupDir = "/sys/fs/cgroup"

// The memory group is read every sentryOOMPoll once it holds half its
// limit, and every sentryIdlePoll below that: a read costs the Sentry a
// millisecond or two (it counts the group's pages), too much to spend
// a hundred times a second on an idle sandbox. Memory grows here at up
// to ~1 GB/s, so a command over the limit overshoots it by ~10 MiB
// before it is killed, and one cannot cross the lower half of a limit
// between two slow reads by more than the 256 MiB beyond the limit that
// the host's cgroup gives the Sentry.
const (
	sentryOOMPoll  = 10 * time.Millisecond
	sentryIdlePoll = 100 * time.Millisecond
)

// sentryCgroups are the commands' groups inside the Sentry.
type sentryCgroups struct {
	mem, pids, cpu *os.Root
	// proc is the agent's own /proc, whose pids cgroup.procs names.
	proc  *os.Root
	limit int64
	ooms  atomic.Uint64
}

// newSentryCgroups mounts the Sentry's memory, pids and cpuacct
// hierarchies,
// makes the commands' group in each with its limits, and returns it and
// the descriptors of their cgroup.procs, which the spawner writes itself
// into.
func newSentryCgroups(spec *agentproto.SentrySpec) (*sentryCgroups, []int, error) {
	if err := unix.Mount("tmpfs", sentryCgroupDir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,mode=0700"); err != nil {
		return nil, nil, fmt.Errorf("mount the Sentry's cgroup directory: %w", err)
	}
	c := &sentryCgroups{limit: spec.MemoryBytes}
	var fds []int
	for _, ctl := range []string{"memory", "pids", "cpuacct"} {
		dir := filepath.Join(sentryCgroupDir, ctl)
		if err := os.Mkdir(dir, 0o700); err != nil {
			return nil, nil, err
		}
		if err := unix.Mount("cgroup", dir, "cgroup", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ctl); err != nil {
			return nil, nil, fmt.Errorf("mount the Sentry's %s cgroup: %w", ctl, err)
		}
		group := filepath.Join(dir, "commands")
		if err := os.Mkdir(group, 0o755); err != nil {
			return nil, nil, fmt.Errorf("make the commands' %s cgroup: %w", ctl, err)
		}
		if ctl == "pids" && spec.Pids > 0 {
			if err := os.WriteFile(filepath.Join(group, "pids.max"), []byte(strconv.FormatInt(spec.Pids, 10)), 0); err != nil {
				return nil, nil, fmt.Errorf("set the commands' pids limit: %w", err)
			}
		}
		r, err := os.OpenRoot(group)
		if err != nil {
			return nil, nil, err
		}
		switch ctl {
		case "memory":
			c.mem = r
		case "pids":
			c.pids = r
		default:
			c.cpu = r
		}
		fd, err := unix.Open(filepath.Join(group, "cgroup.procs"), unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, nil, fmt.Errorf("open the commands' %s cgroup: %w", ctl, err)
		}
		fds = append(fds, fd)
	}
	proc, err := os.OpenRoot("/proc")
	if err != nil {
		return nil, nil, err
	}
	c.proc = proc
	return c, fds, nil
}

// usage is what the commands use, and their limit events.
func (c *sentryCgroups) usage() (agentproto.Usage, error) {
	var u agentproto.Usage
	var err error
	if u.MemoryBytes, err = single(c.mem, "memory.usage_in_bytes"); err != nil {
		return u, err
	}
	if u.Pids, err = single(c.pids, "pids.current"); err != nil {
		return u, err
	}
	if u.CPUNanos, err = single(c.cpu, "cpuacct.usage"); err != nil {
		return u, err
	}
	u.OOMKills = c.ooms.Load()
	return u, nil
}

// limits are the commands' limit events: the processes the watcher
// killed for memory. (A fork the Sentry refuses for the pids limit is
// not counted: its pids controller has pids.current and pids.max, and no
// pids.events.)
func (c *sentryCgroups) limits() (agentproto.LimitEvents, error) {
	return agentproto.LimitEvents{OOMKills: c.ooms.Load()}, nil
}

// watch kills the largest process of the memory group whenever the group
// is over the limit, until ctx ends. It also removes, every
// sentryIdlePoll and before it kills, the shared memory segments that
// are attached no more (shmReaper).
func (c *sentryCgroups) watch(ctx context.Context, log *slog.Logger) {
	t := time.NewTimer(sentryOOMPoll)
	defer t.Stop()
	// killed is the process last killed, until it is gone and the group
	// has been read again: its memory is freed after its death, and a
	// read meanwhile would take another process. A zombie that its
	// parent does not reap holds nothing for long: after zombieGrace
	// the group is read anyway.
	var killed int
	var killedAt, reaped time.Time
	shm := newShmReaper()
	step := func() time.Duration {
		if time.Since(reaped) >= sentryIdlePoll {
			shm.reap()
			reaped = time.Now()
		}
		if c.limit <= 0 {
			return sentryIdlePoll
		}
		if killed > 0 {
			if st := c.state(killed); st != 0 && (st != 'Z' || time.Since(killedAt) < zombieGrace) {
				return sentryOOMPoll
			}
			killed = 0
			return sentryOOMPoll
		}
		used, err := single(c.mem, "memory.usage_in_bytes")
		switch {
		case err != nil:
			return sentryOOMPoll
		case int64(used) < c.limit/2:
			return sentryIdlePoll
		case int64(used) <= c.limit:
			return sentryOOMPoll
		case shm.reap() > 0:
			// Detached segments held memory: look again before
			// killing anything.
			reaped = time.Now()
			return sentryOOMPoll
		}
		if pid := c.largest(); pid > 0 && unix.Kill(pid, unix.SIGKILL) == nil {
			killed, killedAt = pid, time.Now()
			c.ooms.Add(1)
			log.Debug("memory limit: killed the largest command process", "pid", pid, "used", used, "limit", c.limit)
		}
		return sentryOOMPoll
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		t.Reset(step())
	}
}

// zombieGrace is how long a killed process may stay a zombie before the
// memory group is read again without waiting for its reaping.
const zombieGrace = 200 * time.Millisecond

// stat reads process pid's state and parent from /proc; ok is false
// when it is gone.
func (c *sentryCgroups) stat(pid int) (state byte, ppid int, ok bool) {
	b, err := c.proc.ReadFile(strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	// "pid (comm) state ppid ...": comm may hold spaces and parentheses.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 || len(f[0]) != 1 {
		return 0, 0, false
	}
	ppid, err = strconv.Atoi(f[1])
	return f[0][0], ppid, err == nil
}

// state is process pid's state ('R', 'S', 'Z'...), or 0 when it is gone.
func (c *sentryCgroups) state(pid int) byte {
	st, _, ok := c.stat(pid)
	if !ok {
		return 0
	}
	return st
}

// largest is the process of the memory group with the most resident
// memory that the OOM killer may take, or 0: not the spawner (the
// agent's child, which starts every command) nor one whose
// oom_score_adj is -1000.
func (c *sentryCgroups) largest() int {
	b, err := c.mem.ReadFile("cgroup.procs")
	if err != nil {
		return 0
	}
	agent := os.Getpid()
	best, bestRSS := 0, int64(-1)
	for _, f := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			continue
		}
		if st, ppid, ok := c.stat(pid); !ok || ppid == agent || st == 'Z' {
			continue
		}
		if adj, err := c.proc.ReadFile(f + "/oom_score_adj"); err == nil && strings.TrimSpace(string(adj)) == "-1000" {
			continue
		}
		statm, err := c.proc.ReadFile(f + "/statm")
		if err != nil {
			continue
		}
		fields := strings.Fields(string(statm))
		if len(fields) < 2 {
			continue
		}
		rss, err := strconv.ParseInt(fields[1], 10, 64)
		if err == nil && rss > bestRSS {
			best, bestRSS = pid, rss
		}
	}
	return best
}
