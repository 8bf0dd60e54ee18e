package airlock

import (
	"fmt"
)

// A sandbox's writable tree (its "disk": /, /tmp, /workspace and
// /dev/shm together) is a tmpfs when it fits in memory, and otherwise an
// ext4 filesystem in a file under the state directory.
//
// A tmpfs holds its files in memory that no process owns: pages written
// there are charged to the memory limit of the process that wrote them,
// and no kill frees them. A tmpfs as large as the memory limit therefore
// ends, when it fills, in an out-of-memory kill of whatever runs, not in
// ENOSPC. So a tmpfs disk may take at most half of the memory limit (of
// the host's memory when the sandbox has none): full, its pages and the
// kernel memory of its inodes (about 1 KiB per file, at most one file per
// bytesPerInode, so at most an eighth more) leave the sandbox's processes
// more than a third of their memory. A larger disk is backed by a file on
// the host's disk, whose page cache the kernel writes back and reclaims
// under the memory limit; that needs loop devices, that is root.

// bytesPerInode sets the number of files and directories a disk may
// hold: one per 8 KiB of its size, the average size of the files of
// source trees and package caches. An unbounded count of empty files
// would pin about 1 KiB of kernel memory each.
const bytesPerInode = 8 << 10

// minInodes is the fewest files a disk holds, whatever its size: the
// root's own skeleton takes about a hundred.
const minInodes = 1024

// storage is how a sandbox's writable tree is backed and bounded.
type storage struct {
	SizeBytes int64
	// Inodes bounds the number of files and directories.
	Inodes int64
	// OnDisk backs the tree with an ext4 filesystem in a file under the
	// state directory instead of a tmpfs.
	OnDisk bool
}

// planStorage decides how a disk of diskMB is backed in a sandbox whose
// memory limit is memoryMB (MemoryUnlimited: none) on a host with hostMem
// bytes of memory (0: unknown), and refuses a disk that does not fit in
// memory when no disk can be mounted (canMount is false without root).
func planStorage(diskMB, memoryMB, hostMem int64, canMount bool) (storage, error) {
	s := storage{SizeBytes: diskMB << 20, Inodes: max(diskMB<<20/bytesPerInode, minInodes)}
	budget, of := memoryMB<<20, "the memory limit"
	if memoryMB <= 0 {
		budget, of = hostMem, "the host's memory, since the sandbox's memory is unlimited"
	}
	if budget <= 0 || s.SizeBytes <= budget/2 {
		return s, nil
	}
	if !canMount {
		return storage{}, fmt.Errorf("disk_mb %d does not fit in memory: without root the sandbox's writable tree is a tmpfs, which is memory, and it may take at most half of %s (%d of %d MiB), so that a full disk fails writes with ENOSPC instead of ending in an out-of-memory kill; give --disk %dm (disk_mb) or less, or --memory %dm (memory_mb) or more, or run airlock as root, which puts a larger disk in a file under the state directory",
			diskMB, of, budget>>21, budget>>20, budget>>21, 2*diskMB)
	}
	s.OnDisk = true
	return s, nil
}

// defaultMemoryMB is the memory limit of a sandbox that asks for none on
// a host with hostMem bytes of memory (0: unknown).
func defaultMemoryMB(hostMem int64) int64 {
	if q := hostMem >> 22; q > 0 && q < DefaultMemoryMB {
		return max(q, 8)
	}
	return DefaultMemoryMB
}

// defaultDiskMB is the disk of a sandbox that asks for none: the largest
// that is a tmpfs, at most DefaultDiskMB.
func defaultDiskMB(memoryMB, hostMem int64) int64 {
	budget := memoryMB
	if memoryMB <= 0 {
		budget = hostMem >> 20
	}
	if budget <= 0 {
		return DefaultDiskMB
	}
	return max(min(DefaultDiskMB, budget/2), 1)
}
