//go:build linux

package cgroup

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// killTimeout bounds how long Kill keeps killing and waiting.
	killTimeout = 5 * time.Second
	// removeTimeout bounds how long Delete retries rmdir of a group whose
	// last processes are still exiting (EBUSY).
	removeTimeout = 2 * time.Second
)

// New creates the parent and user groups of sandbox id, with l applied to
// the user group. When the calling user cannot use cgroups here the error
// wraps ErrUnavailable and carries Detect().Reason; the caller then
// degrades explicitly. New fails if groups for id already exist.
func New(ctx context.Context, id string, l Limits) (*Group, error) {
	if err := validateID(id); err != nil {
		return nil, err
	}
	if err := l.validate(); err != nil {
		return nil, fmt.Errorf("create cgroup %s: %w", id, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("create cgroup %s: %w", id, err)
	}
	lay := detect(procSelf)
	if !lay.info.Writable {
		return nil, fmt.Errorf("create cgroup %s: %w: %s", id, ErrUnavailable, lay.info.Reason)
	}
	for _, r := range lay.roots() {
		if p := filepath.Join(r, id); exists(p) {
			return nil, fmt.Errorf("create cgroup %s: %w", p, fs.ErrExist)
		}
	}
	var (
		impl backend
		err  error
	)
	if lay.info.Version == V2 {
		impl, err = newV2(ctx, lay.v2Mount, lay.v2Base, id, l)
	} else {
		impl, err = newV1(ctx, lay.v1, id, l)
	}
	if err != nil {
		return nil, err
	}
	return &Group{id: id, version: lay.info.Version, impl: impl}, nil
}

// Exists reports whether groups for id still exist anywhere airlock may
// have created them (used by tests checking for leftovers).
func Exists(id string) bool {
	if validateID(id) != nil {
		return false
	}
	return slices.ContainsFunc(detect(procSelf).known, func(root string) bool {
		return exists(filepath.Join(root, id))
	})
}

// Reclaim kills every process left in the groups of sandbox id and removes
// the groups, whatever their age. It is for a sandbox known to be dead (its
// supervisor is gone), where Sweep would wait for the groups to age. Groups
// that do not exist are not an error.
func Reclaim(id string) error {
	if err := validateID(id); err != nil {
		return err
	}
	var errs []error
	for _, root := range detect(procSelf).known {
		dir := filepath.Join(root, id)
		if !exists(dir) {
			continue
		}
		if err := killAll(id, func() ([]int, error) { return procsUnder(dir) }); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := rmdirAll(dir, 2*time.Second); err != nil {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", dir, err))
		}
	}
	return errors.Join(errs...)
}

// Sweep removes leftover airlock/<id> groups, e.g. of supervisors killed
// with SIGKILL, that hold no processes and were last modified more than
// minAge ago. Groups with processes are left alone. It returns the ids
// removed.
func Sweep(minAge time.Duration) ([]string, error) {
	lay := detect(procSelf)
	if !lay.info.Writable {
		return nil, fmt.Errorf("sweep cgroups: %w: %s", ErrUnavailable, lay.info.Reason)
	}
	roots := lay.roots()
	ids := map[string]bool{}
	for _, r := range roots {
		entries, err := os.ReadDir(r)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("sweep cgroups: %w", err)
		}
		for _, e := range entries {
			if e.IsDir() && validateID(e.Name()) == nil {
				ids[e.Name()] = true
			}
		}
	}

	var removed []string
	var errs []error
	cutoff := time.Now().Add(-minAge)
	for _, id := range slices.Sorted(maps.Keys(ids)) {
		var dirs []string
		for _, r := range roots {
			if d := filepath.Join(r, id); exists(d) {
				dirs = append(dirs, d)
			}
		}
		if !olderThan(dirs, cutoff) || populated(dirs) {
			continue
		}
		gone := true
		for _, d := range dirs {
			// A process may have joined since populated(); rmdir then
			// fails with EBUSY and the group stays.
			if err := rmdirAll(d, 0); errors.Is(err, unix.EBUSY) {
				gone = false
			} else if err != nil {
				gone = false
				errs = append(errs, fmt.Errorf("sweep cgroup: %w", err))
			}
		}
		if gone {
			removed = append(removed, id)
		}
	}
	return removed, errors.Join(errs...)
}

// olderThan reports whether every dir was last modified before cutoff.
// cgroupfs sets a directory's mtime when it or a child group is created.
func olderThan(dirs []string, cutoff time.Time) bool {
	for _, d := range dirs {
		fi, err := os.Stat(d)
		if err != nil || fi.ModTime().After(cutoff) {
			return false
		}
	}
	return true
}

// populated reports whether any group in or below dirs holds a process;
// unreadable groups count as populated.
func populated(dirs []string) bool {
	for _, d := range dirs {
		if pids, err := procsUnder(d); err != nil || len(pids) > 0 {
			return true
		}
	}
	return false
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// procsUnder returns the pids in the group dir and all groups below it.
// A group that does not exist (any more) is empty. The library's listing
// functions fail on vanished groups and need a Group object, which Sweep
// does not have, hence the plain walk.
func procsUnder(dir string) ([]int, error) {
	var pids []int
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		got, err := readProcs(filepath.Join(p, "cgroup.procs"))
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		pids = append(pids, got...)
		return err
	})
	return pids, err
}

