// Package idalloc hands out ranges of host ids (uids, and the gids that go
// with them) to sandboxes, so that no two running sandboxes share one: a
// shared uid would give them one set of per-uid kernel accounting
// (RLIMIT_NPROC, inotify, keyrings, ...), and the files of one to the
// other. A sandbox under root holds a block of 65536 (its ids 0 to
// 65535); the registry's range holds as many blocks as it has room for.
//
// The registry is a directory with one file per lease, whose name says
// everything about it: the range and the process that holds it, by pid and
// start time (see state.Supervisor):
//
//	<dir>/lock                                 flock taken to allocate
//	<dir>/<first>+<count>@<pid>.<start time>   a lease; holds the sandbox id
//
// A lease is held for as long as the sandbox lives and removed when it
// closes. One whose holder is dead (a supervisor killed by SIGKILL, a
// crash, a reboot) is reclaimed by the next allocation: the holder's death
// took the sandbox with it. Allocation takes the lock, so concurrent
// allocations, from any process, never hand out overlapping ranges;
// releasing only removes the lease's own file, so it needs neither the
// lock nor free space.
//
// A new lease starts at a random free block, so an id says nothing about
// how many sandboxes came before it.
package idalloc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/flock"
	"github.com/airlock-sandbox/airlock/internal/state"
)

const (
	lockFile = "lock"
	dirPerm  = 0o700
	filePerm = 0o600
	// maxLeases bounds the directory read by an allocation.
	maxLeases = 1 << 20
	// idLimit is one past the last id: (uid_t)-1, 2^32-1, means "no
	// id" to the kernel (chown's "leave it") and is never handed out.
	idLimit = 1<<32 - 1
)

// Registry allocates blocks of ids from [first, first+size). A block of
// count ids starts at a multiple of count from first.
type Registry struct {
	dir         string
	first, size uint32
}

