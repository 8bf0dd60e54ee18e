package vfs_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/vfs"
	"github.com/airlock-sandbox/airlock/vfs/vfstest"
)

func TestReadonly(t *testing.T) {
	ctx := context.Background()
	m := vfs.NewMemory(vfs.MemoryOptions{})
	h, _ := m.Create(ctx, "/f", 0o644)
	h.WriteAt(ctx, []byte("data"), 0)
	h.Close()
	m.Mkdir(ctx, "/d", 0o755)
	r := vfs.NewReadonly(m)
	if !r.Readonly() {
		t.Fatal("Readonly() is false")
	}
	now := time.Now()
	for name, err := range map[string]error{
		"mkdir":    r.Mkdir(ctx, "/x", 0o755),
		"remove":   r.Remove(ctx, "/f"),
		"rename":   r.Rename(ctx, "/f", "/g"),
		"symlink":  r.Symlink(ctx, "f", "/l"),
		"link":     r.Link(ctx, "/f", "/g"),
		"chmod":    r.Chmod(ctx, "/f", 0o777),
		"chown":    r.Chown(ctx, "/f", 1, 1),
		"truncate": r.Truncate(ctx, "/f", 0),
		"utimens":  r.Utimens(ctx, "/f", &now, &now),
	} {
		if vfs.Errno(err) != syscall.EROFS {
			t.Errorf("%s: %v, want EROFS", name, err)
		}
	}
	for _, flags := range []int{os.O_WRONLY, os.O_RDWR, os.O_RDONLY | os.O_TRUNC, os.O_RDONLY | os.O_CREATE, os.O_RDONLY | os.O_APPEND} {
		if _, err := r.Open(ctx, "/f", flags, 0o644); vfs.Errno(err) != syscall.EROFS {
			t.Errorf("open with %#x: %v", flags, err)
		}
	}
	if _, err := r.Create(ctx, "/new", 0o644); vfs.Errno(err) != syscall.EROFS {
		t.Errorf("create: %v", err)
	}
	rh, err := r.Open(ctx, "/f", os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer rh.Close()
	buf := make([]byte, 4)
	if n, _ := rh.ReadAt(ctx, buf, 0); n != 4 || string(buf) != "data" {
		t.Fatalf("read %q", buf[:n])
	}
	if _, err := rh.WriteAt(ctx, buf, 0); vfs.Errno(err) != syscall.EROFS {
		t.Fatalf("handle write: %v", err)
	}
	if list, err := r.Readdir(ctx, "/"); err != nil || len(list) != 2 {
		t.Fatalf("readdir %v %v", list, err)
	}
}

func TestHooksConformance(t *testing.T) {
	vfstest.Run(t, func(t *testing.T) vfs.Provider {
		allow := func(ctx context.Context, path string) error { return nil }
		return vfs.Observe(vfs.WithHooks(vfs.NewMemory(vfs.MemoryOptions{}), vfs.Hooks{
			BeforeOpen:   func(ctx context.Context, path string, flags int) error { return nil },
			BeforeWrite:  func(ctx context.Context, path string, off int64, n int) error { return nil },
			AfterWrite:   func(ctx context.Context, path string, n int) {},
			BeforeRemove: allow,
			BeforeRename: func(ctx context.Context, o, n string) error { return nil },
		}), func(vfs.Event) {})
	})
}

func TestHooksDeny(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	var written []string
	h := vfs.Hooks{
		BeforeOpen: func(ctx context.Context, path string, flags int) error {
			switch path {
			case "/secret":
				return syscall.EACCES
			case "/plain":
				return errors.New("no")
			case "/wrapped":
				return fmt.Errorf("policy: %w", syscall.ENOENT)
			case "/slow":
				<-ctx.Done()
				return nil
			case "/panic":
				panic("boom")
			}
			return nil
		},
		BeforeWrite: func(ctx context.Context, path string, off int64, n int) error {
			if off >= 100 {
				return syscall.EFBIG
			}
			return nil
		},
		AfterWrite: func(ctx context.Context, path string, n int) {
			mu.Lock()
			defer mu.Unlock()
			written = append(written, fmt.Sprintf("%s:%d", path, n))
		},
		BeforeRemove: func(ctx context.Context, path string) error { return syscall.EBUSY },
		BeforeRename: func(ctx context.Context, o, n string) error {
			if n == "/etc" {
				return syscall.EXDEV
			}
			return nil
		},
		Timeout: 50 * time.Millisecond,
	}
	p := vfs.WithHooks(vfs.NewMemory(vfs.MemoryOptions{}), h)
	for path, want := range map[string]syscall.Errno{
		"/secret": syscall.EACCES, "/plain": syscall.EPERM, "/wrapped": syscall.ENOENT,
		"/slow": syscall.ETIMEDOUT, "/panic": syscall.EPERM,
	} {
		_, err := p.Create(ctx, path, 0o644)
		if vfs.Errno(err) != want {
			t.Errorf("create %s: %v, want %v", path, err, want)
		}
		var d *vfs.DeniedError
		if !errors.As(err, &d) || d.Hook != "BeforeOpen" || d.Path != path {
			t.Errorf("create %s: %#v is not a DeniedError", path, err)
		}
		if err := p.Mkdir(ctx, path, 0o755); vfs.Errno(err) != want {
			t.Errorf("mkdir %s: %v, want %v", path, err, want)
		}
	}
	f, err := p.Create(ctx, "/ok", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(ctx, []byte("abc"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(ctx, []byte("abc"), 100); vfs.Errno(err) != syscall.EFBIG {
		t.Fatalf("denied write: %v", err)
	}
	if err := f.Truncate(ctx, 200); vfs.Errno(err) != syscall.EFBIG {
		t.Fatalf("denied truncate: %v", err)
	}
	f.Close()
	if err := p.Remove(ctx, "/ok"); vfs.Errno(err) != syscall.EBUSY {
		t.Fatalf("remove: %v", err)
	}
	if err := p.Rename(ctx, "/ok", "/etc"); vfs.Errno(err) != syscall.EXDEV {
		t.Fatalf("rename: %v", err)
	}
	if err := p.Rename(ctx, "/ok", "/ok2"); err != nil {
		t.Fatalf("rename: %v", err)
	}
	if !slices.Equal(written, []string{"/ok:3"}) {
		t.Fatalf("AfterWrite saw %v", written)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := p.Create(cctx, "/slow", 0o644); vfs.Errno(err) != syscall.EINTR {
		t.Fatalf("cancelled: %v", err)
	}
}

func TestObserve(t *testing.T) {
	ctx := context.Background()
	var events []vfs.Event
	hooks := vfs.Hooks{BeforeRemove: func(ctx context.Context, path string) error {
		if path == "/keep" {
			return errors.New("kept by policy")
		}
		return nil
	}}
	m := vfs.NewMemory(vfs.MemoryOptions{})
	p := vfs.Observe(vfs.WithHooks(m, hooks), func(ev vfs.Event) { events = append(events, ev) })
	h, _ := p.Create(ctx, "/f", 0o644)
	h.WriteAt(ctx, []byte("hello"), 0)
	h.WriteAt(ctx, []byte("!"), 5)
	h.Close()
	h, _ = p.Open(ctx, "/f", os.O_RDONLY, 0)
	h.Close()
	h, _ = p.Open(ctx, "/f", os.O_WRONLY|os.O_TRUNC, 0)
	h.Close()
	now := time.Now()
	p.Mkdir(ctx, "/d", 0o755)
	p.Rename(ctx, "/f", "/d/f")
	p.Symlink(ctx, "d/f", "/l")
	p.Link(ctx, "/d/f", "/keep")
	p.Chmod(ctx, "/keep", 0o600)
	p.Chown(ctx, "/keep", 1, 2)
	p.Truncate(ctx, "/keep", 10)
	p.Utimens(ctx, "/keep", &now, &now)
	p.Remove(ctx, "/keep")
	p.Remove(ctx, "/missing")
	ro := vfs.Observe(vfs.NewReadonly(m), func(ev vfs.Event) { events = append(events, ev) })
	ro.Mkdir(ctx, "/x", 0o755)
	ro.Open(ctx, "/l", os.O_WRONLY, 0)
	want := []vfs.Event{
		{Op: "create", Path: "/f"},
		{Op: "write", Path: "/f", Size: 6},
		{Op: "truncate", Path: "/f"},
		{Op: "mkdir", Path: "/d"},
		{Op: "rename", Path: "/f", To: "/d/f"},
		{Op: "symlink", Path: "/l", To: "d/f"},
		{Op: "link", Path: "/d/f", To: "/keep"},
		{Op: "chmod", Path: "/keep"},
		{Op: "chown", Path: "/keep"},
		{Op: "truncate", Path: "/keep", Size: 10},
		{Op: "utimens", Path: "/keep"},
		{Op: "remove", Path: "/keep", Blocked: true, Reason: "BeforeRemove denied /keep: kept by policy"},
		{Op: "mkdir", Path: "/x", Blocked: true, Reason: "read-only file system"},
		{Op: "open", Path: "/l", Blocked: true, Reason: "read-only file system"},
	}
	if !slices.Equal(events, want) {
		t.Fatalf("events:\n%v\nwant\n%v", events, want)
	}
}
