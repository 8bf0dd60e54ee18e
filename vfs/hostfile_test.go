package vfs_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlock-sandbox/airlock/vfs"
)

// Only a file that nothing can write through its provider has a host
// file for the kernel to read (HostFiler): a read-only real_fs, through
// the wrappers that leave reads alone; never a writable one, nor one
// under an overlay, whose copy-up gives the same path another file.
func TestHostFileOf(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	real, err := vfs.NewRealFS(dir)
	if err != nil {
		t.Fatal(err)
	}
	ro := vfs.NewReadonly(real)
	for _, c := range []struct {
		name string
		p    vfs.Provider
		path string
		want bool
	}{
		{"real_fs", real, "/f", false},
		{"read-only real_fs", ro, "/f", true},
		{"hooks and events over it", vfs.Observe(vfs.WithHooks(ro, vfs.Hooks{}), func(vfs.Event) {}), "/f", true},
		{"mounted in a router", vfs.NewMountRouter(map[string]vfs.Provider{"/": vfs.NewMemory(vfs.MemoryOptions{}), "/ro": ro}), "/ro/f", true},
		{"overlay lower", vfs.NewOverlay(vfs.NewMemory(vfs.MemoryOptions{}), ro), "/f", false},
		{"read-only overlay", vfs.NewReadonly(vfs.NewOverlay(vfs.NewMemory(vfs.MemoryOptions{}), ro)), "/f", false},
		{"memory", vfs.NewReadonly(vfs.NewMemory(vfs.MemoryOptions{})), "/", false},
	} {
		h, err := c.p.Open(ctx, c.path, os.O_RDONLY, 0)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := vfs.HostFileOf(h) != nil; got != c.want {
			t.Errorf("%s: host file %v, want %v", c.name, got, c.want)
		}
		h.Close()
	}
}
