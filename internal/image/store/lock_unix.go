//go:build unix

package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/flock"
)

const oNoFollow = syscall.O_NOFOLLOW

// lock takes the flock of locks/<name>, waiting until it is free or ctx
// ends. flock is released by the kernel when its holder dies, so a
// maker killed half-way never leaves a key locked.
func (c *Cache) lock(ctx context.Context, name string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(c.dir, locksDir, name), os.O_RDWR|os.O_CREATE|oNoFollow|syscall.O_CLOEXEC, filePerm)
	if err != nil {
		return nil, fmt.Errorf("open the image cache's lock for %s: %w", name, err)
	}
	wait := 10 * time.Millisecond
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { flock.Release(f) }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			f.Close()
			return nil, fmt.Errorf("lock the image cache for %s: %w", name, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("wait for another maker of image %s: %w", name, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, 250*time.Millisecond)
	}
}

// tryLock takes the lock of locks/<name> if it is free now.
func (c *Cache) tryLock(name string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(c.dir, locksDir, name), os.O_RDWR|oNoFollow|syscall.O_CLOEXEC, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return func() {}, nil
	}
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, err
	}
	return func() { flock.Release(f) }, nil
}

// usePath is the use lock of the image with hex key h.
func (c *Cache) usePath(h string) string {
	return filepath.Join(c.dir, locksDir, useDir, h)
}

// share takes a shared flock on the use lock of the image with hex key
// h, waiting while a removal holds it or until ctx ends. A removal
// unlinks the lock file while it holds it, so a lock taken on a file
// that is no longer the one at its path is taken again on the new one.
func (c *Cache) share(ctx context.Context, h string) (func(), error) {
	p := c.usePath(h)
	wait := 5 * time.Millisecond
	for {
		f, err := os.OpenFile(p, os.O_RDONLY|os.O_CREATE|oNoFollow|syscall.O_CLOEXEC, filePerm)
		if err != nil {
			return nil, fmt.Errorf("open the use lock of image sha256:%s: %w", h, err)
		}
		err = unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB)
		if err == nil {
			if same, err := samePath(f, p); err != nil {
				f.Close()
				return nil, fmt.Errorf("check the use lock of image sha256:%s: %w", h, err)
			} else if same {
				return func() { flock.Release(f) }, nil
			}
			f.Close()
			continue
		}
		f.Close()
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			return nil, fmt.Errorf("lock image sha256:%s for use: %w", h, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for the removal of image sha256:%s to end: %w", h, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// samePath reports whether p still names the file f has open.
func samePath(f *os.File, p string) (bool, error) {
	fi, err := f.Stat()
	if err != nil {
		return false, err
	}
	pi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return os.SameFile(fi, pi), nil
}

// claim takes the use lock of the image with hex key h for itself, now
// or never: an error wrapping ErrInUse says that a sandbox holds it.
// Its release unlinks the lock file, so that locks/use/ keeps no file
// of an image that is gone; a user that opened it meanwhile finds it
// unlinked and takes the lock again on a new file (see share).
func (c *Cache) claim(h string) (func(), error) {
	p := c.usePath(h)
	for {
		f, err := os.OpenFile(p, os.O_RDONLY|os.O_CREATE|oNoFollow|syscall.O_CLOEXEC, filePerm)
		if err != nil {
			return nil, fmt.Errorf("open the use lock of image sha256:%s: %w", h, err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, ErrInUse
			}
			return nil, fmt.Errorf("lock image sha256:%s for removal: %w", h, err)
		}
		same, err := samePath(f, p)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("check the use lock of image sha256:%s: %w", h, err)
		}
		if !same {
			f.Close()
			continue
		}
		return func() {
			_ = os.Remove(p)
			flock.Release(f)
		}, nil
	}
}

// diskUsage is the bytes of disk a file takes, as du counts it (a hard
// link's are counted at each name; images rarely have many).
func diskUsage(fi fs.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int64(st.Blocks) * 512
	}
	return fi.Size()
}

// makeEROFS packs dir into the erofs file out with mkfs.erofs (Debian's
// erofs-utils), keeping owners, modes and extended attributes.
func (c *Cache) makeEROFS(ctx context.Context, dir, out string) error {
	bin, err := exec.LookPath("mkfs.erofs")
	if err != nil {
		return errors.New("mkfs.erofs is not installed (Debian: apt-get install erofs-utils)")
	}
	tmp := out + ".part"
	defer os.Remove(tmp)
	if b, err := c.owners.Run(ctx, bin, "--quiet", tmp, dir); err != nil {
		return fmt.Errorf("%w: %s", err, b)
	}
	return os.Rename(tmp, out)
}
