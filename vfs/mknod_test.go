package vfs_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"slices"
	"syscall"
	"testing"

	"github.com/airlock-sandbox/airlock/vfs"
)

const fifo = fs.ModeNamedPipe

func TestCheckMknod(t *testing.T) {
	for mode, want := range map[fs.FileMode]syscall.Errno{
		fifo | 0o644:                        0,
		fs.ModeSocket | 0o777:               0,
		fifo | fs.ModeSetuid | 0o700:        0,
		fs.ModeDevice | 0o600:               syscall.EPERM,
		fs.ModeDevice | fs.ModeCharDevice:   syscall.EPERM,
		fs.ModeCharDevice | 0o600:           syscall.EINVAL,
		0o644:                               syscall.EINVAL,
		fs.ModeDir | 0o755:                  syscall.EINVAL,
		fs.ModeSymlink:                      syscall.EINVAL,
		fs.ModeIrregular:                    syscall.EINVAL,
		fifo | fs.ModeSocket:                syscall.EINVAL,
		fs.ModeDevice | fs.ModeNamedPipe:    syscall.EINVAL,
		fs.ModeNamedPipe | fs.ModeIrregular: syscall.EINVAL,
	} {
		if got := vfs.Errno(vfs.CheckMknod(mode)); got != want {
			t.Errorf("CheckMknod(%v) = %v, want %v", mode, got, want)
		}
	}
}

// A special file costs an inode of a Memory's quota, and host-made ones
// reach the watchers.
func TestMemoryMknodQuota(t *testing.T) {
	ctx := context.Background()
	m := vfs.NewMemory(vfs.MemoryOptions{MaxInodes: 3})
	var seen []string
	stop := m.Watch(func(p string) { seen = append(seen, p) })
	defer stop()
	if err := m.Mknod(ctx, "/p", fifo|0o644); err != nil {
		t.Fatal(err)
	}
	if err := m.Mknod(vfs.WithOrigin(ctx, vfs.OriginSandbox), "/s", fs.ModeSocket|0o644); err != nil {
		t.Fatal(err)
	}
	if err := m.Mknod(ctx, "/q", fifo|0o644); vfs.Errno(err) != syscall.ENOSPC {
		t.Fatalf("mknod past the inode quota: %v", err)
	}
	if bytes, inodes := m.Usage(); bytes != 0 || inodes != 3 {
		t.Fatalf("usage %d bytes %d inodes", bytes, inodes)
	}
	if err := m.Remove(ctx, "/p"); err != nil {
		t.Fatal(err)
	}
	if _, inodes := m.Usage(); inodes != 2 {
		t.Fatalf("%d inodes after remove", inodes)
	}
	if !slices.Equal(seen, []string{"/p", "/p"}) {
		t.Fatalf("watchers saw %v", seen)
	}
}

