//go:build !linux

package vfs

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"slices"
	"syscall"
	"time"
)

// rootFS serves a host directory through os.Root, which keeps every
// lookup inside it. It is the RealFS of systems without openat2; unlike
// the Linux one it follows symlinks in the middle of a path when they
// stay inside the directory.
type rootFS struct {
	root *os.Root
}

// NewRealFS returns a Provider that serves the host directory hostDir.
// Nothing outside hostDir is reachable through it (os.Root). Owners are
// the host's ids as they are; when the process is root, new files are
// given the caller's owner (CallerFrom). A regular file is never made
// set-id. The provider holds a descriptor of hostDir, which its Close
// method (io.Closer) releases.
func NewRealFS(hostDir string) (Provider, error) {
	r, err := os.OpenRoot(hostDir)
	if err != nil {
		return nil, err
	}
	return &rootFS{root: r}, nil
}

func (r *rootFS) Close() error   { return r.root.Close() }
func (r *rootFS) Readonly() bool { return false }

// rel turns a provider path into one relative to the root.
func (r *rootFS) rel(p string) (string, error) {
	if _, err := CleanPath(p); err != nil {
		return "", err
	}
	if p == "/" {
		return ".", nil
	}
	return p[1:], nil
}

func fromOS(name string, fi fs.FileInfo) FileInfo {
	out := FileInfo{Name: name, Size: fi.Size(), Mode: fi.Mode(), ModTime: fi.ModTime()}
	statSys(&out, fi.Sys())
	return out
}

func (r *rootFS) Stat(ctx context.Context, p string) (FileInfo, error) {
	rel, err := r.rel(p)
	if err != nil {
		return FileInfo{}, err
	}
	fi, err := r.root.Lstat(rel)
	if err != nil {
		return FileInfo{}, err
	}
	_, name := splitPath(p)
	return fromOS(name, fi), nil
}

func (r *rootFS) Readdir(ctx context.Context, p string) ([]FileInfo, error) {
	rel, err := r.rel(p)
	if err != nil {
		return nil, err
	}
	if fi, err := r.root.Lstat(rel); err != nil {
		return nil, err
	} else if !fi.IsDir() {
		return nil, syscall.ENOTDIR
	}
	f, err := r.root.Open(rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	out := make([]FileInfo, 0, len(names))
	for _, name := range names {
		fi, err := r.root.Lstat(rel + "/" + name)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, fromOS(name, fi))
	}
	return out, nil
}

func (r *rootFS) Create(ctx context.Context, p string, mode fs.FileMode) (Handle, error) {
	return r.Open(ctx, p, os.O_RDWR|os.O_CREATE|os.O_TRUNC, mode)
}

func (r *rootFS) Open(ctx context.Context, p string, flags int, mode fs.FileMode) (Handle, error) {
	rel, err := r.rel(p)
	if err != nil {
		return nil, err
	}
	fi, err := r.root.Lstat(rel)
	switch {
	case err == nil && fi.Mode()&fs.ModeSymlink != 0:
		return nil, syscall.ELOOP
	case err == nil && fi.IsDir() && flags&(os.O_WRONLY|os.O_RDWR) != 0:
		return nil, syscall.EISDIR
	case err == nil && !fi.Mode().IsRegular() && !fi.IsDir():
		return nil, syscall.ENXIO
	}
	created := errors.Is(err, fs.ErrNotExist) && flags&os.O_CREATE != 0
	if created {
		flags |= os.O_EXCL
	}
	f, err := r.root.OpenFile(rel, flags, mode.Perm())
	if err != nil {
		return nil, err
	}
	if created {
		if c, ok := CallerFrom(ctx); ok && os.Geteuid() == 0 {
			if err := f.Chown(int(c.UID), int(c.GID)); err != nil {
				f.Close()
				return nil, err
			}
		}
		if err := f.Chmod(hostMode(mode, true)); err != nil {
			f.Close()
			return nil, err
		}
	} else if flags&(os.O_WRONLY|os.O_RDWR|os.O_TRUNC) != 0 {
		if err := killSetID(f); err != nil {
			f.Close()
			return nil, err
		}
	}
	return &rootHandle{f: f, append: flags&os.O_APPEND != 0}, nil
}

func (r *rootFS) Mkdir(ctx context.Context, p string, mode fs.FileMode) error {
	rel, err := r.rel(p)
	if err != nil {
		return err
	}
	if err := r.root.Mkdir(rel, mode.Perm()); err != nil {
		return err
	}
	if c, ok := CallerFrom(ctx); ok && os.Geteuid() == 0 {
		if err := r.root.Lchown(rel, int(c.UID), int(c.GID)); err != nil {
			return err
		}
	}
	return r.root.Chmod(rel, mode&permBits)
}

func (r *rootFS) Remove(ctx context.Context, p string) error {
	if p == "/" {
		return syscall.EBUSY
	}
	rel, err := r.rel(p)
	if err != nil {
		return err
	}
	return r.root.Remove(rel)
}

func (r *rootFS) Rename(ctx context.Context, oldPath, newPath string) error {
	if oldPath == "/" || newPath == "/" {
		return syscall.EBUSY
	}
	o, err := r.rel(oldPath)
	if err != nil {
		return err
	}
	n, err := r.rel(newPath)
	if err != nil {
		return err
	}
	return r.root.Rename(o, n)
}

