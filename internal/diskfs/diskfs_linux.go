// Package diskfs makes the disk-backed writable tree of a sandbox whose
// disk is larger than memory allows: an ext4 filesystem in an unnamed
// file under a host directory, on a loop device, mounted detached with
// the new mount API so that the sandbox's agent can attach it in its own
// mount namespace (move_mount), as it attaches other trees the host
// gives it.
//
// Nothing is left behind when a sandbox ends, however it ends: the
// backing file never has a name (O_TMPFILE) or loses it at once, the loop
// device clears itself when its last user closes it (LO_FLAGS_AUTOCLEAR),
// and the mount and the loop device are held only by descriptors, which
// the kernel closes when their processes die.
//
// It is written on golang.org/x/sys/unix: no maintained Go library makes
// loop devices with LOOP_CONFIGURE and mounts with fsopen/fsmount.
package diskfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/fsctx"
)

// Spec describes a disk.
type Spec struct {
	// Dir holds the backing file and the cached filesystem templates. It
	// is created (0700) if missing, and must belong to the caller and be
	// writable by nobody else.
	Dir string
	// SizeBytes is the filesystem's size, reserved on Dir's filesystem
	// in full (a multiple of 4 KiB).
	SizeBytes int64
	// Inodes bounds the number of files and directories (ext4 rounds it
	// up to fill its block groups).
	Inodes int64
	// UID and GID own the filesystem's root directory.
	UID, GID int
	// Name labels the loop device (losetup shows it), for example the
	// sandbox's id.
	Name string
	// SetID lets set-id programs on the disk work (for the processes of
	// the mount namespace it is attached in); otherwise it is nosuid.
	SetID bool
}

// Disk is a mounted disk. Close it once the processes that use it are
// gone.
type Disk struct {
	mount *os.File
	loop  *os.File
}

// Mount is the detached mount of the disk's filesystem, nodev (and
// nosuid unless Spec.SetID), whose root directory belongs to Spec.UID and Spec.GID. It stays valid
// until Close.
func (d *Disk) Mount() *os.File { return d.mount }

// Close releases the disk: once no mount namespace holds the filesystem
// any more, it is unmounted, the loop device clears itself and the
// backing file's blocks are freed. Holding the descriptors until here
// keeps that work (tens of milliseconds: the loop device's queue is
// frozen) out of the exit of the sandbox's processes.
func (d *Disk) Close() error {
	return errors.Join(d.mount.Close(), d.loop.Close())
}

// Make creates, fills and mounts a disk as s describes.
func Make(ctx context.Context, s Spec) (_ *Disk, err error) {
	if s.SizeBytes <= 0 || s.SizeBytes%4096 != 0 || s.Inodes <= 0 {
		return nil, fmt.Errorf("disk of %d bytes and %d inodes: the size must be a positive multiple of 4 KiB and the inodes positive", s.SizeBytes, s.Inodes)
	}
	if err := privateDir(s.Dir); err != nil {
		return nil, err
	}
	tmpl, err := template(ctx, s.Dir, s.SizeBytes, s.Inodes)
	if err != nil {
		return nil, err
	}
	backing, err := newBacking(s.Dir, tmpl, s.SizeBytes)
	tmpl.Close()
	if err != nil {
		return nil, err
	}
	// The loop device keeps its own reference to the file.
	defer backing.Close()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	loop, dev, err := attachLoop(backing, s.Name)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			loop.Close()
		}
	}()
	mount, err := mountExt4(dev, s.SetID)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			mount.Close()
		}
	}()
	fd := int(mount.Fd())
	if err := unix.Fchownat(fd, "", s.UID, s.GID, unix.AT_EMPTY_PATH); err != nil {
		return nil, fmt.Errorf("give the disk's root directory to uid %d: %w", s.UID, err)
	}
	// mke2fs always makes one; a sandbox's root has no use for it.
	if err := unix.Unlinkat(fd, "lost+found", unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		return nil, fmt.Errorf("remove the disk's lost+found: %w", err)
	}
	return &Disk{mount: mount, loop: loop}, nil
}

// File returns an unnamed file in s.Dir holding an empty ext4 file
// system of s.SizeBytes (reserved in full) and s.Inodes, whose root
// directory belongs to root: a disk for a micro-VM, whose guest kernel
// mounts it. Nothing reaches it but the descriptor.
func File(ctx context.Context, s Spec) (*os.File, error) {
	if s.SizeBytes <= 0 || s.SizeBytes%4096 != 0 || s.Inodes <= 0 {
		return nil, fmt.Errorf("disk of %d bytes and %d inodes: the size must be a positive multiple of 4 KiB and the inodes positive", s.SizeBytes, s.Inodes)
	}
	if err := privateDir(s.Dir); err != nil {
		return nil, err
	}
	tmpl, err := template(ctx, s.Dir, s.SizeBytes, s.Inodes)
	if err != nil {
		return nil, err
	}
	defer tmpl.Close()
	return newBacking(s.Dir, tmpl, s.SizeBytes)
}

