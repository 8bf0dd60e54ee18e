package vfs

import (
	"context"
	"io/fs"
	"os"
	"syscall"
	"time"
)

// watchOf forwards Watch to p if it is a Watcher; otherwise nothing is
// ever reported.
func watchOf(p Provider, fn func(path string)) (stop func()) {
	if w, ok := p.(Watcher); ok {
		return w.Watch(fn)
	}
	return func() {}
}

// NewReadonly returns p without its writes: every call that would change
// the tree fails with EROFS, and so does opening a file for writing,
// creating or truncating it. It forwards Watch to p.
func NewReadonly(p Provider) Provider { return readonly{p} }

type readonly struct{ p Provider }

// writeFlags are the open flags that ask to change a file.
const writeFlags = os.O_WRONLY | os.O_RDWR | os.O_CREATE | os.O_TRUNC | os.O_APPEND

func (r readonly) Readonly() bool { return true }
func (r readonly) Stat(ctx context.Context, p string) (FileInfo, error) {
	return r.p.Stat(ctx, p)
}
func (r readonly) Readdir(ctx context.Context, p string) ([]FileInfo, error) {
	return r.p.Readdir(ctx, p)
}
func (r readonly) Open(ctx context.Context, p string, flags int, mode fs.FileMode) (Handle, error) {
	if flags&writeFlags != 0 {
		return nil, syscall.EROFS
	}
	h, err := r.p.Open(ctx, p, flags, mode)
	if err != nil {
		return nil, err
	}
	return readonlyHandle{h}, nil
}
func (r readonly) Create(ctx context.Context, p string, mode fs.FileMode) (Handle, error) {
	return nil, syscall.EROFS
}
func (r readonly) Mkdir(ctx context.Context, p string, mode fs.FileMode) error { return syscall.EROFS }
func (r readonly) Remove(ctx context.Context, p string) error                  { return syscall.EROFS }
func (r readonly) Rename(ctx context.Context, oldPath, newPath string) error   { return syscall.EROFS }
func (r readonly) Symlink(ctx context.Context, target, link string) error      { return syscall.EROFS }
func (r readonly) Readlink(ctx context.Context, p string) (string, error) {
	return r.p.Readlink(ctx, p)
}
func (r readonly) Mknod(ctx context.Context, p string, mode fs.FileMode) error { return syscall.EROFS }
func (r readonly) Link(ctx context.Context, oldPath, newPath string) error     { return syscall.EROFS }
func (r readonly) Chmod(ctx context.Context, p string, mode fs.FileMode) error { return syscall.EROFS }
func (r readonly) Chown(ctx context.Context, p string, uid, gid int) error     { return syscall.EROFS }
func (r readonly) Truncate(ctx context.Context, p string, size int64) error    { return syscall.EROFS }
func (r readonly) Utimens(ctx context.Context, p string, atime, mtime *time.Time) error {
	return syscall.EROFS
}
func (r readonly) Statfs(ctx context.Context, p string) (StatFS, error) { return r.p.Statfs(ctx, p) }

// Watch implements Watcher.
func (r readonly) Watch(fn func(path string)) (stop func()) { return watchOf(r.p, fn) }

type readonlyHandle struct{ Handle }

func (h readonlyHandle) WriteAt(ctx context.Context, p []byte, off int64) (int, error) {
	return 0, syscall.EROFS
}
func (h readonlyHandle) Truncate(ctx context.Context, size int64) error { return syscall.EROFS }
