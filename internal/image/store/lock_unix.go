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
			return func() { f.Close() }, nil
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
	return func() { f.Close() }, nil
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
func makeEROFS(ctx context.Context, dir, out string) error {
	bin, err := exec.LookPath("mkfs.erofs")
	if err != nil {
		return errors.New("mkfs.erofs is not installed (Debian: apt-get install erofs-utils)")
	}
	tmp := out + ".part"
	defer os.Remove(tmp)
	cmd := exec.CommandContext(ctx, bin, "--quiet", tmp, dir)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("mkfs.erofs: %w: %s", err, b)
	}
	return os.Rename(tmp, out)
}
