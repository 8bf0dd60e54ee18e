//go:build unix

package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// LinkTree makes dst, which must not exist, a copy of the tree at src
// in which every file other than a directory is a hard link to src's:
// directories are made anew with src's modes, owners (when the caller
// may set them) and times; symbolic links are linked, never followed.
// Both trees then share their files, so neither may be written: they
// are image trees, used read-only. A file that has as many links as its
// filesystem allows is copied instead.
func LinkTree(ctx context.Context, src, dst string) error {
	sfd, err := unix.Open(src, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", src, err)
	}
	defer unix.Close(sfd)
	fi, err := fstat(sfd, src)
	if err != nil {
		return err
	}
	if err := os.Mkdir(dst, 0o700); err != nil {
		return err
	}
	dfd, err := unix.Open(dst, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", dst, err)
	}
	defer unix.Close(dfd)
	l := &linker{ctx: ctx, owners: os.Geteuid() == 0}
	if err := l.dir(sfd, dfd, src); err != nil {
		return err
	}
	return l.attrs(unix.AT_FDCWD, dst, dfd, fi, dst)
}

// fstat is the file info of fd.
func fstat(fd int, p string) (fs.FileInfo, error) {
	d, err := unix.Dup(fd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(d), p)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat %s: %w", p, err)
	}
	return fi, nil
}

type linker struct {
	ctx    context.Context
	owners bool
}

// dir links the entries of the directory sfd into dfd; p names sfd in
// errors.
func (l *linker) dir(sfd, dfd int, p string) error {
	if err := l.ctx.Err(); err != nil {
		return err
	}
	// The directory's own descriptor is the walk's: a dup is read, so
	// that sfd stays usable for the *at calls.
	rfd, err := unix.Dup(sfd)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(rfd), p)
	defer f.Close()
	for {
		ents, err := f.ReadDir(1024)
		for _, e := range ents {
			name := e.Name()
			if !e.IsDir() {
				if err := l.link(sfd, dfd, name, p); err != nil {
					return err
				}
				continue
			}
			if err := l.subdir(sfd, dfd, name, filepath.Join(p, name)); err != nil {
				return err
			}
		}
		if errors.Is(err, io.EOF) || err == nil && len(ents) == 0 {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", p, err)
		}
	}
}

// subdir makes the directory name in dfd and links src's name's
// entries into it.
func (l *linker) subdir(sfd, dfd int, name, p string) error {
	cs, err := unix.Openat(sfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", p, err)
	}
	defer unix.Close(cs)
	fi, err := fstat(cs, p)
	if err != nil {
		return err
	}
	if err := unix.Mkdirat(dfd, name, 0o700); err != nil {
		return fmt.Errorf("make a copy of %s: %w", p, err)
	}
	cd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the copy of %s: %w", p, err)
	}
	defer unix.Close(cd)
	if err := l.dir(cs, cd, p); err != nil {
		return err
	}
	return l.attrs(dfd, name, cd, fi, p)
}

// attrs gives fd, which is name in the directory dirfd, the owner,
// mode and modification time of fi (its access time too), once its
// entries are in.
func (l *linker) attrs(dirfd int, name string, fd int, fi fs.FileInfo, p string) error {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && l.owners {
		if err := unix.Fchown(fd, int(st.Uid), int(st.Gid)); err != nil {
			return fmt.Errorf("own the copy of %s: %w", p, err)
		}
	}
	// After the owner: chown clears setuid and setgid.
	mode := uint32(fi.Mode().Perm())
	if fi.Mode()&fs.ModeSetuid != 0 {
		mode |= unix.S_ISUID
	}
	if fi.Mode()&fs.ModeSetgid != 0 {
		mode |= unix.S_ISGID
	}
	if fi.Mode()&fs.ModeSticky != 0 {
		mode |= unix.S_ISVTX
	}
	if err := unix.Fchmod(fd, mode); err != nil {
		return fmt.Errorf("set the mode of the copy of %s: %w", p, err)
	}
	t := unix.NsecToTimespec(fi.ModTime().UnixNano())
	if err := unix.UtimesNanoAt(dirfd, name, []unix.Timespec{t, t}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("set the times of the copy of %s: %w", p, err)
	}
	return nil
}

// link links the entry name of sfd into dfd, or copies it when it has
// too many links already.
func (l *linker) link(sfd, dfd int, name, p string) error {
	err := unix.Linkat(sfd, name, dfd, name, 0)
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.EMLINK) {
		return fmt.Errorf("link %s: %w", filepath.Join(p, name), err)
	}
	return l.copyFile(sfd, dfd, name, filepath.Join(p, name))
}

// copyFile copies the regular file name of sfd into dfd, with its
// owner, mode and times.
func (l *linker) copyFile(sfd, dfd int, name, p string) error {
	in, err := unix.Openat(sfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("copy %s, which has too many links: %w", p, err)
	}
	fin := os.NewFile(uintptr(in), p)
	defer fin.Close()
	fi, err := fin.Stat()
	if err != nil {
		return fmt.Errorf("stat %s: %w", p, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("link %s: %w", p, unix.EMLINK)
	}
	out, err := unix.Openat(dfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("copy %s: %w", p, err)
	}
	fout := os.NewFile(uintptr(out), p)
	defer fout.Close()
	if _, err := io.Copy(fout, fin); err != nil {
		return fmt.Errorf("copy %s: %w", p, err)
	}
	return l.attrs(dfd, name, out, fi, p)
}
