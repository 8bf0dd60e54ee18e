package vfs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
	"time"
)

// DefaultHookTimeout is how long a hook may run when Hooks.Timeout is 0.
const DefaultHookTimeout = 5 * time.Second

// maxRunningHooks bounds the hook calls in flight at once, those that
// overran their timeout and still run included.
const maxRunningHooks = 1024

// Hooks are functions called before (and after) operations on a
// provider, to allow or deny them. A hook allows with nil and denies
// with an error: the operation then fails with the syscall.Errno the
// error wraps, or EPERM. A hook that runs past Timeout (0 means
// DefaultHookTimeout) denies with ETIMEDOUT; its context is cancelled
// then. A hook that panics denies with EPERM. Any hook may be nil.
//
// Which hook each operation calls:
//   - Open and Create: BeforeOpen with the open flags.
//   - Mkdir, Symlink (the link's path), Mknod (of a FIFO or a socket:
//     a device is refused first) and Link (the new path), which make a
//     name: BeforeOpen with O_WRONLY|O_CREATE|O_EXCL.
//   - Handle.WriteAt: BeforeWrite, then AfterWrite with the bytes
//     written, if any.
//   - Truncate and Handle.Truncate: BeforeWrite with off the new size and
//     n 0.
//   - Remove: BeforeRemove. Rename: BeforeRename.
//
// Stat, Readdir, Readlink, Chmod, Chown, Utimens, Statfs and reads call
// no hook.
type Hooks struct {
	BeforeOpen   func(ctx context.Context, path string, flags int) error
	BeforeWrite  func(ctx context.Context, path string, off int64, n int) error
	AfterWrite   func(ctx context.Context, path string, n int)
	BeforeRemove func(ctx context.Context, path string) error
	BeforeRename func(ctx context.Context, oldPath, newPath string) error
	Timeout      time.Duration
}

// DeniedError is the error of an operation that a hook denied.
type DeniedError struct {
	Hook  string // "BeforeOpen", ...
	Path  string
	Errno syscall.Errno
	Err   error // the hook's error
}

func (e *DeniedError) Error() string {
	return fmt.Sprintf("%s denied %s: %v", e.Hook, e.Path, e.Err)
}

// Unwrap returns the errno first, so that Errno gives it.
func (e *DeniedError) Unwrap() []error { return []error{e.Errno, e.Err} }

// WithHooks returns p with h called around its operations (see Hooks).
// It forwards Watch to p.
func WithHooks(p Provider, h Hooks) Provider {
	if h.Timeout <= 0 {
		h.Timeout = DefaultHookTimeout
	}
	return &hooked{p: p, h: h, sem: make(chan struct{}, maxRunningHooks)}
}

type hooked struct {
	p   Provider
	h   Hooks
	sem chan struct{}
}

// run calls one hook within the timeout.
func (w *hooked) run(ctx context.Context, hook, path string, fn func(ctx context.Context) error) error {
	// An operation already cancelled runs no hook (a select below would
	// pick at random between starting it and giving up).
	if err := ctx.Err(); err != nil {
		return err
	}
	tctx, cancel := context.WithTimeout(ctx, w.h.Timeout)
	defer cancel()
	deny := func(errno syscall.Errno, err error) error {
		return &DeniedError{Hook: hook, Path: path, Errno: errno, Err: err}
	}
	timedOut := func() error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return deny(syscall.ETIMEDOUT, errors.New("hook timed out"))
	}
	select {
	case w.sem <- struct{}{}:
	case <-tctx.Done():
		return timedOut()
	}
	done := make(chan error, 1)
	go func() {
		defer func() { <-w.sem }()
		defer func() {
			if r := recover(); r != nil {
				done <- fmt.Errorf("hook panicked: %v", r)
			}
		}()
		done <- fn(tctx)
	}()
	select {
	case err := <-done:
		if err == nil {
			return nil
		}
		if cerr := ctx.Err(); cerr != nil {
			// The operation was cancelled while its hook ran.
			return cerr
		}
		var errno syscall.Errno
		if !errors.As(err, &errno) || errno == 0 {
			errno = syscall.EPERM
		}
		return deny(errno, err)
	case <-tctx.Done():
		return timedOut()
	}
}

func (w *hooked) beforeOpen(ctx context.Context, p string, flags int) error {
	if w.h.BeforeOpen == nil {
		return nil
	}
	return w.run(ctx, "BeforeOpen", p, func(ctx context.Context) error { return w.h.BeforeOpen(ctx, p, flags) })
}

func (w *hooked) beforeWrite(ctx context.Context, p string, off int64, n int) error {
	if w.h.BeforeWrite == nil {
		return nil
	}
	return w.run(ctx, "BeforeWrite", p, func(ctx context.Context) error { return w.h.BeforeWrite(ctx, p, off, n) })
}

