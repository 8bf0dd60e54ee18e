package vfs_test

import (
	"context"
	"slices"
	"syscall"
	"testing"

	"github.com/airlock-sandbox/airlock/vfs"
	"github.com/airlock-sandbox/airlock/vfs/vfstest"
)

func TestMountRouterConformance(t *testing.T) {
	t.Run("root", func(t *testing.T) {
		vfstest.Run(t, func(t *testing.T) vfs.Provider {
			return vfs.NewMountRouter(map[string]vfs.Provider{
				"/":          vfs.NewMemory(vfs.MemoryOptions{}),
				"/other/mnt": vfs.NewMemory(vfs.MemoryOptions{}),
			})
		})
	})
	t.Run("nested", func(t *testing.T) {
		// A mount below a made-up directory beside the suite's files.
		vfstest.Run(t, func(t *testing.T) vfs.Provider {
			return vfs.NewMountRouter(map[string]vfs.Provider{
				"/":            vfs.NewMemory(vfs.MemoryOptions{}),
				"/vt-unused/m": vfs.NewMemory(vfs.MemoryOptions{}),
			})
		})
	})
}

func TestMountRouter(t *testing.T) {
	ctx := context.Background()
	root := vfs.NewMemory(vfs.MemoryOptions{})
	ws := vfs.NewMemory(vfs.MemoryOptions{})
	deep := vfs.NewMemory(vfs.MemoryOptions{})
	writeFileT(t, root, "/top", "root")
	writeFileT(t, ws, "/in-ws", "ws")
	writeFileT(t, deep, "/in-deep", "deep")
	r := vfs.NewMountRouter(map[string]vfs.Provider{
		"/":                root,
		"/workspace":       ws,
		"/workspace/a/b/c": deep,
		"/mnt/data/":       vfs.NewReadonly(vfs.NewMemory(vfs.MemoryOptions{})),
		"/nil":             nil,
	})
	if got := readAll(t, r, "/workspace/a/b/c/in-deep"); got != `"deep"` {
		t.Fatalf("longest prefix: %s", got)
	}
	if got := readAll(t, r, "/workspace/in-ws"); got != `"ws"` {
		t.Fatalf("workspace: %s", got)
	}
	names := func(p string) []string {
		list, err := r.Readdir(ctx, p)
		if err != nil {
			t.Fatalf("readdir %s: %v", p, err)
		}
		var out []string
		for _, fi := range list {
			if !fi.IsDir() && fi.Name != "top" && fi.Name != "in-ws" {
				t.Fatalf("%s lists %+v", p, fi)
			}
			out = append(out, fi.Name)
		}
		return out
	}
	if got := names("/"); !slices.Equal(got, []string{"mnt", "top", "workspace"}) {
		t.Fatalf("root lists %v", got)
	}
	if got := names("/workspace"); !slices.Equal(got, []string{"a", "in-ws"}) {
		t.Fatalf("workspace lists %v", got)
	}
	if got := names("/workspace/a/b"); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("/workspace/a/b lists %v", got)
	}
	if fi, err := r.Stat(ctx, "/workspace/a"); err != nil || !fi.IsDir() {
		t.Fatalf("made-up directory: %+v %v", fi, err)
	}
	if _, err := r.Stat(ctx, "/nil"); vfs.Errno(err) != syscall.ENOENT {
		t.Fatalf("nil mount: %v", err)
	}
	for _, p := range []string{"/workspace", "/workspace/a", "/mnt"} {
		if err := r.Remove(ctx, p); vfs.Errno(err) != syscall.EBUSY {
			t.Errorf("remove %s: %v", p, err)
		}
		if err := r.Rename(ctx, p, "/elsewhere"); vfs.Errno(err) != syscall.EBUSY {
			t.Errorf("rename %s: %v", p, err)
		}
	}
	if err := r.Rename(ctx, "/top", "/workspace/top"); vfs.Errno(err) != syscall.EXDEV {
		t.Fatalf("rename across mounts: %v", err)
	}
	if err := r.Link(ctx, "/workspace/in-ws", "/workspace/a/b/c/l"); vfs.Errno(err) != syscall.EXDEV {
		t.Fatalf("link across mounts: %v", err)
	}
	if err := r.Rename(ctx, "/workspace/in-ws", "/workspace/moved"); err != nil {
		t.Fatal(err)
	}
	if err := r.Mkdir(ctx, "/mnt/data/x", 0o755); vfs.Errno(err) != syscall.EROFS {
		t.Fatalf("mkdir in a read-only mount: %v", err)
	}
	a, _ := r.Stat(ctx, "/top")
	b, _ := r.Stat(ctx, "/workspace/moved")
	if a.Ino == b.Ino {
		t.Fatalf("two mounts share inode %d", a.Ino)
	}
	var seen []string
	stop := r.(vfs.Watcher).Watch(func(p string) { seen = append(seen, p) })
	writeFileT(t, deep, "/host-made", "x")
	stop()
	if !slices.Contains(seen, "/workspace/a/b/c/host-made") {
		t.Fatalf("watch saw %v", seen)
	}
}

func writeFileT(t *testing.T, p vfs.Provider, path, data string) {
	t.Helper()
	ctx := context.Background()
	h, err := p.Create(ctx, path, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.WriteAt(ctx, []byte(data), 0); err != nil {
		t.Fatal(err)
	}
	h.Close()
}

// TestMountRouterStatfs: statfs of a path describes the mount that holds
// it, as df in a sandbox shows each mount's own size.
func TestMountRouterStatfs(t *testing.T) {
	ctx := context.Background()
	r := vfs.NewMountRouter(map[string]vfs.Provider{
		"/":             vfs.NewMemory(vfs.MemoryOptions{MaxBytes: 1 << 20}),
		"/ws":           vfs.NewMemory(vfs.MemoryOptions{MaxBytes: 8 << 20}),
		"/ws/cache/mnt": vfs.NewMemory(vfs.MemoryOptions{MaxBytes: 2 << 20}),
	})
	writeFileT(t, r, "/ws/f", string(make([]byte, 4096)))
	for _, c := range []struct {
		path        string
		total, free uint64
	}{
		{"/", 1 << 20, 1 << 20},
		{"/ws", 8 << 20, 8<<20 - 4096},
		{"/ws/f", 8 << 20, 8<<20 - 4096},
		{"/ws/cache/mnt", 2 << 20, 2 << 20},
	} {
		st, err := r.Statfs(ctx, c.path)
		if err != nil {
			t.Fatalf("statfs %s: %v", c.path, err)
		}
		if st.TotalBytes != c.total || st.FreeBytes != c.free {
			t.Errorf("statfs %s: %d of %d bytes free, want %d of %d", c.path, st.FreeBytes, st.TotalBytes, c.free, c.total)
		}
	}
}
