// Package mounts lays a sandbox's programmable mounts out: one provider
// for the sandbox's whole tree of mounts (a vfs.MountRouter keyed by
// sandbox path, so that hooks, events and blocked paths all see the
// paths the sandbox sees), cut into one view per outermost mount target,
// which the agent mounts with FUSE.
package mounts

import (
	"context"
	"io/fs"
	"path"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/vfs"
)

// Outermost returns the targets that lie inside no other target,
// sorted. A target inside another is served through the outer one's
// mount.
func Outermost(targets []string) []string {
	sorted := slices.Clone(targets)
	slices.Sort(sorted)
	var out []string
	for _, t := range sorted {
		if len(out) > 0 && Within(t, out[len(out)-1]) {
			continue
		}
		out = append(out, t)
	}
	return out
}

// Within reports whether p is dir or lies beneath it (both clean and
// absolute).
func Within(p, dir string) bool {
	return dir == "/" || p == dir || strings.HasPrefix(p, dir+"/")
}

// Sub is the view of p beneath prefix: path q of the view is
// prefix+q of p. Symlink targets are left as they are.
func Sub(p vfs.Provider, prefix string) vfs.Provider {
	return &sub{p: p, prefix: path.Clean(prefix)}
}

type sub struct {
	p      vfs.Provider
	prefix string
}

func (s *sub) at(q string) string {
	if q == "/" {
		return s.prefix
	}
	return s.prefix + q
}

func (s *sub) Readonly() bool { return s.p.Readonly() }
func (s *sub) Stat(ctx context.Context, q string) (vfs.FileInfo, error) {
	return s.p.Stat(ctx, s.at(q))
}
func (s *sub) Readdir(ctx context.Context, q string) ([]vfs.FileInfo, error) {
	return s.p.Readdir(ctx, s.at(q))
}
func (s *sub) Open(ctx context.Context, q string, flags int, mode fs.FileMode) (vfs.Handle, error) {
	return s.p.Open(ctx, s.at(q), flags, mode)
}
func (s *sub) Create(ctx context.Context, q string, mode fs.FileMode) (vfs.Handle, error) {
	return s.p.Create(ctx, s.at(q), mode)
}
func (s *sub) Mkdir(ctx context.Context, q string, mode fs.FileMode) error {
	return s.p.Mkdir(ctx, s.at(q), mode)
}
func (s *sub) Remove(ctx context.Context, q string) error { return s.p.Remove(ctx, s.at(q)) }
func (s *sub) Rename(ctx context.Context, from, to string) error {
	return s.p.Rename(ctx, s.at(from), s.at(to))
}
func (s *sub) Symlink(ctx context.Context, target, link string) error {
	return s.p.Symlink(ctx, target, s.at(link))
}
func (s *sub) Mknod(ctx context.Context, q string, mode fs.FileMode) error {
	return s.p.Mknod(ctx, s.at(q), mode)
}
func (s *sub) Readlink(ctx context.Context, q string) (string, error) {
	return s.p.Readlink(ctx, s.at(q))
}
func (s *sub) Link(ctx context.Context, from, to string) error {
	return s.p.Link(ctx, s.at(from), s.at(to))
}
func (s *sub) Chmod(ctx context.Context, q string, mode fs.FileMode) error {
	return s.p.Chmod(ctx, s.at(q), mode)
}
func (s *sub) Chown(ctx context.Context, q string, uid, gid int) error {
	return s.p.Chown(ctx, s.at(q), uid, gid)
}
func (s *sub) Truncate(ctx context.Context, q string, size int64) error {
	return s.p.Truncate(ctx, s.at(q), size)
}
func (s *sub) Utimens(ctx context.Context, q string, atime, mtime *time.Time) error {
	return s.p.Utimens(ctx, s.at(q), atime, mtime)
}
func (s *sub) Statfs(ctx context.Context, q string) (vfs.StatFS, error) {
	return s.p.Statfs(ctx, s.at(q))
}

// Block hides paths (clean and absolute) of p and everything beneath
// them: they do not exist (ENOENT), do not show in listings, and
// nothing can be made, linked or renamed there (EACCES).
func Block(p vfs.Provider, paths []string) vfs.Provider {
	if len(paths) == 0 {
		return p
	}
	return &blocker{p: p, paths: slices.Clone(paths)}
}