// An overlay makes special files in its upper; one of its lower is made
// anew in upper when it changes (no data is copied), and a removed one
// is hidden by a whiteout that a new one replaces.
func TestOverlayMknod(t *testing.T) {
	ctx := context.Background()
	lower := vfs.NewMemory(vfs.MemoryOptions{})
	populate(t, lower)
	for _, n := range []string{"/a/p", "/gone", "/sock"} {
		mode := fifo | 0o640
		if n == "/sock" {
			mode = fs.ModeSocket | 0o600
		}
		if err := lower.Mknod(ctx, n, mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := lower.Chown(ctx, "/a/p", 7, 8); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, lower)
	upper := vfs.NewMemory(vfs.MemoryOptions{})
	o := vfs.NewOverlay(upper, vfs.NewReadonly(lower))

	if err := o.Chmod(ctx, "/a/p", 0o604); err != nil {
		t.Fatal(err)
	}
	fi, err := upper.Stat(ctx, "/a/p")
	if err != nil || fi.Mode != fifo|0o604 || fi.UID != 7 || fi.GID != 8 {
		t.Fatalf("copied-up FIFO in upper: %+v %v", fi, err)
	}
	if err := o.Rename(ctx, "/sock", "/a/sock"); err != nil {
		t.Fatal(err)
	}
	if fi, err := o.Stat(ctx, "/a/sock"); err != nil || fi.Mode != fs.ModeSocket|0o600 {
		t.Fatalf("renamed socket: %+v %v", fi, err)
	}
	if _, err := o.Stat(ctx, "/sock"); vfs.Errno(err) != syscall.ENOENT {
		t.Fatalf("the socket's old name: %v", err)
	}
	if err := o.Remove(ctx, "/gone"); err != nil {
		t.Fatal(err)
	}
	if _, err := o.Stat(ctx, "/gone"); vfs.Errno(err) != syscall.ENOENT {
		t.Fatalf("removed FIFO of lower: %v", err)
	}
	if err := o.Mknod(ctx, "/gone", fs.ModeSocket|0o700); err != nil {
		t.Fatal(err)
	}
	if fi, err := o.Stat(ctx, "/gone"); err != nil || fi.Mode != fs.ModeSocket|0o700 {
		t.Fatalf("a socket made over a whiteout: %+v %v", fi, err)
	}
	if err := o.Mknod(ctx, "/b", fifo|0o600); vfs.Errno(err) != syscall.EEXIST {
		t.Fatalf("mknod over a file of lower: %v", err)
	}
	if err := o.Mknod(ctx, "/.airlock-wh.b", fifo|0o600); vfs.Errno(err) != syscall.EPERM {
		t.Fatalf("mknod of a reserved name: %v", err)
	}
	if err := o.Mknod(ctx, "/a/c/new", fifo|0o600); err != nil {
		t.Fatal(err)
	}
	if fi, err := upper.Stat(ctx, "/a/c"); err != nil || !fi.IsDir() {
		t.Fatalf("the parent was not copied up: %+v %v", fi, err)
	}
	want := map[string]string{
		"/a/p":     "prw----r--",
		"/a/sock":  "Srw-------",
		"/a/c/new": "prw-------",
		"/gone":    "Srwx------",
	}
	got := snapshot(t, o)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q", k, got[k], v)
		}
	}
	if again := snapshot(t, vfs.NewOverlay(upper, lower)); !mapsEqual(again, got) {
		t.Fatalf("a new overlay sees %v, not %v", sorted(again), sorted(got))
	}
	if after := snapshot(t, lower); !mapsEqual(after, before) {
		t.Fatalf("lower changed: %v", sorted(after))
	}
}

