package vfs_test

import (
	"context"
	"os"
	"slices"
	"syscall"
	"testing"

	"github.com/airlock-sandbox/airlock/vfs"
	"github.com/airlock-sandbox/airlock/vfs/vfstest"
)

func TestOverlayConformance(t *testing.T) {
	t.Run("memory-over-memory", func(t *testing.T) {
		vfstest.Run(t, func(t *testing.T) vfs.Provider {
			lower := vfs.NewMemory(vfs.MemoryOptions{})
			populate(t, lower)
			return vfs.NewOverlay(vfs.NewMemory(vfs.MemoryOptions{}), lower)
		})
	})
	t.Run("memory-over-realfs", func(t *testing.T) {
		vfstest.Run(t, func(t *testing.T) vfs.Provider {
			lower := newRealFS(t)
			populate(t, lower)
			return vfs.NewOverlay(vfs.NewMemory(vfs.MemoryOptions{}), vfs.NewReadonly(lower))
		})
	})
}

func TestOverlayWhiteouts(t *testing.T) {
	ctx := context.Background()
	lower := vfs.NewMemory(vfs.MemoryOptions{})
	populate(t, lower)
	before := snapshot(t, lower)
	upper := vfs.NewMemory(vfs.MemoryOptions{})
	o := vfs.NewOverlay(upper, vfs.NewReadonly(lower))
	if err := o.Remove(ctx, "/a/b"); err != nil {
		t.Fatal(err)
	}
	if err := o.Remove(ctx, "/a/c/a"); err != nil {
		t.Fatal(err)
	}
	if err := o.Remove(ctx, "/a/c"); err != nil {
		t.Fatal(err)
	}
	if err := o.Mkdir(ctx, "/a/c", 0o755); err != nil {
		t.Fatal(err)
	}
	if list, _ := o.Readdir(ctx, "/a/c"); len(list) != 0 {
		t.Fatalf("a directory made over a removed one shows %v", list)
	}
	if err := o.Rename(ctx, "/a", "/moved"); err != nil {
		t.Fatal(err)
	}
	if err := o.Rename(ctx, "/b", "/moved/b"); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"/c":       "Lrwxrwxrwx -> a",
		"/moved":   "drwxr-xr-x",
		"/moved/b": `-rw-r----- "lower-b"`,
		"/moved/c": "drwxr-xr-x",
		"/s":       snapshot(t, lower)["/s"],
	}
	got := snapshot(t, o)
	if !mapsEqual(got, want) {
		t.Fatalf("merged tree %v, want %v", sorted(got), sorted(want))
	}
	// The upper holds the state: a new overlay over the same layers sees
	// the same tree, and the lower is as it was.
	if again := snapshot(t, vfs.NewOverlay(upper, lower)); !mapsEqual(again, want) {
		t.Fatalf("a new overlay sees %v", sorted(again))
	}
	if after := snapshot(t, lower); !mapsEqual(after, before) {
		t.Fatalf("lower changed: %v", sorted(after))
	}
	for _, name := range []string{"/.airlock-wh.x", "/moved/.airlock-opaque", "/.airlock-anything"} {
		if _, err := o.Create(ctx, name, 0o644); vfs.Errno(err) != syscall.EPERM {
			t.Errorf("create %s: %v, want EPERM", name, err)
		}
		if err := o.Mkdir(ctx, name, 0o755); vfs.Errno(err) != syscall.EPERM {
			t.Errorf("mkdir %s: %v, want EPERM", name, err)
		}
		if _, err := o.Stat(ctx, name); vfs.Errno(err) != syscall.ENOENT {
			t.Errorf("stat %s: %v, want ENOENT", name, err)
		}
	}
	if _, err := o.Stat(ctx, "/.airlock-wh.a"); vfs.Errno(err) != syscall.ENOENT {
		t.Fatalf("the whiteout shows: %v", err)
	}
	list, _ := upper.Readdir(ctx, "/")
	var names []string
	for _, fi := range list {
		names = append(names, fi.Name)
	}
	if !slices.Contains(names, ".airlock-wh.a") {
		t.Fatalf("upper root holds %v, no whiteout of a", names)
	}
}

func TestOverlayCopyUp(t *testing.T) {
	ctx := context.Background()
	lower := vfs.NewMemory(vfs.MemoryOptions{})
	populate(t, lower)
	upper := vfs.NewMemory(vfs.MemoryOptions{})
	o := vfs.NewOverlay(upper, lower)
	h, err := o.Open(ctx, "/a/c/a", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.WriteAt(ctx, []byte("D"), 0); err != nil {
		t.Fatal(err)
	}
	h.Close()
	if got := readAll(t, o, "/a/c/a"); got != `"Deep"` {
		t.Fatalf("after write %s", got)
	}
	if got := readAll(t, lower, "/a/c/a"); got != `"deep"` {
		t.Fatalf("lower after write %s", got)
	}
	fi, _ := o.Stat(ctx, "/a/c")
	if fi.Mode.Perm() != 0o700 {
		t.Fatalf("copied-up parent mode %v", fi.Mode)
	}
	// A sparse file is copied up sparse.
	if err := o.Chmod(ctx, "/s", 0o600); err != nil {
		t.Fatal(err)
	}
	if used, _ := upper.Usage(); used > 64<<10 {
		t.Fatalf("copy-up of a sparse file used %d bytes", used)
	}
	if err := o.Truncate(ctx, "/b", 3); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, o, "/b"); got != `"low"` {
		t.Fatalf("after truncate %s", got)
	}
}
