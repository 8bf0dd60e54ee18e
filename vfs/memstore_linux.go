package vfs

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// memfdStore is a pageStore in a memfd: an unnamed tmpfs file of the
// host's kernel, charged to the process that holds it. The descriptor is
// closed with the os.File, when the provider is no longer referenced.
type memfdStore struct {
	*os.File
}

// newPageStore makes a memfd store, or a heap store where the kernel
// refuses memfds.
func newPageStore() pageStore {
	fd, err := unix.MemfdCreate("airlock-vfs-memory", unix.MFD_CLOEXEC)
	if err != nil {
		return newHeapStore()
	}
	return memfdStore{os.NewFile(uintptr(fd), "airlock-vfs-memory")}
}

func (s memfdStore) close() error { return s.File.Close() }

func (s memfdStore) punch(off, n int64) error {
	if err := unix.Fallocate(int(s.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n); err != nil {
		return fmt.Errorf("free memory provider pages: %w", err)
	}
	return nil
}
