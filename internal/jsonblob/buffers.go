package jsonblob

import (
	"runtime/debug"
	"slices"
	"sync"
	"time"
)

// A line carrying a large blob, and the blob itself, take buffers of tens
// of megabytes. Memory a process touches for the first time costs a page
// fault per page, which on some machines (virtual machines in particular)
// takes many times longer than copying the page; and the Go runtime gives
// freed memory back to the system within seconds, so each transfer would
// fault its buffers in again. Buffers of at least keepMin bytes are
// therefore kept for reuse: up to keepBytes in all, released (and given
// back to the system) once none has been asked for during keepFor.
const (
	keepMin   = 1 << 20
	keepBytes = 256 << 20
	keepFor   = 10 * time.Second
)

var kept struct {
	mu    sync.Mutex
	bufs  [][]byte // by capacity
	total int
	used  time.Time // when a buffer was last asked for or kept
	timer *time.Timer
}

// Buffer returns an empty slice with room for at least n bytes: the
// smallest kept buffer that has it, if it is at most twice that, or a new
// one. It is the caller's until it gives it back with Recycle, if ever.
func Buffer(n int) []byte {
	if n >= keepMin {
		kept.mu.Lock()
		kept.used = time.Now()
		i, _ := slices.BinarySearchFunc(kept.bufs, n, func(b []byte, n int) int { return cap(b) - n })
		if i < len(kept.bufs) && cap(kept.bufs[i])/2 <= n {
			b := kept.bufs[i]
			kept.bufs = slices.Delete(kept.bufs, i, i+1)
			kept.total -= cap(b)
			kept.mu.Unlock()
			return b[:0]
		}
		kept.mu.Unlock()
	}
	return make([]byte, 0, n)
}

// Recycle keeps b for a later Buffer. The caller gives up b: neither it
// nor anything it handed b (or part of it) to may use its memory any
// more.
func Recycle(b []byte) {
	if cap(b) < keepMin || cap(b) > keepBytes {
		return
	}
	b = b[:0]
	kept.mu.Lock()
	defer kept.mu.Unlock()
	kept.used = time.Now()
	i, _ := slices.BinarySearchFunc(kept.bufs, cap(b), func(b []byte, n int) int { return cap(b) - n })
	kept.bufs = slices.Insert(kept.bufs, i, b)
	kept.total += cap(b)
	// Over the limit, the smallest go first: a large transfer that
	// follows needs the large ones.
	for kept.total > keepBytes {
		kept.total -= cap(kept.bufs[0])
		kept.bufs[0] = nil
		kept.bufs = kept.bufs[1:]
	}
	if kept.timer == nil {
		kept.timer = time.AfterFunc(keepFor, release)
	}
}

// release drops the kept buffers once they have not been used for
// keepFor.
func release() {
	kept.mu.Lock()
	defer kept.mu.Unlock()
	if idle := time.Since(kept.used); idle < keepFor {
		kept.timer.Reset(keepFor - idle)
		return
	}
	clear(kept.bufs)
	kept.bufs, kept.total, kept.timer = nil, 0, nil
	// Give the memory back now, rather than when the runtime gets to
	// it: nothing large has been asked for during keepFor, so this
	// costs nothing anyone waits for.
	go debug.FreeOSMemory()
}
