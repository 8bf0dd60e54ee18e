package vfs

import (
	"context"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// MountTable is a provider whose root lists providers that are mounted
// and unmounted while it is served: "/name" is the root of the provider
// mounted as name. Its root itself is read-only (mount points cannot be
// made, removed or renamed from inside: EROFS, EBUSY), and Rename and
// Link between two mounts fail with EXDEV. A mount's inode numbers carry
// an index of its own, kept for its life, in their top 16 bits. Watch
// reports each mount and unmount, and every change its providers report,
// with full paths, so that a sandbox's kernel sees a new mount at once.
//
// It is safe for concurrent use; an operation under way when its mount
// is unmounted finishes on the provider it started on.
type MountTable struct {
	// cur is the router of the current mounts: read without a lock on
	// every operation, replaced whole (under mu) on every change.
	cur      atomic.Pointer[mountRouter]
	mu       sync.Mutex
	mounts   map[string]tableEntry
	next     uint64
	watchers map[int]*tableWatcher
	nextW    int
}

type tableEntry struct {
	p   Provider
	idx uint64
}

type tableWatcher struct {
	fn   func(string)
	stop func()
}

// maxTableMounts bounds the mounts of one table: inode numbers keep 16
// bits for a mount's index.
const maxTableMounts = 1<<16 - 2

// NewMountTable returns an empty mount table.
func NewMountTable() *MountTable {
	t := &MountTable{mounts: map[string]tableEntry{}, watchers: map[int]*tableWatcher{}}
	t.rebuild()
	return t
}

// Mount mounts p as name: one path component, not "." or "..". A name
// in use is EEXIST.
func (t *MountTable) Mount(name string, p Provider) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") || len(name) > 255 {
		return fmt.Errorf("mount %q: a mount's name is one path component: %w", name, syscall.EINVAL)
	}
	if p == nil {
		return fmt.Errorf("mount %q: no provider: %w", name, syscall.EINVAL)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.mounts[name]; ok {
		return fmt.Errorf("mount %q: %w", name, syscall.EEXIST)
	}
	if len(t.mounts) >= maxTableMounts {
		return fmt.Errorf("mount %q: %d mounts already: %w", name, len(t.mounts), syscall.ENOSPC)
	}
	// Indexes 0 (made-up directories) and 1 (the root) are taken; a
	// freed one comes back only after all the others were used.
	for {
		t.next = t.next%maxTableMounts + 2
		if !t.indexUsed(t.next) {
			break
		}
	}
	t.mounts[name] = tableEntry{p: p, idx: t.next}
	t.rebuild()
	t.changed("/" + name)
	return nil
}

func (t *MountTable) indexUsed(idx uint64) bool {
	for _, e := range t.mounts {
		if e.idx == idx {
			return true
		}
	}
	return false
}

// Unmount unmounts name; one not mounted is ENOENT.
func (t *MountTable) Unmount(name string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.mounts[name]; !ok {
		return fmt.Errorf("unmount %q: %w", name, syscall.ENOENT)
	}
	delete(t.mounts, name)
	t.rebuild()
	t.changed("/" + name)
	return nil
}

// rebuild makes the router of the current mounts and moves the watchers
// to it. t.mu is held.
func (t *MountTable) rebuild() {
	r := &mountRouter{mounts: []mount{{at: "/", p: NewReadonly(NewMemory(MemoryOptions{MaxBytes: 1, MaxInodes: 1})), idx: 1}}}
	for name, e := range t.mounts {
		r.mounts = append(r.mounts, mount{at: "/" + name, p: e.p, idx: e.idx})
	}
	// Longest first, as route wants; the root last.
	sortMounts(r.mounts)
	t.cur.Store(r)
	for _, w := range t.watchers {
		w.stop()
		w.stop = r.Watch(w.fn)
	}
}

// changed tells the watchers that p changed. t.mu is held.
func (t *MountTable) changed(p string) {
	for _, w := range t.watchers {
		w.fn(p)
	}
}

func (t *MountTable) router() *mountRouter { return t.cur.Load() }

// Watch implements Watcher.
func (t *MountTable) Watch(fn func(path string)) (stop func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	id := t.nextW
	t.nextW++
	t.watchers[id] = &tableWatcher{fn: fn, stop: t.cur.Load().Watch(fn)}
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if w, ok := t.watchers[id]; ok {
			w.stop()
			delete(t.watchers, id)
		}
	}
}

func (t *MountTable) Readonly() bool { return false }

func (t *MountTable) Stat(ctx context.Context, p string) (FileInfo, error) {
	return t.router().Stat(ctx, p)
}

func (t *MountTable) Readdir(ctx context.Context, p string) ([]FileInfo, error) {
	return t.router().Readdir(ctx, p)
}

func (t *MountTable) Open(ctx context.Context, p string, flags int, mode fs.FileMode) (Handle, error) {
	return t.router().Open(ctx, p, flags, mode)
}

func (t *MountTable) Create(ctx context.Context, p string, mode fs.FileMode) (Handle, error) {
	return t.router().Create(ctx, p, mode)
}

func (t *MountTable) Mkdir(ctx context.Context, p string, mode fs.FileMode) error {
	return t.router().Mkdir(ctx, p, mode)
}

func (t *MountTable) Remove(ctx context.Context, p string) error {
	return t.router().Remove(ctx, p)
}

func (t *MountTable) Rename(ctx context.Context, oldPath, newPath string) error {
	return t.router().Rename(ctx, oldPath, newPath)
}

func (t *MountTable) Symlink(ctx context.Context, target, link string) error {
	return t.router().Symlink(ctx, target, link)
}

func (t *MountTable) Readlink(ctx context.Context, p string) (string, error) {
	return t.router().Readlink(ctx, p)
}

func (t *MountTable) Mknod(ctx context.Context, p string, mode fs.FileMode) error {
	return t.router().Mknod(ctx, p, mode)
}

func (t *MountTable) Link(ctx context.Context, oldPath, newPath string) error {
	return t.router().Link(ctx, oldPath, newPath)
}

func (t *MountTable) Chmod(ctx context.Context, p string, mode fs.FileMode) error {
	return t.router().Chmod(ctx, p, mode)
}

func (t *MountTable) Chown(ctx context.Context, p string, uid, gid int) error {
	return t.router().Chown(ctx, p, uid, gid)
}

func (t *MountTable) Truncate(ctx context.Context, p string, size int64) error {
	return t.router().Truncate(ctx, p, size)
}

func (t *MountTable) Utimens(ctx context.Context, p string, atime, mtime *time.Time) error {
	return t.router().Utimens(ctx, p, atime, mtime)
}

// Statfs describes the mount that holds p.
func (t *MountTable) Statfs(ctx context.Context, p string) (StatFS, error) {
	return t.router().Statfs(ctx, p)
}