type blocker struct {
	p     vfs.Provider
	paths []string
}

func (b *blocker) blocked(q string) bool {
	for _, bp := range b.paths {
		if Within(q, bp) {
			return true
		}
	}
	return false
}

// check refuses a path that is blocked: ENOENT for one that is read,
// EACCES for one that would be made.
func (b *blocker) check(q string, made bool) error {
	if !b.blocked(q) {
		return nil
	}
	if made {
		return syscall.EACCES
	}
	return syscall.ENOENT
}

func (b *blocker) Readonly() bool { return b.p.Readonly() }
func (b *blocker) Stat(ctx context.Context, q string) (vfs.FileInfo, error) {
	if err := b.check(q, false); err != nil {
		return vfs.FileInfo{}, err
	}
	return b.p.Stat(ctx, q)
}
func (b *blocker) Readdir(ctx context.Context, q string) ([]vfs.FileInfo, error) {
	if err := b.check(q, false); err != nil {
		return nil, err
	}
	list, err := b.p.Readdir(ctx, q)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(list, func(fi vfs.FileInfo) bool { return b.blocked(path.Join(q, fi.Name)) }), nil
}
func (b *blocker) Open(ctx context.Context, q string, flags int, mode fs.FileMode) (vfs.Handle, error) {
	if err := b.check(q, flags&syscall.O_CREAT != 0); err != nil {
		return nil, err
	}
	return b.p.Open(ctx, q, flags, mode)
}
func (b *blocker) Create(ctx context.Context, q string, mode fs.FileMode) (vfs.Handle, error) {
	if err := b.check(q, true); err != nil {
		return nil, err
	}
	return b.p.Create(ctx, q, mode)
}
func (b *blocker) Mkdir(ctx context.Context, q string, mode fs.FileMode) error {
	if err := b.check(q, true); err != nil {
		return err
	}
	return b.p.Mkdir(ctx, q, mode)
}
func (b *blocker) Remove(ctx context.Context, q string) error {
	if err := b.check(q, false); err != nil {
		return err
	}
	return b.p.Remove(ctx, q)
}
func (b *blocker) Rename(ctx context.Context, from, to string) error {
	if err := b.check(from, false); err != nil {
		return err
	}
	if err := b.check(to, true); err != nil {
		return err
	}
	return b.p.Rename(ctx, from, to)
}
func (b *blocker) Symlink(ctx context.Context, target, link string) error {
	if err := b.check(link, true); err != nil {
		return err
	}
	return b.p.Symlink(ctx, target, link)
}
func (b *blocker) Mknod(ctx context.Context, q string, mode fs.FileMode) error {
	if err := b.check(q, true); err != nil {
		return err
	}
	return b.p.Mknod(ctx, q, mode)
}
func (b *blocker) Readlink(ctx context.Context, q string) (string, error) {
	if err := b.check(q, false); err != nil {
		return "", err
	}
	return b.p.Readlink(ctx, q)
}
func (b *blocker) Link(ctx context.Context, from, to string) error {
	if err := b.check(from, false); err != nil {
		return err
	}
	if err := b.check(to, true); err != nil {
		return err
	}
	return b.p.Link(ctx, from, to)
}
func (b *blocker) Chmod(ctx context.Context, q string, mode fs.FileMode) error {
	if err := b.check(q, false); err != nil {
		return err
	}
	return b.p.Chmod(ctx, q, mode)
}
func (b *blocker) Chown(ctx context.Context, q string, uid, gid int) error {
	if err := b.check(q, false); err != nil {
		return err
	}
	return b.p.Chown(ctx, q, uid, gid)
}
func (b *blocker) Truncate(ctx context.Context, q string, size int64) error {
	if err := b.check(q, false); err != nil {
		return err
	}
	return b.p.Truncate(ctx, q, size)
}
func (b *blocker) Utimens(ctx context.Context, q string, atime, mtime *time.Time) error {
	if err := b.check(q, false); err != nil {
		return err
	}
	return b.p.Utimens(ctx, q, atime, mtime)
}
func (b *blocker) Statfs(ctx context.Context, q string) (vfs.StatFS, error) {
	if err := b.check(q, false); err != nil {
		return vfs.StatFS{}, err
	}
	return b.p.Statfs(ctx, q)
}
