package agent

import (
	"errors"
	"unsafe"

	"golang.org/x/sys/unix"
)

// At the process and vm levels a System V shared memory segment dies
// when it is no longer attached (kernel/shm_rmid_forced, which the agent
// sets): memory a command left in one would otherwise be held after
// every process is gone, counted against the memory limit with nothing
// the OOM killer can kill to free it. gVisor's Sentry has no such
// setting, and its IPC sysctls are read-only. So inside the Sentry the
// agent removes what shm_rmid_forced would have: segments that were
// attached (a time of last attach) and are attached no more. A segment
// never attached holds no memory (pages come with the first touch), and
// lives on as on Linux until removed.

// shmInfo is the SHM_INFO command of shmctl.
const shmInfo = 14

// maxShmScan bounds the new segment ids one pass looks at; the next
// pass goes on from there.
const maxShmScan = 1 << 16

// shmReaper finds the Sentry's segments and removes the detached ones.
// Ids are handed out in increasing order, so each pass looks only at
// the ids made since the last, and at the segments it knows.
type shmReaper struct {
	known map[int]struct{}
	next  int // the first id not looked at yet
}

func newShmReaper() *shmReaper { return &shmReaper{known: make(map[int]struct{})} }

// reap removes the detached segments and returns how many it removed.
func (r *shmReaper) reap() int {
	var desc unix.SysvShmDesc
	if _, err := unix.SysvShmCtl(0, shmInfo, &desc); err != nil {
		return 0
	}
	// struct shm_info begins with used_ids: here, the last id handed
	// out.
	last := int(*(*int32)(unsafe.Pointer(&desc)))
	if last < r.next-1 {
		// The ids wrapped around: look at all of them again.
		r.next = 0
	}
	for id := r.next; id <= last && id < r.next+maxShmScan; id++ {
		if _, err := unix.SysvShmCtl(id, unix.IPC_STAT, &desc); err == nil {
			r.known[id] = struct{}{}
		}
	}
	r.next = min(last+1, r.next+maxShmScan)
	removed := 0
	for id := range r.known {
		_, err := unix.SysvShmCtl(id, unix.IPC_STAT, &desc)
		switch {
		case errors.Is(err, unix.EINVAL), errors.Is(err, unix.EIDRM):
			delete(r.known, id)
		case err != nil:
		case desc.Nattch == 0 && desc.Atime != 0:
			if _, err := unix.SysvShmCtl(id, unix.IPC_RMID, nil); err == nil {
				removed++
				delete(r.known, id)
			}
		}
	}
	return removed
}