// readProcs parses a cgroup.procs file.
func readProcs(path string) ([]int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var pids []int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		pid, err := strconv.Atoi(sc.Text())
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", path, err)
		}
		pids = append(pids, pid)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return pids, nil
}

// killAll sends SIGKILL to the processes listed by procs until it lists
// none, for at most killTimeout. Listing again after every round catches
// processes forked in between. The calling process is never killed. A pid
// could in theory be reused between listing and kill; v2's cgroup.kill,
// used where available, has no such window.
func killAll(what string, procs func() ([]int, error)) error {
	self := os.Getpid()
	deadline := time.Now().Add(killTimeout)
	for delay := time.Millisecond; ; delay = min(2*delay, 20*time.Millisecond) {
		pids, err := procs()
		if err != nil {
			return fmt.Errorf("kill cgroup %s: %w", what, err)
		}
		if len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			if pid == self {
				return fmt.Errorf("kill cgroup %s: refusing to kill the calling process %d, which is inside it", what, pid)
			}
			if err := unix.Kill(pid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("kill pid %d in cgroup %s: %w", pid, what, err)
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kill cgroup %s: %d process(es) left after %v", what, len(pids), killTimeout)
		}
		time.Sleep(delay)
	}
}

// rmdirAll removes the group dir and every group below it, children first.
// A group that is already gone is not an error. rmdir fails with EBUSY
// while processes are still exiting; that is retried for up to wait.
// The library's Delete refuses groups with processes and does not treat
// vanished groups as success, so removal is done here.
func rmdirAll(dir string, wait time.Duration) error {
	var dirs []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("remove cgroup %s: %w", dir, err)
	}
	deadline := time.Now().Add(wait)
	for _, d := range slices.Backward(dirs) {
		for {
			err := unix.Rmdir(d)
			if err == nil || errors.Is(err, unix.ENOENT) {
				break
			}
			if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
				return fmt.Errorf("remove cgroup %s: %w", d, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return nil
}

// openProcs opens the cgroup.procs files of dirs write-only.
func openProcs(dirs []string) ([]*os.File, error) {
	var files []*os.File
	for _, d := range dirs {
		f, err := os.OpenFile(filepath.Join(d, "cgroup.procs"), os.O_WRONLY, 0)
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			return nil, fmt.Errorf("open user cgroup procs: %w", err)
		}
		files = append(files, f)
	}
	return files, nil
}

// checkAlive fails when the group dir has been removed.
func checkAlive(dir string) error {
	if _, err := os.Lstat(dir); err != nil {
		return fmt.Errorf("cgroup %s: %w", dir, err)
	}
	return nil
}

// cancelled wraps ctx's error, if any, for the group being created.
func cancelled(ctx context.Context, what string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("create cgroup %s: %w", what, err)
	}
	return nil
}

// pidsLimitHits reads the "max" counter of pids.events from whichever of
// dirs has it. The library's stats do not expose pids.events.
func pidsLimitHits(dirs []string) uint64 {
	for _, d := range dirs {
		f, err := os.Open(filepath.Join(d, "pids.events"))
		if err != nil {
			continue
		}
		var buf [128]byte
		v, ok := counterLine(f, buf[:], "max ")
		f.Close()
		if ok {
			return v
		}
	}
	return 0
}

// Events reads only the OOM-kill and pids-limit counters of the user
// group: two small files, where Stats parses every statistics file.
// memory.events (v2) and memory.oom_control (v1) both carry an
// "oom_kill N" line; pids.events carries "max N" on both. The files are
// opened on first use and read again from offset 0 each time, which makes
// cgroupfs generate them afresh; Events runs around every command.
func (g *Group) Events() (Events, error) {
	g.eventsMu.Lock()
	defer g.eventsMu.Unlock()
	if !g.eventsOK {
		g.eventsOK = true
		_, user := g.impl.dirs()
		for _, d := range user {
			for _, name := range []string{"memory.events", "memory.oom_control"} {
				if g.oomFile == nil {
					g.oomFile, _ = os.Open(filepath.Join(d, name))
				}
			}
			if g.pidsFile == nil {
				g.pidsFile, _ = os.Open(filepath.Join(d, "pids.events"))
			}
		}
	}
	var ev Events
	var buf [512]byte
	ok1, ok2 := false, false
	if g.oomFile != nil {
		ev.OOMKills, ok1 = counterLine(g.oomFile, buf[:], "oom_kill ")
	}
	if g.pidsFile != nil {
		ev.PidsLimitHits, ok2 = counterLine(g.pidsFile, buf[:], "max ")
	}
	if !ok1 && !ok2 {
		return ev, fmt.Errorf("read events of cgroup %s: no counters found", g.id)
	}
	return ev, nil
}

// PidsCurrent reads how many tasks the user group holds (pids.current):
// one small file, where Stats parses every statistics file.
func (g *Group) PidsCurrent() (uint64, error) {
	_, user := g.impl.dirs()
	for _, d := range user {
		b, err := os.ReadFile(filepath.Join(d, "pids.current"))
		if err != nil {
			continue
		}
		if n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil {
			return n, nil
		}
	}
	return 0, fmt.Errorf("read pids.current of cgroup %s: no pids controller", g.id)
}

// counterLine reads f from the start and returns the number on the line
// that begins with prefix.
func counterLine(f *os.File, buf []byte, prefix string) (uint64, bool) {
	n, err := f.ReadAt(buf, 0)
	if err != nil && err != io.EOF {
		return 0, false
	}
	for line := range strings.SplitSeq(string(buf[:n]), "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}
