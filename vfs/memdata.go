package vfs

import (
	"errors"
	"io"
	"math/bits"
	"syscall"
)

// File data of a Memory provider.
//
// The bytes of all of a provider's regular files live in one pageStore,
// in chunks of its address space that files take and give back. On Linux
// the store is a memfd: the kernel copies the bytes and allocates the
// pages, as for a tmpfs file. Pages of the Go heap would cost a page
// fault each when first written, which on a virtual machine is most of a
// write's time (256 MiB through the heap: ~1.4 s; into a memfd: ~0.1 s),
// and a garbage-collected heap holds up to twice what it keeps.
//
// What a file has written is counted in 4 KiB pages (a bitmap per chunk),
// which is what the byte quota counts: a hole costs nothing.

// chunkSize is how much of the store's address space a file takes at a
// time: one chunk per MiB of the file that holds data.
const (
	chunkSize  = 1 << 20
	chunkPages = chunkSize / pageSize
)

// pageStore holds the bytes of a provider's files. Bytes never written,
// or punched, read as zeros; reads may run at the same time as each
// other, and never with a write or a punch (Memory's lock).
type pageStore interface {
	io.ReaderAt
	io.WriterAt
	// punch makes [off, off+n) read as zeros and frees the pages it
	// covers whole.
	punch(off, n int64) error
	// close frees everything the store holds; it is not used after.
	close() error
}

// memChunk is one MiB of a file: where it lives in the store, and which
// of its pages were written.
type memChunk struct {
	slot    int64 // the store's offset is slot * chunkSize
	written [chunkPages / 64]uint64
}

func (c *memChunk) has(page int64) bool { return c.written[page/64]&(1<<(page%64)) != 0 }

// mark records pages [from, to) of the chunk as written and returns how
// many were not already.
func (c *memChunk) mark(from, to int64) int64 {
	added := int64(0)
	for pg := from; pg < to; pg++ {
		w, b := pg/64, uint64(1)<<(pg%64)
		if c.written[w]&b == 0 {
			c.written[w] |= b
			added++
		}
	}
	return added
}

// unmark forgets pages [from, to) and returns how many were written.
func (c *memChunk) unmark(from, to int64) int64 {
	dropped := int64(0)
	for pg := from; pg < to; pg++ {
		w, b := pg/64, uint64(1)<<(pg%64)
		if c.written[w]&b != 0 {
			c.written[w] &^= b
			dropped++
		}
	}
	return dropped
}

func (c *memChunk) count() int64 {
	n := 0
	for _, w := range c.written {
		n += bits.OnesCount64(w)
	}
	return int64(n)
}

// takeSlot gives a chunk of the store to a file. m.mu must be held.
func (m *Memory) takeSlot() int64 {
	if k := len(m.freeSlots); k > 0 {
		s := m.freeSlots[k-1]
		m.freeSlots = m.freeSlots[:k-1]
		return s
	}
	s := m.nextSlot
	m.nextSlot++
	return s
}

// dropChunk gives a file's chunk back, its bytes freed. A chunk the
// store could not clear is never handed out again, so that no file reads
// another's bytes. m.mu must be held.
func (m *Memory) dropChunk(c *memChunk) {
	if m.clear(c.slot*chunkSize, chunkSize) == nil {
		m.freeSlots = append(m.freeSlots, c.slot)
	}
}

// clear punches [off, off+n) of the store, or writes zeros over it if
// the store cannot punch.
func (m *Memory) clear(off, n int64) error {
	if m.store.punch(off, n) == nil {
		return nil
	}
	zeros := make([]byte, min(n, 64<<10))
	for n > 0 {
		k := min(n, int64(len(zeros)))
		if _, err := m.store.WriteAt(zeros[:k], off); err != nil {
			return err
		}
		off, n = off+k, n-k
	}
	return nil
}

// readData fills p with the file's bytes at off, zeros where it has a
// hole; the caller keeps the read within the file's size. m.mu must be
// held, for reading at least.
func (m *Memory) readData(n *memNode, p []byte, off int64) error {
	for done := int64(0); done < int64(len(p)); {
		pos := off + done
		idx, in := pos/chunkSize, pos%chunkSize
		k := min(int64(len(p))-done, chunkSize-in)
		dst := p[done : done+k]
		if c := n.data[idx]; c == nil {
			clear(dst)
		} else {
			got, err := m.store.ReadAt(dst, c.slot*chunkSize+in)
			if err != nil && !errors.Is(err, io.EOF) {
				return err
			}
			// The store ends at the last byte written to it.
			clear(dst[got:])
		}
		done += k
	}
	return nil
}

