package vfs

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"os"
	"syscall"
	"testing"
)

// stores are the page stores this system can give a Memory provider.
func stores() map[string]func() pageStore {
	return map[string]func() pageStore{"default": newPageStore, "heap": func() pageStore { return newHeapStore() }}
}

// TestMemoryDataModel writes, truncates and reads one file at random
// offsets around chunk and page edges and checks its bytes, its size and
// the pages it is charged against a plain byte slice, near and at the
// quota, over each page store.
func TestMemoryDataModel(t *testing.T) {
	for name, mk := range stores() {
		t.Run(name, func(t *testing.T) {
			for seed := range uint64(8) {
				modelRun(t, mk, seed)
			}
		})
	}
}

func modelRun(t *testing.T, mk func() pageStore, seed uint64) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 1))
	quota := int64(rng.IntN(700)+1) * pageSize
	m := NewMemory(MemoryOptions{MaxBytes: quota})
	m.store = mk()
	h, err := m.Create(ctx, "/f", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	var want []byte
	written := map[int64]bool{} // pages written, as the quota counts them
	edge := func() int64 {
		// Offsets near a chunk's or a page's edge, or anywhere in 3 MiB.
		base := []int64{0, pageSize, chunkSize, 2 * chunkSize, int64(rng.IntN(3 * chunkSize))}[rng.IntN(5)]
		return max(0, base+int64(rng.IntN(2*pageSize))-pageSize)
	}
	for step := range 300 {
		switch rng.IntN(4) {
		case 0, 1:
			off := edge()
			data := make([]byte, rng.IntN(300<<10))
			for i := range data {
				data[i] = byte(rng.Uint32()) | 1
			}
			// The model: pages in order, each new one taking a page
			// of the quota, until there is none.
			limit := off + int64(len(data))
			free := (quota - int64(len(written))*pageSize) / pageSize
			for pg := off / pageSize; pg*pageSize < off+int64(len(data)); pg++ {
				if written[pg] {
					continue
				}
				if free == 0 {
					limit = max(off, pg*pageSize)
					break
				}
				free--
			}
			n, err := h.WriteAt(ctx, data, off)
			wantN := int(limit - off)
			if n != wantN || (wantN < len(data)) != (Errno(err) == syscall.ENOSPC) || (err != nil && Errno(err) != syscall.ENOSPC) {
				t.Fatalf("seed %d step %d: write %d at %d: %d, %v; want %d", seed, step, len(data), off, n, err, wantN)
			}
			if n > 0 {
				if end := off + int64(n); end > int64(len(want)) {
					want = append(want, make([]byte, end-int64(len(want)))...)
				}
				copy(want[off:], data[:n])
				for pg := off / pageSize; pg*pageSize < off+int64(n); pg++ {
					written[pg] = true
				}
			}
		case 2:
			size := edge()
			if rng.IntN(3) == 0 {
				size = 0
			}
			if err := h.Truncate(ctx, size); err != nil {
				t.Fatal(err)
			}
			if size < int64(len(want)) {
				want = want[:size]
				for pg := range written {
					if pg*pageSize >= size {
						delete(written, pg)
					}
				}
			} else {
				want = append(want, make([]byte, size-int64(len(want)))...)
			}
		case 3:
			off := edge()
			got := make([]byte, rng.IntN(2*chunkSize))
			n, err := h.ReadAt(ctx, got, off)
			var exp []byte
			if off < int64(len(want)) {
				exp = want[off:min(int64(len(want)), off+int64(len(got)))]
			}
			if n != len(exp) || !bytes.Equal(got[:n], exp) {
				t.Fatalf("seed %d step %d: read %d at %d: %d bytes differ from the model's %d", seed, step, len(got), off, n, len(exp))
			}
			if n < len(got) && err != io.EOF {
				t.Fatalf("seed %d step %d: short read without EOF: %v", seed, step, err)
			}
		}
		fi, err := h.Stat(ctx)
		if err != nil {
			t.Fatal(err)
		}
		used, _ := m.Usage()
		if fi.Size != int64(len(want)) || used != int64(len(written))*pageSize || fi.Blocks != int64(len(written))*pageSize/512 {
			t.Fatalf("seed %d step %d: size %d used %d blocks %d; model size %d, %d pages", seed, step, fi.Size, used, fi.Blocks, len(want), len(written))
		}
	}
}

// TestMemoryChunksReused shows that a removed file's chunks go to the
// next file cleared: its holes read as zeros, not as the old bytes, and
// the store does not grow.
func TestMemoryChunksReused(t *testing.T) {
	for name, mk := range stores() {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			m := NewMemory(MemoryOptions{})
			m.store = mk()
			full := bytes.Repeat([]byte{0xAA}, 3*chunkSize)
			for round := range 5 {
				h, err := m.Open(ctx, "/f", os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
				if err != nil {
					t.Fatal(err)
				}
				if round%2 == 0 {
					if _, err := h.WriteAt(ctx, full, 0); err != nil {
						t.Fatal(err)
					}
				} else {
					// One byte in each chunk: the rest are holes.
					for c := range int64(3) {
						if _, err := h.WriteAt(ctx, []byte{1}, c*chunkSize+chunkSize/2); err != nil {
							t.Fatal(err)
						}
					}
					got := make([]byte, 3*chunkSize)
					if _, err := h.ReadAt(ctx, got, 0); err != nil && err != io.EOF {
						t.Fatal(err)
					}
					for i, b := range got {
						if b != 0 && int64(i)%chunkSize != chunkSize/2 {
							t.Fatalf("round %d: byte %d of a reused chunk reads %#x, not 0", round, i, b)
						}
					}
				}
				h.Close()
				if err := m.Remove(ctx, "/f"); err != nil {
					t.Fatal(err)
				}
			}
			if m.nextSlot != 3 {
				t.Fatalf("the store took %d chunks for files of 3", m.nextSlot)
			}
			if used, _ := m.Usage(); used != 0 {
				t.Fatalf("%d bytes used with no file left", used)
			}
		})
	}
}
