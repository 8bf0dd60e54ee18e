package vfs

import (
	"context"
	"io/fs"
	"path"
	"slices"
	"strings"
	"syscall"
	"time"
)

// NewMountRouter returns one tree made of providers mounted at paths.
// Keys are mount points, cleaned as absolute paths; nil providers are
// skipped. A path is served by the mount with the longest mount point
// that holds it, given the rest of the path. Without a mount at "/" the
// root is an empty read-only directory. Mount points, and the
// directories leading to them, show as directories in their parents'
// listings (made up, mode 0755 and owned by root, where the parent's
// provider has none) and cannot be removed or renamed (EBUSY). Rename and
// Link between two mounts fail with EXDEV.
//
// Inode numbers carry the mount's index in their top 16 bits, so that
// mounts do not share them; made-up directories have 0. Statfs describes
// the provider of the mount that holds the path. Watch reports the
// changes of every mount, with their full paths.
func NewMountRouter(mounts map[string]Provider) Provider {
	r := &mountRouter{}
	for at, p := range mounts {
		if p == nil {
			continue
		}
		r.mounts = append(r.mounts, mount{at: path.Clean("/" + at), p: p})
	}
	if !slices.ContainsFunc(r.mounts, func(m mount) bool { return m.at == "/" }) {
		r.mounts = append(r.mounts, mount{at: "/", p: NewReadonly(NewMemory(MemoryOptions{MaxBytes: 1, MaxInodes: 1}))})
	}
	// Equal keys after cleaning keep one, the first sorted.
	sortMounts(r.mounts)
	r.mounts = slices.CompactFunc(r.mounts, func(a, b mount) bool { return a.at == b.at })
	for i := range r.mounts {
		r.mounts[i].idx = uint64(i + 1)
	}
	return r
}

// sortMounts sorts mounts longest mount point first, as route wants.
func sortMounts(mounts []mount) {
	slices.SortFunc(mounts, func(a, b mount) int {
		if len(a.at) != len(b.at) {
			return len(b.at) - len(a.at)
		}
		return strings.Compare(a.at, b.at)
	})
}

type mountRouter struct {
	mounts []mount // longest mount point first
}

type mount struct {
	at  string
	p   Provider
	idx uint64
}

// route finds the mount that serves p and the path within it.
func (r *mountRouter) route(p string) (mount, string) {
	for _, m := range r.mounts {
		if isWithin(p, m.at) {
			if m.at == "/" {
				return m, p
			}
			if p == m.at {
				return m, "/"
			}
			return m, p[len(m.at):]
		}
	}
	return r.mounts[len(r.mounts)-1], p // unreachable: "/" holds all
}

func (r *mountRouter) isMountPoint(p string) bool {
	return slices.ContainsFunc(r.mounts, func(m mount) bool { return m.at == p })
}

// leadsToMount reports whether p is a strict ancestor of a mount point.
func (r *mountRouter) leadsToMount(p string) bool {
	return slices.ContainsFunc(r.mounts, func(m mount) bool { return m.at != p && isWithin(m.at, p) })
}

// pinned reports whether p may not be removed or replaced.
func (r *mountRouter) pinned(p string) bool { return r.isMountPoint(p) || r.leadsToMount(p) }

func (m mount) mapInfo(fi FileInfo) FileInfo {
	if fi.Ino != 0 {
		fi.Ino = fi.Ino&(1<<48-1) | m.idx<<48
	}
	return fi
}

func synthDir(name string) FileInfo {
	return FileInfo{Name: name, Mode: fs.ModeDir | 0o755, Nlink: 2}
}

func (r *mountRouter) Readonly() bool {
	for _, m := range r.mounts {
		if !m.p.Readonly() {
			return false
		}
	}
	return true
}

func (r *mountRouter) Stat(ctx context.Context, p string) (FileInfo, error) {
	m, sub := r.route(p)
	fi, err := m.p.Stat(ctx, sub)
	_, name := splitPath(p)
	if r.leadsToMount(p) && (err != nil || !fi.IsDir()) {
		return synthDir(name), nil
	}
	if err != nil {
		return FileInfo{}, err
	}
	fi.Name = name
	return m.mapInfo(fi), nil
}