// privateDir makes dir (0700) if needed and checks that it is a directory
// of the caller's that no one else can write: the templates in it are
// read by the kernel's ext4 driver.
func privateDir(dir string) error {
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("disk directory %q must be absolute", dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("make the disk directory: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return fmt.Errorf("check the disk directory: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0 {
		return fmt.Errorf("disk directory %s must be a directory (not a symlink) of uid %d that no one else can write", dir, os.Geteuid())
	}
	return nil
}

// newBacking returns an unnamed file in dir with the template's content,
// size bytes long and reserved in full, so that a full host disk shows in
// the sandbox as its own full disk when it starts, never as I/O errors
// later.
func newBacking(dir string, tmpl *os.File, size int64) (*os.File, error) {
	f, err := unnamedFile(dir)
	if err != nil {
		return nil, err
	}
	if err := copyTemplate(f, tmpl, size); err != nil {
		f.Close()
		return nil, err
	}
	if err := unix.Fallocate(int(f.Fd()), 0, 0, size); err != nil {
		f.Close()
		if errors.Is(err, unix.ENOSPC) {
			var fs unix.Statfs_t
			free := int64(-1)
			if unix.Fstatfs(int(tmpl.Fd()), &fs) == nil {
				free = int64(fs.Bavail) * fs.Bsize >> 20
			}
			return nil, fmt.Errorf("reserve %d MiB for the disk in %s: the filesystem has %d MiB free: give a smaller --disk, or free space there", size>>20, dir, free)
		}
		return nil, fmt.Errorf("reserve %d MiB for the disk in %s: %w", size>>20, dir, err)
	}
	return f, nil
}

// unnamedFile opens a file in dir that no path reaches: O_TMPFILE, or,
// where the filesystem lacks it, a file removed as soon as it is made.
func unnamedFile(dir string) (*os.File, error) {
	fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err == nil {
		return os.NewFile(uintptr(fd), filepath.Join(dir, "(disk)")), nil
	}
	if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EINVAL) {
		return nil, fmt.Errorf("make the disk's file in %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, ".disk-*")
	if err != nil {
		return nil, fmt.Errorf("make the disk's file in %s: %w", dir, err)
	}
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return nil, fmt.Errorf("unlink the disk's file: %w", err)
	}
	return f, nil
}

// copyTemplate gives dst the content of the sparse template src: a
// reflink where the filesystem has them, otherwise a copy of its data
// extents only (a few MiB, whatever the size).
func copyTemplate(dst, src *os.File, size int64) error {
	if unix.IoctlFileClone(int(dst.Fd()), int(src.Fd())) == nil {
		return nil
	}
	if err := dst.Truncate(size); err != nil {
		return fmt.Errorf("size the disk's file: %w", err)
	}
	s, d := int(src.Fd()), int(dst.Fd())
	for off := int64(0); off < size; {
		data, err := unix.Seek(s, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			return nil // only a hole is left
		}
		if err != nil {
			return fmt.Errorf("read the disk template: %w", err)
		}
		hole, err := unix.Seek(s, data, unix.SEEK_HOLE)
		if err != nil {
			return fmt.Errorf("read the disk template: %w", err)
		}
		hole = min(hole, size)
		for r, w := data, data; r < hole; {
			n, err := unix.CopyFileRange(s, &r, d, &w, int(hole-r), 0)
			if err != nil {
				return fmt.Errorf("copy the disk template: %w", err)
			}
			if n == 0 {
				return fmt.Errorf("copy the disk template: it ended at %d of %d bytes", r, size)
			}
		}
		off = hole
	}
	return nil
}

// mountExt4 mounts the ext4 filesystem on dev, detached, nodev (and
// nosuid unless setID), without the background thread that zeroes inode
// tables (the backing file reads as zeros where nothing was written).
func mountExt4(dev string, setID bool) (*os.File, error) {
	fs, err := unix.Fsopen("ext4", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("mount the disk: fsopen ext4 (is ext4 in this kernel?): %w", err)
	}
	defer unix.Close(fs)
	if err := unix.FsconfigSetString(fs, "source", dev); err != nil {
		return nil, fmt.Errorf("mount the disk: source %s: %w", dev, fsctx.Err(fs, err))
	}
	if err := unix.FsconfigSetFlag(fs, "noinit_itable"); err != nil {
		return nil, fmt.Errorf("mount the disk: %w", fsctx.Err(fs, err))
	}
	if err := unix.FsconfigCreate(fs); err != nil {
		return nil, fmt.Errorf("mount the disk on %s: %w", dev, fsctx.Err(fs, err))
	}
	attrs := unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV
	if setID {
		attrs = unix.MOUNT_ATTR_NODEV
	}
	m, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, attrs)
	if err != nil {
		return nil, fmt.Errorf("mount the disk on %s: %w", dev, fsctx.Err(fs, err))
	}
	return os.NewFile(uintptr(m), dev), nil
}
