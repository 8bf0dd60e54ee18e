package vfs

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"sync"
	"syscall"
	"time"
)

// Event describes one change to a tree, or one refused.
//
// Op is one of "create", "write", "truncate", "mkdir", "remove",
// "rename", "symlink", "link", "mknod" (a FIFO or a socket made, or a
// device refused), "chmod", "chown", "utimens", and "open" for a refused
// open of an existing file. Path is the file; To is the new
// path of a rename or link, and the target of a symlink. Size is the
// bytes written for "write" and the new size for "truncate".
//
// Blocked events are the operations refused by a hook (DeniedError) or
// failing with EACCES, EPERM or EROFS; Reason is the error's text. Other
// failures give no event.
type Event struct {
	Op, Path, To string
	Size         int64
	Blocked      bool
	Reason       string
}

// Observe returns p with fn called for every change made through it. A
// handle's writes are reported once, at Close, as one "write" event with
// the bytes written through that handle; a refused write is reported at
// once. fn runs synchronously on the caller's goroutine and should be
// quick; it may call p.
//
// To see the operations that hooks deny, put Observe outside WithHooks:
// Observe(WithHooks(p, h), fn). It forwards Watch to p.
func Observe(p Provider, fn func(Event)) Provider {
	return &observed{p: p, fn: fn}
}

type observed struct {
	p  Provider
	fn func(Event)
}

// blocked reports whether err is a refusal rather than a failure.
func blocked(err error) bool {
	var d *DeniedError
	if errors.As(err, &d) {
		return true
	}
	switch Errno(err) {
	case syscall.EACCES, syscall.EPERM, syscall.EROFS:
		return true
	}
	return false
}

// emit reports ev if err is nil, or ev blocked if err is a refusal.
func (o *observed) emit(ev Event, err error) {
	if err != nil {
		if !blocked(err) {
			return
		}
		ev.Blocked = true
		ev.Reason = err.Error()
	}
	o.fn(ev)
}

func (o *observed) Readonly() bool { return o.p.Readonly() }
func (o *observed) Stat(ctx context.Context, p string) (FileInfo, error) {
	return o.p.Stat(ctx, p)
}
func (o *observed) Readdir(ctx context.Context, p string) ([]FileInfo, error) {
	return o.p.Readdir(ctx, p)
}

func (o *observed) Open(ctx context.Context, p string, flags int, mode fs.FileMode) (Handle, error) {
	existed := true
	if flags&os.O_CREATE != 0 {
		_, err := o.p.Stat(ctx, p)
		existed = err == nil
	}
	h, err := o.p.Open(ctx, p, flags, mode)
	switch {
	case err != nil && !existed:
		o.emit(Event{Op: "create", Path: p}, err)
	case err != nil:
		o.emit(Event{Op: "open", Path: p}, err)
	case !existed:
		o.fn(Event{Op: "create", Path: p})
	case flags&os.O_TRUNC != 0 && flags&(os.O_WRONLY|os.O_RDWR) != 0:
		o.fn(Event{Op: "truncate", Path: p})
	}
	if err != nil {
		return nil, err
	}
	return &observedHandle{Handle: h, o: o, path: p}, nil
}

func (o *observed) Create(ctx context.Context, p string, mode fs.FileMode) (Handle, error) {
	return o.Open(ctx, p, os.O_RDWR|os.O_CREATE|os.O_TRUNC, mode)
}

func (o *observed) Mkdir(ctx context.Context, p string, mode fs.FileMode) error {
	err := o.p.Mkdir(ctx, p, mode)
	o.emit(Event{Op: "mkdir", Path: p}, err)
	return err
}

func (o *observed) Remove(ctx context.Context, p string) error {
	err := o.p.Remove(ctx, p)
	o.emit(Event{Op: "remove", Path: p}, err)
	return err
}

func (o *observed) Rename(ctx context.Context, oldPath, newPath string) error {
	err := o.p.Rename(ctx, oldPath, newPath)
	o.emit(Event{Op: "rename", Path: oldPath, To: newPath}, err)
	return err
}

func (o *observed) Symlink(ctx context.Context, target, link string) error {
	err := o.p.Symlink(ctx, target, link)
	o.emit(Event{Op: "symlink", Path: link, To: target}, err)
	return err
}

func (o *observed) Mknod(ctx context.Context, p string, mode fs.FileMode) error {
	err := o.p.Mknod(ctx, p, mode)
	o.emit(Event{Op: "mknod", Path: p}, err)
	return err
}

func (o *observed) Readlink(ctx context.Context, p string) (string, error) {
	return o.p.Readlink(ctx, p)
}

func (o *observed) Link(ctx context.Context, oldPath, newPath string) error {
	err := o.p.Link(ctx, oldPath, newPath)
	o.emit(Event{Op: "link", Path: oldPath, To: newPath}, err)
	return err
}

func (o *observed) Chmod(ctx context.Context, p string, mode fs.FileMode) error {
	err := o.p.Chmod(ctx, p, mode)
	o.emit(Event{Op: "chmod", Path: p}, err)
	return err
}

func (o *observed) Chown(ctx context.Context, p string, uid, gid int) error {
	err := o.p.Chown(ctx, p, uid, gid)
	o.emit(Event{Op: "chown", Path: p}, err)
	return err
}

func (o *observed) Truncate(ctx context.Context, p string, size int64) error {
	err := o.p.Truncate(ctx, p, size)
	o.emit(Event{Op: "truncate", Path: p, Size: size}, err)
	return err
}

func (o *observed) Utimens(ctx context.Context, p string, atime, mtime *time.Time) error {
	err := o.p.Utimens(ctx, p, atime, mtime)
	o.emit(Event{Op: "utimens", Path: p}, err)
	return err
}

func (o *observed) Statfs(ctx context.Context, p string) (StatFS, error) { return o.p.Statfs(ctx, p) }

// Watch implements Watcher.
func (o *observed) Watch(fn func(path string)) (stop func()) { return watchOf(o.p, fn) }

type observedHandle struct {
	Handle
	o       *observed
	path    string
	mu      sync.Mutex
	written int64
}

func (h *observedHandle) WriteAt(ctx context.Context, p []byte, off int64) (int, error) {
	n, err := h.Handle.WriteAt(ctx, p, off)
	if n > 0 {
		h.mu.Lock()
		h.written += int64(n)
		h.mu.Unlock()
	}
	if err != nil && blocked(err) {
		h.o.emit(Event{Op: "write", Path: h.path, Size: int64(len(p))}, err)
	}
	return n, err
}

func (h *observedHandle) Truncate(ctx context.Context, size int64) error {
	err := h.Handle.Truncate(ctx, size)
	h.o.emit(Event{Op: "truncate", Path: h.path, Size: size}, err)
	return err
}

func (h *observedHandle) Close() error {
	err := h.Handle.Close()
	h.mu.Lock()
	n := h.written
	h.written = 0
	h.mu.Unlock()
	if n > 0 {
		h.o.fn(Event{Op: "write", Path: h.path, Size: n})
	}
	return err
}