func (r *mountRouter) Readdir(ctx context.Context, p string) ([]FileInfo, error) {
	m, sub := r.route(p)
	list, err := m.p.Readdir(ctx, sub)
	if err != nil {
		if !r.leadsToMount(p) {
			return nil, err
		}
		list = nil
	}
	out := make([]FileInfo, 0, len(list))
	for _, fi := range list {
		out = append(out, m.mapInfo(fi))
	}
	// Mount points and the directories leading to them, below p.
	for _, mt := range r.mounts {
		if mt.at == p || !isWithin(mt.at, p) {
			continue
		}
		rest := strings.TrimPrefix(mt.at[len(p):], "/")
		name, _, _ := strings.Cut(rest, "/")
		fi, err := r.Stat(ctx, joinPath(p, name))
		if err != nil {
			fi = synthDir(name)
		}
		i := slices.IndexFunc(out, func(e FileInfo) bool { return e.Name == name })
		if i >= 0 {
			out[i] = fi
		} else {
			out = append(out, fi)
		}
	}
	slices.SortFunc(out, func(a, b FileInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// fix turns the failure to make p inside a made-up directory into EROFS.
func (r *mountRouter) fix(p string, err error) error {
	if err == nil {
		return nil
	}
	if e := Errno(err); e == syscall.ENOENT || e == syscall.ENOTDIR {
		if dir, _ := splitPath(p); r.leadsToMount(dir) && !r.isMountPoint(dir) {
			return syscall.EROFS
		}
	}
	return err
}

func (r *mountRouter) Open(ctx context.Context, p string, flags int, mode fs.FileMode) (Handle, error) {
	m, sub := r.route(p)
	h, err := m.p.Open(ctx, sub, flags, mode)
	if err != nil {
		return nil, r.fix(p, err)
	}
	return routerHandle{h, m}, nil
}

func (r *mountRouter) Create(ctx context.Context, p string, mode fs.FileMode) (Handle, error) {
	m, sub := r.route(p)
	h, err := m.p.Create(ctx, sub, mode)
	if err != nil {
		return nil, r.fix(p, err)
	}
	return routerHandle{h, m}, nil
}

func (r *mountRouter) Mkdir(ctx context.Context, p string, mode fs.FileMode) error {
	if r.pinned(p) {
		return syscall.EEXIST
	}
	m, sub := r.route(p)
	return r.fix(p, m.p.Mkdir(ctx, sub, mode))
}

func (r *mountRouter) Remove(ctx context.Context, p string) error {
	if r.pinned(p) {
		return syscall.EBUSY
	}
	m, sub := r.route(p)
	return m.p.Remove(ctx, sub)
}

// pair routes two paths that must be on one mount.
func (r *mountRouter) pair(oldPath, newPath string) (Provider, string, string, error) {
	mo, so := r.route(oldPath)
	mn, sn := r.route(newPath)
	if mo.at != mn.at {
		return nil, "", "", syscall.EXDEV
	}
	return mo.p, so, sn, nil
}

func (r *mountRouter) Rename(ctx context.Context, oldPath, newPath string) error {
	if r.pinned(oldPath) || r.pinned(newPath) {
		return syscall.EBUSY
	}
	p, so, sn, err := r.pair(oldPath, newPath)
	if err != nil {
		return err
	}
	return r.fix(newPath, p.Rename(ctx, so, sn))
}

func (r *mountRouter) Symlink(ctx context.Context, target, link string) error {
	if r.pinned(link) {
		return syscall.EEXIST
	}
	m, sub := r.route(link)
	return r.fix(link, m.p.Symlink(ctx, target, sub))
}

func (r *mountRouter) Mknod(ctx context.Context, p string, mode fs.FileMode) error {
	if r.pinned(p) {
		return syscall.EEXIST
	}
	m, sub := r.route(p)
	return r.fix(p, m.p.Mknod(ctx, sub, mode))
}

func (r *mountRouter) Readlink(ctx context.Context, p string) (string, error) {
	m, sub := r.route(p)
	return m.p.Readlink(ctx, sub)
}

func (r *mountRouter) Link(ctx context.Context, oldPath, newPath string) error {
	if r.pinned(newPath) {
		return syscall.EEXIST
	}
	p, so, sn, err := r.pair(oldPath, newPath)
	if err != nil {
		return err
	}
	return r.fix(newPath, p.Link(ctx, so, sn))
}

func (r *mountRouter) Chmod(ctx context.Context, p string, mode fs.FileMode) error {
	m, sub := r.route(p)
	return m.p.Chmod(ctx, sub, mode)
}

func (r *mountRouter) Chown(ctx context.Context, p string, uid, gid int) error {
	m, sub := r.route(p)
	return m.p.Chown(ctx, sub, uid, gid)
}

func (r *mountRouter) Truncate(ctx context.Context, p string, size int64) error {
	m, sub := r.route(p)
	return m.p.Truncate(ctx, sub, size)
}

func (r *mountRouter) Utimens(ctx context.Context, p string, atime, mtime *time.Time) error {
	m, sub := r.route(p)
	return m.p.Utimens(ctx, sub, atime, mtime)
}

func (r *mountRouter) Statfs(ctx context.Context, p string) (StatFS, error) {
	m, sub := r.route(p)
	return m.p.Statfs(ctx, sub)
}

// Watch implements Watcher.
func (r *mountRouter) Watch(fn func(path string)) (stop func()) {
	var stops []func()
	for _, m := range r.mounts {
		stops = append(stops, watchOf(m.p, func(sub string) {
			if m.at == "/" {
				fn(sub)
			} else if sub == "/" {
				fn(m.at)
			} else {
				fn(m.at + sub)
			}
		}))
	}
	return func() {
		for _, s := range stops {
			s()
		}
	}
}

type routerHandle struct {
	Handle
	m mount
}

func (h routerHandle) Stat(ctx context.Context) (FileInfo, error) {
	fi, err := h.Handle.Stat(ctx)
	return h.m.mapInfo(fi), err
}
