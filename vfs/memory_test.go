package vfs_test

import (
	"context"
	"io/fs"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"

	"github.com/airlock-sandbox/airlock/vfs"
	"github.com/airlock-sandbox/airlock/vfs/vfstest"
)

func TestMemoryConformance(t *testing.T) {
	vfstest.Run(t, func(t *testing.T) vfs.Provider {
		return vfs.NewMemory(vfs.MemoryOptions{})
	})
}

func TestMemoryQuota(t *testing.T) {
	ctx := context.Background()
	m := vfs.NewMemory(vfs.MemoryOptions{MaxBytes: 64 << 10, MaxInodes: 10})
	h, err := m.Create(ctx, "/a", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 100<<10)
	n, err := h.WriteAt(ctx, buf, 0)
	if vfs.Errno(err) != syscall.ENOSPC || n != 64<<10 {
		t.Fatalf("write past the quota: %d %v", n, err)
	}
	if used, _ := m.Usage(); used != 64<<10 {
		t.Fatalf("used %d", used)
	}
	if _, err := h.WriteAt(ctx, []byte("x"), 1<<20); vfs.Errno(err) != syscall.ENOSPC {
		t.Fatalf("write to a new page when full: %v", err)
	}
	if _, err := h.WriteAt(ctx, []byte("x"), 10); err != nil {
		t.Fatalf("overwrite when full: %v", err)
	}
	if err := m.Symlink(ctx, "target", "/l"); vfs.Errno(err) != syscall.ENOSPC {
		t.Fatalf("symlink when full: %v", err)
	}
	st, _ := m.Statfs(ctx, "/")
	if st.FreeBytes != 0 {
		t.Fatalf("statfs free %d when full", st.FreeBytes)
	}
	// A removed file's pages come back only when its last handle closes.
	if err := m.Remove(ctx, "/a"); err != nil {
		t.Fatal(err)
	}
	if used, _ := m.Usage(); used != 64<<10 {
		t.Fatalf("used %d with the file still open", used)
	}
	h.Close()
	if used, inodes := m.Usage(); used != 0 || inodes != 1 {
		t.Fatalf("used %d bytes, %d inodes after close", used, inodes)
	}
	h, err = m.Create(ctx, "/b", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := h.WriteAt(ctx, buf[:32<<10], 0); err != nil || n != 32<<10 {
		t.Fatalf("write after freeing: %d %v", n, err)
	}
	if err := h.Truncate(ctx, 4096); err != nil {
		t.Fatal(err)
	}
	if used, _ := m.Usage(); used != 4096 {
		t.Fatalf("used %d after truncate", used)
	}
	h.Close()
	for i := range 20 {
		err := m.Mkdir(ctx, "/d"+string(rune('a'+i)), 0o755)
		if i < 8 && err != nil {
			t.Fatalf("mkdir %d: %v", i, err)
		}
		if i >= 8 && vfs.Errno(err) != syscall.ENOSPC {
			t.Fatalf("mkdir %d past the inode quota: %v", i, err)
		}
	}
	if err := m.Remove(ctx, "/da"); err != nil {
		t.Fatal(err)
	}
	if err := m.Mkdir(ctx, "/again", 0o755); err != nil {
		t.Fatalf("mkdir after freeing an inode: %v", err)
	}
}

func TestMemorySparseCost(t *testing.T) {
	ctx := context.Background()
	m := vfs.NewMemory(vfs.MemoryOptions{MaxBytes: 1 << 20})
	h, err := m.Create(ctx, "/s", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if _, err := h.WriteAt(ctx, []byte("x"), 5<<30); err != nil {
		t.Fatal(err)
	}
	if used, _ := m.Usage(); used != 4096 {
		t.Fatalf("a write at 5 GiB costs %d bytes", used)
	}
	if err := h.Truncate(ctx, 1<<40); err != nil {
		t.Fatal(err)
	}
	if used, _ := m.Usage(); used != 4096 {
		t.Fatalf("growing by truncate costs %d bytes", used)
	}
}

func TestMemoryWatchOrigin(t *testing.T) {
	ctx := context.Background()
	m := vfs.NewMemory(vfs.MemoryOptions{})
	var mu sync.Mutex
	var got []string
	stop := m.Watch(func(p string) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, p)
	})
	sctx := vfs.WithOrigin(ctx, vfs.OriginSandbox)
	if err := m.Mkdir(sctx, "/sandbox", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := m.Mkdir(ctx, "/host", 0o755); err != nil {
		t.Fatal(err)
	}
	h, err := m.Open(ctx, "/host/f", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	h.WriteAt(ctx, []byte("x"), 0)
	h.WriteAt(sctx, []byte("y"), 0)
	h.Close()
	if err := m.Rename(ctx, "/host/f", "/host/g"); err != nil {
		t.Fatal(err)
	}
	if err := m.Chmod(ctx, "/host/g", 0o600); err != nil {
		t.Fatal(err)
	}
	stop()
	if err := m.Remove(ctx, "/host/g"); err != nil {
		t.Fatal(err)
	}
	want := []string{"/host", "/host/f", "/host/f", "/host/f", "/host/g", "/host/g"}
	if !slices.Equal(got, want) {
		t.Fatalf("watched %v, want %v", got, want)
	}
}

func TestMemoryOwnerAndSetgid(t *testing.T) {
	ctx := context.Background()
	m := vfs.NewMemory(vfs.MemoryOptions{RootMode: fs.ModeSticky | 0o777, RootUID: 5, RootGID: 6})
	fi, _ := m.Stat(ctx, "/")
	if fi.Mode != fs.ModeDir|fs.ModeSticky|0o777 || fi.UID != 5 || fi.GID != 6 {
		t.Fatalf("root %+v", fi)
	}
	cctx := vfs.WithCaller(ctx, vfs.Caller{UID: 1000, GID: 1000})
	if err := m.Mkdir(ctx, "/g", fs.ModeSetgid|0o775); err != nil {
		t.Fatal(err)
	}
	if err := m.Chown(ctx, "/g", 0, 50); err != nil {
		t.Fatal(err)
	}
	if err := m.Mkdir(cctx, "/g/sub", 0o755); err != nil {
		t.Fatal(err)
	}
	fi, _ = m.Stat(ctx, "/g/sub")
	if fi.UID != 1000 || fi.GID != 50 || fi.Mode&fs.ModeSetgid == 0 {
		t.Fatalf("in a set-group-ID dir: %+v", fi)
	}
	h, err := m.Create(cctx, "/f", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := m.Chmod(ctx, "/f", fs.ModeSetuid|fs.ModeSetgid|0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := h.WriteAt(cctx, []byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	fi, _ = m.Stat(ctx, "/f")
	if fi.Mode&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
		t.Fatalf("a write by a user kept the set-id bits: %v", fi.Mode)
	}
}