func (w *hooked) afterWrite(ctx context.Context, p string, n int) {
	if w.h.AfterWrite == nil {
		return
	}
	w.run(ctx, "AfterWrite", p, func(ctx context.Context) error { w.h.AfterWrite(ctx, p, n); return nil })
}

const createFlags = os.O_WRONLY | os.O_CREATE | os.O_EXCL

func (w *hooked) Readonly() bool { return w.p.Readonly() }
func (w *hooked) Stat(ctx context.Context, p string) (FileInfo, error) {
	return w.p.Stat(ctx, p)
}
func (w *hooked) Readdir(ctx context.Context, p string) ([]FileInfo, error) {
	return w.p.Readdir(ctx, p)
}
func (w *hooked) Open(ctx context.Context, p string, flags int, mode fs.FileMode) (Handle, error) {
	if err := w.beforeOpen(ctx, p, flags); err != nil {
		return nil, err
	}
	h, err := w.p.Open(ctx, p, flags, mode)
	if err != nil {
		return nil, err
	}
	return &hookedHandle{Handle: h, w: w, path: p}, nil
}
func (w *hooked) Create(ctx context.Context, p string, mode fs.FileMode) (Handle, error) {
	return w.Open(ctx, p, os.O_RDWR|os.O_CREATE|os.O_TRUNC, mode)
}
func (w *hooked) Mkdir(ctx context.Context, p string, mode fs.FileMode) error {
	if err := w.beforeOpen(ctx, p, createFlags); err != nil {
		return err
	}
	return w.p.Mkdir(ctx, p, mode)
}
func (w *hooked) Remove(ctx context.Context, p string) error {
	if w.h.BeforeRemove != nil {
		if err := w.run(ctx, "BeforeRemove", p, func(ctx context.Context) error { return w.h.BeforeRemove(ctx, p) }); err != nil {
			return err
		}
	}
	return w.p.Remove(ctx, p)
}
func (w *hooked) Rename(ctx context.Context, oldPath, newPath string) error {
	if w.h.BeforeRename != nil {
		if err := w.run(ctx, "BeforeRename", oldPath, func(ctx context.Context) error { return w.h.BeforeRename(ctx, oldPath, newPath) }); err != nil {
			return err
		}
	}
	return w.p.Rename(ctx, oldPath, newPath)
}
func (w *hooked) Symlink(ctx context.Context, target, link string) error {
	if err := w.beforeOpen(ctx, link, createFlags); err != nil {
		return err
	}
	return w.p.Symlink(ctx, target, link)
}
func (w *hooked) Mknod(ctx context.Context, p string, mode fs.FileMode) error {
	// A device is refused before any hook is asked about it.
	if err := CheckMknod(mode); err != nil {
		return err
	}
	if err := w.beforeOpen(ctx, p, createFlags); err != nil {
		return err
	}
	return w.p.Mknod(ctx, p, mode)
}
func (w *hooked) Readlink(ctx context.Context, p string) (string, error) {
	return w.p.Readlink(ctx, p)
}
func (w *hooked) Link(ctx context.Context, oldPath, newPath string) error {
	if err := w.beforeOpen(ctx, newPath, createFlags); err != nil {
		return err
	}
	return w.p.Link(ctx, oldPath, newPath)
}
func (w *hooked) Chmod(ctx context.Context, p string, mode fs.FileMode) error {
	return w.p.Chmod(ctx, p, mode)
}
func (w *hooked) Chown(ctx context.Context, p string, uid, gid int) error {
	return w.p.Chown(ctx, p, uid, gid)
}
func (w *hooked) Truncate(ctx context.Context, p string, size int64) error {
	if err := w.beforeWrite(ctx, p, size, 0); err != nil {
		return err
	}
	return w.p.Truncate(ctx, p, size)
}
func (w *hooked) Utimens(ctx context.Context, p string, atime, mtime *time.Time) error {
	return w.p.Utimens(ctx, p, atime, mtime)
}
func (w *hooked) Statfs(ctx context.Context, p string) (StatFS, error) { return w.p.Statfs(ctx, p) }

// Watch implements Watcher.
func (w *hooked) Watch(fn func(path string)) (stop func()) { return watchOf(w.p, fn) }

type hookedHandle struct {
	Handle
	w    *hooked
	path string
}

func (h *hookedHandle) WriteAt(ctx context.Context, p []byte, off int64) (int, error) {
	if err := h.w.beforeWrite(ctx, h.path, off, len(p)); err != nil {
		return 0, err
	}
	n, err := h.Handle.WriteAt(ctx, p, off)
	if n > 0 {
		h.w.afterWrite(ctx, h.path, n)
	}
	return n, err
}

func (h *hookedHandle) Truncate(ctx context.Context, size int64) error {
	if err := h.w.beforeWrite(ctx, h.path, size, 0); err != nil {
		return err
	}
	return h.Handle.Truncate(ctx, size)
}
