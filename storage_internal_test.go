package airlock

import (
	"strings"
	"testing"
)

func TestPlanStorage(t *testing.T) {
	const gib = int64(1) << 30
	for _, c := range []struct {
		name              string
		diskMB, memoryMB  int64
		hostMem           int64
		canMount          bool
		wantDisk, wantErr bool
		wantInodes        int64
	}{
		{name: "half of memory is a tmpfs", diskMB: 128, memoryMB: 256, hostMem: 24 * gib, wantInodes: 16384},
		{name: "more than half needs a file", diskMB: 129, memoryMB: 256, hostMem: 24 * gib, canMount: true, wantDisk: true, wantInodes: 16512},
		{name: "more than half without root is refused", diskMB: 2048, memoryMB: 256, hostMem: 24 * gib, wantErr: true},
		{name: "unlimited memory counts the host's", diskMB: 12 << 10, memoryMB: MemoryUnlimited, hostMem: 24 * gib, wantInodes: 12 << 10 << 20 / bytesPerInode},
		{name: "unlimited memory, more than half the host's", diskMB: 13 << 10, memoryMB: MemoryUnlimited, hostMem: 24 * gib, canMount: true, wantDisk: true, wantInodes: 13 << 10 << 20 / bytesPerInode},
		{name: "unlimited memory, more than half the host's, without root", diskMB: 13 << 10, memoryMB: MemoryUnlimited, hostMem: 24 * gib, wantErr: true},
		{name: "unknown host memory", diskMB: 1 << 20, memoryMB: MemoryUnlimited, wantInodes: 1 << 20 << 20 / bytesPerInode},
		{name: "a small disk has the fewest inodes", diskMB: 1, memoryMB: 8, hostMem: gib, wantInodes: minInodes},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, err := planStorage(c.diskMB, c.memoryMB, c.hostMem, c.canMount)
			if c.wantErr {
				if err == nil {
					t.Fatalf("planStorage = %+v, want a refusal", st)
				}
				for _, want := range []string{"does not fit in memory", "ENOSPC", "--disk", "--memory", "root"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("the refusal %q does not say %q", err, want)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if st.OnDisk != c.wantDisk || st.SizeBytes != c.diskMB<<20 || st.Inodes != c.wantInodes {
				t.Errorf("planStorage = %+v, want on disk %v, %d bytes, %d inodes", st, c.wantDisk, c.diskMB<<20, c.wantInodes)
			}
		})
	}
}

// The defaults fit each other: a default disk is a tmpfs under the
// default memory limit, whatever the host.
func TestStorageDefaults(t *testing.T) {
	const gib = int64(1) << 30
	for _, c := range []struct {
		hostMem              int64
		wantMemory, wantDisk int64
	}{
		{hostMem: 24 * gib, wantMemory: 1024, wantDisk: 512},
		{hostMem: 2 * gib, wantMemory: 512, wantDisk: 256},
		{hostMem: 0, wantMemory: 1024, wantDisk: 512},
		{hostMem: 16 << 20, wantMemory: 8, wantDisk: 4},
	} {
		mem := defaultMemoryMB(c.hostMem)
		disk := defaultDiskMB(mem, c.hostMem)
		if mem != c.wantMemory || disk != c.wantDisk {
			t.Errorf("host of %d MiB: memory %d MiB, disk %d MiB; want %d and %d", c.hostMem>>20, mem, disk, c.wantMemory, c.wantDisk)
		}
		if st, err := planStorage(disk, mem, c.hostMem, false); err != nil || st.OnDisk {
			t.Errorf("host of %d MiB: the default disk is not a tmpfs: %+v %v", c.hostMem>>20, st, err)
		}
	}
	if got := defaultDiskMB(MemoryUnlimited, 24*gib); got != DefaultDiskMB {
		t.Errorf("unlimited memory on 24 GiB: default disk %d MiB, want %d", got, DefaultDiskMB)
	}
	// An explicit memory limit and no disk: half of it.
	if got := defaultDiskMB(256, 24*gib); got != 128 {
		t.Errorf("256 MiB of memory: default disk %d MiB, want 128", got)
	}
}

func TestValidateMemory(t *testing.T) {
	for _, c := range []struct {
		mb int64
		ok bool
	}{{MemoryUnlimited, true}, {0, true}, {8, true}, {-2, false}, {4, false}, {1 << 40, true}, {1<<40 + 1, false}} {
		cfg := Config{Resources: Resources{MemoryMB: c.mb}}
		if err := cfg.Validate(); (err == nil) != c.ok {
			t.Errorf("memory_mb %d: Validate() = %v, want ok %v", c.mb, err, c.ok)
		}
	}
}