// writeData writes p at off, as much of it as the byte quota allows: it
// returns how many bytes it wrote, with ENOSPC if the quota stopped it
// or the store's error. m.mu must be held.
func (m *Memory) writeData(n *memNode, p []byte, off int64) (int, error) {
	end := off + int64(len(p))
	// How far the quota lets the write go: each page not yet written
	// takes a page of it.
	budget := (m.maxBytes - m.usedBytes) / pageSize
	limit := end
	var c *memChunk
	for pg := off / pageSize; pg*pageSize < end; pg++ {
		if pg == off/pageSize || pg%chunkPages == 0 {
			c = n.data[pg/chunkPages]
		}
		if c != nil && c.has(pg%chunkPages) {
			continue
		}
		if budget == 0 {
			limit = max(off, pg*pageSize)
			break
		}
		budget--
	}
	if n.data == nil && limit > off {
		n.data = make(map[int64]*memChunk)
	}
	for pos := off; pos < limit; {
		idx, in := pos/chunkSize, pos%chunkSize
		k := min(limit-pos, chunkSize-in)
		c := n.data[idx]
		if c == nil {
			c = &memChunk{slot: m.takeSlot()}
			n.data[idx] = c
		}
		wrote, err := m.store.WriteAt(p[pos-off:pos-off+k], c.slot*chunkSize+in)
		if wrote > 0 {
			added := c.mark(in/pageSize, (in+int64(wrote)+pageSize-1)/pageSize)
			n.pages += added
			m.usedBytes += added * pageSize
		}
		pos += int64(wrote)
		if err != nil {
			return int(pos - off), err
		}
	}
	if limit < end {
		return int(limit - off), syscall.ENOSPC
	}
	return len(p), nil
}

// cutData frees the file's bytes from size on; the part of a page
// before size stays. m.mu must be held.
func (m *Memory) cutData(n *memNode, size int64) {
	for idx, c := range n.data {
		start := idx * chunkSize
		if start >= size {
			m.dropPages(n, c.count())
			m.dropChunk(c)
			delete(n.data, idx)
			continue
		}
		if start+chunkSize <= size {
			continue
		}
		in := size - start
		m.dropPages(n, c.unmark((in+pageSize-1)/pageSize, chunkPages))
		if c.count() == 0 {
			m.dropChunk(c)
			delete(n.data, idx)
			continue
		}
		// A store that can neither punch nor write zeros fails
		// every write too; the bytes past size it keeps are the
		// file's own.
		_ = m.clear(c.slot*chunkSize+in, chunkSize-in)
	}
	if len(n.data) == 0 {
		n.data = nil
	}
}

func (m *Memory) dropPages(n *memNode, pages int64) {
	n.pages -= pages
	m.usedBytes -= pages * pageSize
}

// freeData frees all of the file's bytes. m.mu must be held.
func (m *Memory) freeData(n *memNode) {
	for _, c := range n.data {
		m.dropChunk(c)
	}
	m.usedBytes -= n.pages * pageSize
	n.pages = 0
	n.data = nil
}

// heapStore is a pageStore on the Go heap, in 4 KiB pages, where the
// system has no memfd.
type heapStore struct {
	pages map[int64]*[pageSize]byte
}

func newHeapStore() *heapStore { return &heapStore{pages: make(map[int64]*[pageSize]byte)} }

func (s *heapStore) ReadAt(p []byte, off int64) (int, error) {
	for done := int64(0); done < int64(len(p)); {
		pos := off + done
		k := min(int64(len(p))-done, pageSize-pos%pageSize)
		if pg := s.pages[pos/pageSize]; pg != nil {
			copy(p[done:done+k], pg[pos%pageSize:])
		} else {
			clear(p[done : done+k])
		}
		done += k
	}
	return len(p), nil
}

func (s *heapStore) WriteAt(p []byte, off int64) (int, error) {
	for done := int64(0); done < int64(len(p)); {
		pos := off + done
		k := min(int64(len(p))-done, pageSize-pos%pageSize)
		pg := s.pages[pos/pageSize]
		if pg == nil {
			pg = new([pageSize]byte)
			s.pages[pos/pageSize] = pg
		}
		copy(pg[pos%pageSize:], p[done:done+k])
		done += k
	}
	return len(p), nil
}

func (s *heapStore) close() error {
	clear(s.pages)
	return nil
}

func (s *heapStore) punch(off, n int64) error {
	for pos, end := off, off+n; pos < end; {
		idx, in := pos/pageSize, pos%pageSize
		k := min(end-pos, pageSize-in)
		if pg := s.pages[idx]; pg != nil {
			if k == pageSize {
				delete(s.pages, idx)
			} else {
				clear(pg[in : in+k])
			}
		}
		pos += k
	}
	return nil
}