// Mknod makes a name: BeforeOpen is asked as for any file made, a denial
// is reported by Observe as a blocked "mknod", and a read-only provider
// refuses it.
func TestMknodHooksObserveReadonly(t *testing.T) {
	ctx := context.Background()
	var asked []string
	hooks := vfs.Hooks{BeforeOpen: func(ctx context.Context, p string, flags int) error {
		if flags != os.O_WRONLY|os.O_CREATE|os.O_EXCL {
			t.Errorf("BeforeOpen of %s with flags %#x", p, flags)
		}
		asked = append(asked, p)
		if p == "/denied" {
			return syscall.EACCES
		}
		return nil
	}}
	m := vfs.NewMemory(vfs.MemoryOptions{})
	var events []vfs.Event
	p := vfs.Observe(vfs.WithHooks(m, hooks), func(ev vfs.Event) { events = append(events, ev) })
	if err := p.Mknod(ctx, "/p", fifo|0o644); err != nil {
		t.Fatal(err)
	}
	err := p.Mknod(ctx, "/denied", fifo|0o644)
	var d *vfs.DeniedError
	if vfs.Errno(err) != syscall.EACCES || !errors.As(err, &d) || d.Hook != "BeforeOpen" {
		t.Fatalf("denied mknod: %v", err)
	}
	if err := p.Mknod(ctx, "/dev", fs.ModeDevice|fs.ModeCharDevice|0o666); vfs.Errno(err) != syscall.EPERM {
		t.Fatalf("mknod of a device: %v", err)
	}
	p.Mknod(ctx, "/p", fifo|0o644) // EEXIST: no event
	ro := vfs.Observe(vfs.NewReadonly(m), func(ev vfs.Event) { events = append(events, ev) })
	if err := ro.Mknod(ctx, "/q", fifo|0o644); vfs.Errno(err) != syscall.EROFS {
		t.Fatalf("read-only mknod: %v", err)
	}
	want := []vfs.Event{
		{Op: "mknod", Path: "/p"},
		{Op: "mknod", Path: "/denied", Blocked: true, Reason: "BeforeOpen denied /denied: permission denied"},
		{Op: "mknod", Path: "/dev", Blocked: true, Reason: "operation not permitted"},
		{Op: "mknod", Path: "/q", Blocked: true, Reason: "read-only file system"},
	}
	if !slices.Equal(events, want) {
		t.Fatalf("events:\n%v\nwant\n%v", events, want)
	}
	if !slices.Equal(asked, []string{"/p", "/denied", "/p"}) {
		t.Fatalf("BeforeOpen asked about %v", asked)
	}
	if _, err := m.Stat(ctx, "/denied"); vfs.Errno(err) != syscall.ENOENT {
		t.Fatalf("a denied mknod made the file: %v", err)
	}
}

// A MountRouter passes Mknod to the mount that holds the path; mount
// points and made-up directories are not the mounts' to make in.
func TestMountRouterMknod(t *testing.T) {
	ctx := context.Background()
	ws := vfs.NewMemory(vfs.MemoryOptions{})
	r := vfs.NewMountRouter(map[string]vfs.Provider{
		"/":              vfs.NewMemory(vfs.MemoryOptions{}),
		"/workspace/a/b": ws,
	})
	if err := r.Mknod(ctx, "/workspace/a/b/p", fifo|0o644); err != nil {
		t.Fatal(err)
	}
	if fi, err := ws.Stat(ctx, "/p"); err != nil || fi.Mode != fifo|0o644 {
		t.Fatalf("in the mount: %+v %v", fi, err)
	}
	if fi, err := r.Stat(ctx, "/workspace/a/b/p"); err != nil || fi.Mode != fifo|0o644 {
		t.Fatalf("through the router: %+v %v", fi, err)
	}
	for _, p := range []string{"/workspace/a/b", "/workspace/a", "/workspace"} {
		if err := r.Mknod(ctx, p, fifo|0o644); vfs.Errno(err) != syscall.EEXIST {
			t.Errorf("mknod of %s: %v, want EEXIST", p, err)
		}
	}
	if err := r.Mknod(ctx, "/workspace/a/x", fifo|0o644); vfs.Errno(err) != syscall.EROFS {
		t.Errorf("mknod in a made-up directory: %v, want EROFS", err)
	}
}

// Opening a special file of lower for writing copies nothing up.
func TestOverlayOpenSpecialCopiesNothing(t *testing.T) {
	ctx := context.Background()
	lower := vfs.NewMemory(vfs.MemoryOptions{})
	if err := lower.Mknod(ctx, "/p", fifo|0o666); err != nil {
		t.Fatal(err)
	}
	upper := vfs.NewMemory(vfs.MemoryOptions{})
	o := vfs.NewOverlay(upper, lower)
	for _, flags := range []int{os.O_WRONLY, os.O_RDWR | os.O_TRUNC, os.O_RDONLY} {
		if _, err := o.Open(ctx, "/p", flags, 0); vfs.Errno(err) != syscall.ENXIO {
			t.Errorf("open flags %#x: %v, want ENXIO", flags, err)
		}
	}
	if _, err := upper.Stat(ctx, "/p"); vfs.Errno(err) != syscall.ENOENT {
		t.Errorf("copied up: %v", err)
	}
}
