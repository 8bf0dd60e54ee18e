package vfs_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"syscall"
	"testing"

	"github.com/airlock-sandbox/airlock/vfs"
)

// TestMountTable mounts and unmounts providers while the table is used:
// each mount's files are under its name, the root cannot be changed from
// inside, renames between mounts are EXDEV, a mount keeps its inode
// index while others come and go, and watchers hear of every change.
func TestMountTable(t *testing.T) {
	ctx := context.Background()
	tab := vfs.NewMountTable()
	var mu sync.Mutex
	var heard []string
	stop := tab.Watch(func(p string) {
		mu.Lock()
		heard = append(heard, p)
		mu.Unlock()
	})
	defer stop()

	a, b := vfs.NewMemory(vfs.MemoryOptions{}), vfs.NewMemory(vfs.MemoryOptions{})
	writeFileT(t, a, "/f", "in a")
	writeFileT(t, b, "/g", "in b")
	if _, err := tab.Stat(ctx, "/a/f"); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("before the mount: %v, want ENOENT", err)
	}
	if err := tab.Mount("a", a); err != nil {
		t.Fatal(err)
	}
	fiA, err := tab.Stat(ctx, "/a/f")
	if err != nil {
		t.Fatal(err)
	}
	if err := tab.Mount("b", b); err != nil {
		t.Fatal(err)
	}
	if err := tab.Mount("a", b); !errors.Is(err, syscall.EEXIST) {
		t.Errorf("a second mount as a: %v, want EEXIST", err)
	}
	for _, bad := range []string{"", ".", "..", "x/y"} {
		if err := tab.Mount(bad, b); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("mount as %q: %v, want EINVAL", bad, err)
		}
	}
	list, err := tab.Readdir(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	names := []string{}
	for _, fi := range list {
		names = append(names, fi.Name)
	}
	if !slices.Equal(names, []string{"a", "b"}) {
		t.Errorf("the root lists %v", names)
	}
	if got := readAll(t, tab, "/b/g"); got != `"in b"` {
		t.Errorf("/b/g: %q", got)
	}
	if err := tab.Mkdir(ctx, "/c", 0o755); err == nil {
		t.Error("a directory was made in the table's root")
	}
	if err := tab.Chmod(ctx, "/", 0o777); err == nil {
		t.Error("the table's root was chmodded")
	}
	if err := tab.Remove(ctx, "/a"); !errors.Is(err, syscall.EBUSY) {
		t.Errorf("remove a mount point: %v, want EBUSY", err)
	}
	if err := tab.Rename(ctx, "/a/f", "/b/f"); !errors.Is(err, syscall.EXDEV) {
		t.Errorf("rename across mounts: %v, want EXDEV", err)
	}
	if err := tab.Unmount("b"); err != nil {
		t.Fatal(err)
	}
	if _, err := tab.Stat(ctx, "/b/g"); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("after the unmount: %v, want ENOENT", err)
	}
	if err := tab.Unmount("b"); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("a second unmount: %v, want ENOENT", err)
	}
	if err := tab.Mount("c", vfs.NewMemory(vfs.MemoryOptions{})); err != nil {
		t.Fatal(err)
	}
	if fi, err := tab.Stat(ctx, "/a/f"); err != nil || fi.Ino != fiA.Ino {
		t.Errorf("a's file changed inode number as mounts came and went: %d, then %d (%v)", fiA.Ino, fi.Ino, err)
	}
	// Changes inside a mount are heard with their full path.
	writeFileT(t, a, "/new", "x")
	mu.Lock()
	got := slices.Clone(heard)
	mu.Unlock()
	for _, want := range []string{"/a", "/b", "/c", "/a/new"} {
		if !slices.Contains(got, want) {
			t.Errorf("watchers did not hear of %s: %v", want, got)
		}
	}
}