// Open opens the registry in dir, creating it (mode 0700) when missing.
// dir must be a directory of the effective user, not a symbolic link.
func Open(dir string, first, size uint32) (*Registry, error) {
	if size == 0 || uint64(first)+uint64(size) > idLimit {
		return nil, fmt.Errorf("open id registry %s: range [%d, %d+%d) is not within the ids 0 to 2^32-2", dir, first, first, size)
	}
	if err := os.MkdirAll(dir, dirPerm); err != nil {
		return nil, fmt.Errorf("open id registry: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return nil, fmt.Errorf("open id registry: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("open id registry: %s is not a directory", dir)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return nil, fmt.Errorf("open id registry: %s belongs to uid %d, not to you (uid %d): remove it", dir, st.Uid, os.Geteuid())
	}
	if fi.Mode().Perm() != dirPerm {
		if err := os.Chmod(dir, dirPerm); err != nil {
			return nil, fmt.Errorf("open id registry: %w", err)
		}
	}
	return &Registry{dir: dir, first: first, size: size}, nil
}

// Owner is who holds a lease: the process whose life bounds the
// sandbox's, and the sandbox, for people who look at the registry.
type Owner struct {
	Sandbox    string
	Supervisor state.Supervisor
}

// Self is an Owner for sandbox id held by the calling process.
func Self(id string) (Owner, error) {
	start, err := state.ProcessStartTime(os.Getpid())
	if err != nil {
		return Owner{}, err
	}
	return Owner{Sandbox: id, Supervisor: state.Supervisor{PID: os.Getpid(), StartTime: start}}, nil
}

// Lease is a range of ids held by one owner.
type Lease struct {
	First, Count uint32
	dir, name    string
	released     bool
}

// lease is a lease as read from the directory.
type lease struct {
	first, count uint32
	holder       state.Supervisor
	name         string
}

func (l lease) end() uint64 { return uint64(l.first) + uint64(l.count) }

// leaseName is the file name of a lease.
func leaseName(first, count uint32, s state.Supervisor) string {
	return fmt.Sprintf("%d+%d@%d.%d", first, count, s.PID, s.StartTime)
}

// parseLease reads a lease's file name; ok is false for names that are not
// leases.
func parseLease(name string) (lease, bool) {
	rng, holder, ok := strings.Cut(name, "@")
	if !ok {
		return lease{}, false
	}
	firstS, countS, ok1 := strings.Cut(rng, "+")
	pidS, startS, ok2 := strings.Cut(holder, ".")
	if !ok1 || !ok2 {
		return lease{}, false
	}
	first, err1 := strconv.ParseUint(firstS, 10, 32)
	count, err2 := strconv.ParseUint(countS, 10, 32)
	pid, err3 := strconv.ParseInt(pidS, 10, 32)
	start, err4 := strconv.ParseUint(startS, 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || count == 0 || pid <= 0 || first+count > idLimit {
		return lease{}, false
	}
	l := lease{first: uint32(first), count: uint32(count), holder: state.Supervisor{PID: int(pid), StartTime: start}, name: name}
	if leaseName(l.first, l.count, l.holder) != name {
		return lease{}, false // not canonical: "01+1@...", "+1", ...
	}
	return l, true
}

// Allocate reserves count consecutive ids for owner, which must be alive,
// and returns the lease. It fails when no free block of that size is left,
// or when ctx ends while it waits for the lock.
func (r *Registry) Allocate(ctx context.Context, owner Owner, count uint32) (*Lease, error) {
	if count == 0 || count > r.size {
		return nil, fmt.Errorf("allocate ids: a block of %d ids does not fit in the %d of the registry", count, r.size)
	}
	if !owner.Supervisor.Alive() {
		return nil, fmt.Errorf("allocate ids: the holder, process %d, is not alive", owner.Supervisor.PID)
	}
	root, err := os.OpenRoot(r.dir)
	if err != nil {
		return nil, fmt.Errorf("allocate ids: %w", err)
	}
	defer root.Close()
	unlock, err := lock(ctx, root)
	if err != nil {
		return nil, fmt.Errorf("allocate ids: %w", err)
	}
	defer unlock()
	live, err := r.liveLeases(root)
	if err != nil {
		return nil, fmt.Errorf("allocate ids: %w", err)
	}
	first, ok := r.freeBlock(live, count)
	if !ok {
		return nil, fmt.Errorf("allocate ids: all %d blocks of %d ids in [%d, %d) are held by running sandboxes (%d leases in %s): close some",
			r.size/count, count, r.first, uint64(r.first)+uint64(r.size), len(live), r.dir)
	}
	name := leaseName(first, count, owner.Supervisor)
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, filePerm)
	if err != nil {
		return nil, fmt.Errorf("allocate ids: record the lease: %w", err)
	}
	// The content is for people; the name is the lease.
	_, _ = f.WriteString(owner.Sandbox + "\n")
	if err := f.Close(); err != nil {
		root.Remove(name)
		return nil, fmt.Errorf("allocate ids: record the lease: %w", err)
	}
	return &Lease{First: first, Count: count, dir: r.dir, name: name}, nil
}

// Release gives the lease's ids back. Call it once nothing runs with them
// any more. It is safe to call more than once; it is not safe for
// concurrent use.
func (l *Lease) Release() error {
	if l == nil || l.released {
		return nil
	}
	root, err := os.OpenRoot(l.dir)
	if err == nil {
		err = root.Remove(l.name)
		root.Close()
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("release ids %d+%d: %w", l.First, l.Count, err)
	}
	l.released = true
	return nil
}

// liveLeases reads the leases in root, removing those whose holder is
// dead, and returns the others sorted by first id. The caller holds the
// lock.
func (r *Registry) liveLeases(root *os.Root) ([]lease, error) {
	d, err := root.Open(".")
	if err != nil {
		return nil, err
	}
	defer d.Close()
	var live []lease
	// Many leases may share a holder (one airlock rpc serves many
	// sandboxes): ask about each once.
	alive := map[state.Supervisor]bool{}
	for {
		ents, err := d.ReadDir(4096)
		for _, e := range ents {
			l, ok := parseLease(e.Name())
			if !ok || !e.Type().IsRegular() {
				continue
			}
			a, known := alive[l.holder]
			if !known {
				a = l.holder.Alive()
				alive[l.holder] = a
			}
			if !a {
				if err := root.Remove(l.name); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return nil, fmt.Errorf("reclaim the lease %s of a dead holder: %w", l.name, err)
				}
				continue
			}
			if len(live) == maxLeases {
				return nil, fmt.Errorf("more than %d leases in %s", maxLeases, r.dir)
			}
			live = append(live, l)
		}
		if errors.Is(err, fs.ErrNotExist) || len(ents) == 0 {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	slices.SortFunc(live, func(a, b lease) int { return cmp.Compare(a.first, b.first) })
	return live, nil
}

// freeBlock picks a block of count ids that overlaps no lease in live
// (sorted by first id), starting at a random block and going up, around.
func (r *Registry) freeBlock(live []lease, count uint32) (uint32, bool) {
	var longest uint64
	for _, l := range live {
		longest = max(longest, uint64(l.count))
	}
	blocks := r.size / count
	start := rand.Uint32N(blocks)
	for i := range blocks {
		b := (start + i) % blocks
		first := uint64(r.first) + uint64(b)*uint64(count)
		if !overlaps(live, longest, first, first+uint64(count)) {
			return uint32(first), true
		}
	}
	return 0, false
}

// overlaps reports whether a lease in live (sorted by first id, none
// longer than longest) has an id in [first, end).
func overlaps(live []lease, longest, first, end uint64) bool {
	// The leases that start in the block, then those before it that may
	// reach into it.
	j, _ := slices.BinarySearchFunc(live, first, func(l lease, v uint64) int { return cmp.Compare(uint64(l.first), v) })
	if j < len(live) && uint64(live[j].first) < end {
		return true
	}
	for k := j - 1; k >= 0 && uint64(live[k].first)+longest > first; k-- {
		if live[k].end() > first {
			return true
		}
	}
	return false
}

// lock takes the registry's lock, waiting for it until ctx ends.
func lock(ctx context.Context, root *os.Root) (unlock func(), err error) {
	f, err := root.OpenFile(lockFile, os.O_RDWR|os.O_CREATE, filePerm)
	if err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}
	// flock cannot be interrupted; a wait that outlives ctx goes on in
	// the background and lets go of the lock as soon as it has it.
	got := make(chan error, 1)
	go func() {
		var err error
		for {
			err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
			if err != unix.EINTR {
				break
			}
		}
		got <- err
	}()
	select {
	case err = <-got:
	case <-ctx.Done():
		go func() {
			<-got
			flock.Release(f)
		}()
		return nil, fmt.Errorf("lock %s: %w", filepath.Join(root.Name(), lockFile), context.Cause(ctx))
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock: %w", err)
	}
	return func() { flock.Release(f) }, nil
}
