package mounts_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"slices"
	"syscall"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/mounts"
	"github.com/airlock-sandbox/airlock/vfs"
)

func TestOutermost(t *testing.T) {
	got := mounts.Outermost([]string{"/w/x", "/data", "/w", "/w2", "/data/a/b"})
	if want := []string{"/data", "/w", "/w2"}; !slices.Equal(got, want) {
		t.Errorf("Outermost = %v, want %v", got, want)
	}
}

func write(t *testing.T, p vfs.Provider, path, data string) {
	t.Helper()
	h, err := p.Create(context.Background(), path, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.WriteAt(context.Background(), []byte(data), 0); err != nil {
		t.Fatal(err)
	}
	h.Close()
}

func TestSubAndBlock(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMemory(vfs.MemoryOptions{})
	for _, d := range []string{"/m", "/m/secret", "/m/open"} {
		if err := mem.Mkdir(ctx, d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, mem, "/m/secret/key", "k")
	write(t, mem, "/m/open/f", "f")
	write(t, mem, "/m/.env", "e")
	view := mounts.Sub(mounts.Block(mem, []string{"/m/secret", "/m/.env"}), "/m")
	if _, err := view.Stat(ctx, "/open/f"); err != nil {
		t.Errorf("stat through the view: %v", err)
	}
	list, err := view.Readdir(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, fi := range list {
		names = append(names, fi.Name)
	}
	if !slices.Equal(names, []string{"open"}) {
		t.Errorf("listing shows %v", names)
	}
	for _, p := range []string{"/secret", "/secret/key", "/.env"} {
		if _, err := view.Stat(ctx, p); !errors.Is(err, syscall.ENOENT) {
			t.Errorf("stat %s: %v, want ENOENT", p, err)
		}
		if _, err := view.Open(ctx, p, os.O_RDONLY, 0); !errors.Is(err, syscall.ENOENT) {
			t.Errorf("open %s: %v, want ENOENT", p, err)
		}
	}
	if _, err := view.Open(ctx, "/secret/new", os.O_RDWR|os.O_CREATE, 0o644); !errors.Is(err, syscall.EACCES) {
		t.Errorf("create in a blocked directory: %v, want EACCES", err)
	}
	if err := view.Rename(ctx, "/open/f", "/.env"); !errors.Is(err, syscall.EACCES) {
		t.Errorf("rename onto a blocked path: %v, want EACCES", err)
	}
	if err := view.Link(ctx, "/secret/key", "/open/k"); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("link from a blocked path: %v, want ENOENT", err)
	}
	if err := view.Symlink(ctx, "/etc/passwd", "/.env"); !errors.Is(err, syscall.EACCES) {
		t.Errorf("symlink at a blocked path: %v, want EACCES", err)
	}
	for _, p := range []string{"/.env", "/secret/p"} {
		if err := view.Mknod(ctx, p, fs.ModeNamedPipe|0o644); !errors.Is(err, syscall.EACCES) {
			t.Errorf("mknod at blocked %s: %v, want EACCES", p, err)
		}
	}
	if err := view.Mknod(ctx, "/open/p", fs.ModeNamedPipe|0o644); err != nil {
		t.Errorf("mknod through the view: %v", err)
	}
	if fi, err := mem.Stat(ctx, "/m/open/p"); err != nil || fi.Mode.Type() != fs.ModeNamedPipe {
		t.Errorf("the view's FIFO in the provider: %+v %v", fi, err)
	}
}

func TestFlags(t *testing.T) {
	r := mounts.Flags{"/workspace": true, "/workspace/host": false, "/data": false, "/data/cache": true}
	for p, want := range map[string]bool{
		"/": false, "/workspace": true, "/workspace/a/b": true, "/workspacex": false,
		"/workspace/host": false, "/workspace/host/x": false, "/workspace/hostile": true,
		"/data/x": false, "/data/cache/y": true, "/elsewhere": false,
	} {
		if got := r.At(p); got != want {
			t.Errorf("At(%q) = %v, want %v", p, got, want)
		}
	}
	w := r.Within("/workspace")
	for p, want := range map[string]bool{"/": true, "/a": true, "/host": false, "/host/y": false} {
		if got := w.At(p); got != want {
			t.Errorf("Within(/workspace).At(%q) = %v, want %v", p, got, want)
		}
	}
	if w := r.Within("/data/cache/sub"); !w.At("/") || !w.At("/z") {
		t.Errorf("a view inside a reported root: %v", w)
	}
	if w := r.Within("/"); !w.At("/workspace/z") || w.At("/data/z") || w.At("/") {
		t.Errorf("the whole tree: %v", w)
	}
	if mounts.Flags(nil).At("/a") {
		t.Error("nil reports a path")
	}
}