func (r *rootFS) Symlink(ctx context.Context, target, link string) error {
	rel, err := r.rel(link)
	if err != nil {
		return err
	}
	if err := r.root.Symlink(target, rel); err != nil {
		return err
	}
	if c, ok := CallerFrom(ctx); ok && os.Geteuid() == 0 {
		return r.root.Lchown(rel, int(c.UID), int(c.GID))
	}
	return nil
}

// Mknod implements Provider: os.Root cannot make special files, so this
// RealFS makes none (EPERM); devices are refused first, as everywhere.
func (r *rootFS) Mknod(ctx context.Context, p string, mode fs.FileMode) error {
	if err := CheckMknod(mode); err != nil {
		return err
	}
	if _, err := r.rel(p); err != nil {
		return err
	}
	return syscall.EPERM
}

func (r *rootFS) Readlink(ctx context.Context, p string) (string, error) {
	rel, err := r.rel(p)
	if err != nil {
		return "", err
	}
	if fi, err := r.root.Lstat(rel); err != nil {
		return "", err
	} else if fi.Mode()&fs.ModeSymlink == 0 {
		return "", syscall.EINVAL
	}
	return r.root.Readlink(rel)
}

func (r *rootFS) Link(ctx context.Context, oldPath, newPath string) error {
	o, err := r.rel(oldPath)
	if err != nil {
		return err
	}
	n, err := r.rel(newPath)
	if err != nil {
		return err
	}
	return r.root.Link(o, n)
}

// notSymlink refuses, with EOPNOTSUPP, to change a symlink through a
// call that would follow it.
func (r *rootFS) notSymlink(p string) (string, error) {
	rel, err := r.rel(p)
	if err != nil {
		return "", err
	}
	fi, err := r.root.Lstat(rel)
	if err != nil {
		return "", err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return "", syscall.EOPNOTSUPP
	}
	return rel, nil
}

func (r *rootFS) Chmod(ctx context.Context, p string, mode fs.FileMode) error {
	rel, err := r.notSymlink(p)
	if err != nil {
		return err
	}
	fi, err := r.root.Lstat(rel)
	if err != nil {
		return err
	}
	return r.root.Chmod(rel, hostMode(mode, fi.Mode().IsRegular()))
}

// hostMode is mode as this provider gives it to a host file: never
// set-id for a regular file (no set-id program from a sandbox on the
// host; see the Linux provider).
func hostMode(mode fs.FileMode, regular bool) fs.FileMode {
	mode &= permBits
	if regular {
		mode &^= fs.ModeSetuid | fs.ModeSetgid
	}
	return mode
}

// killSetID clears the set-id bits of f, a regular file opened to be
// written, as the kernel does for a writer without CAP_FSETID.
func killSetID(f *os.File) error {
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid) == 0 {
		return err
	}
	return f.Chmod(hostMode(fi.Mode(), true))
}

func (r *rootFS) Chown(ctx context.Context, p string, uid, gid int) error {
	rel, err := r.rel(p)
	if err != nil {
		return err
	}
	return r.root.Lchown(rel, uid, gid)
}

func (r *rootFS) Truncate(ctx context.Context, p string, size int64) error {
	rel, err := r.notSymlink(p)
	if err != nil {
		if err == syscall.EOPNOTSUPP {
			return syscall.EINVAL
		}
		return err
	}
	f, err := r.root.OpenFile(rel, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := killSetID(f); err != nil {
		return err
	}
	return f.Truncate(size)
}

func (r *rootFS) Utimens(ctx context.Context, p string, atime, mtime *time.Time) error {
	rel, err := r.notSymlink(p)
	if err != nil {
		return err
	}
	fi, err := r.Stat(ctx, p)
	if err != nil {
		return err
	}
	a, m := fi.ATime, fi.ModTime
	if a.IsZero() {
		a = m
	}
	if atime != nil {
		a = *atime
	}
	if mtime != nil {
		m = *mtime
	}
	return r.root.Chtimes(rel, a, m)
}

func (r *rootFS) Statfs(ctx context.Context, _ string) (StatFS, error) {
	return statfsRoot(r.root)
}

// rootHandle is an open host file.
type rootHandle struct {
	f      *os.File
	append bool
}

func (h *rootHandle) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	return h.f.ReadAt(p, off)
}

func (h *rootHandle) WriteAt(ctx context.Context, p []byte, off int64) (int, error) {
	if h.append {
		return h.f.Write(p)
	}
	return h.f.WriteAt(p, off)
}

func (h *rootHandle) Stat(ctx context.Context) (FileInfo, error) {
	fi, err := h.f.Stat()
	if err != nil {
		return FileInfo{}, err
	}
	_, name := splitPath(h.f.Name())
	return fromOS(name, fi), nil
}

func (h *rootHandle) Truncate(ctx context.Context, size int64) error { return h.f.Truncate(size) }
func (h *rootHandle) Sync(ctx context.Context) error                 { return h.f.Sync() }
func (h *rootHandle) Close() error                                   { return h.f.Close() }

func (h *rootHandle) hostFile() *os.File { return h.f }
