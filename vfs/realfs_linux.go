//go:build linux

package vfs

import (
	"context"
	"io/fs"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// resolveFlags confine every lookup to the provider's directory: no
// symlink is followed on the way (a symlink in the middle of a path is
// ELOOP, as the Provider contract wants), so neither "..", absolute
// symlinks nor a symlink swapped in during the lookup can lead outside.
const resolveFlags = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// realFS serves a host directory. Every operation resolves the parent
// directory of its path with openat2 under resolveFlags, then acts on the
// last name relative to that directory without following it.
type realFS struct {
	fd     int // O_PATH descriptor of the directory
	dir    string
	asRoot bool
}

// NewRealFS returns a Provider that serves the host directory hostDir.
// Nothing outside hostDir is reachable through it, whatever the paths,
// symlinks or concurrent renames: lookups use openat2 with
// RESOLVE_BENEATH and RESOLVE_NO_SYMLINKS. Owners are the host's ids as
// they are; when the process is root, new files are given the caller's
// owner (CallerFrom). It never makes a regular file set-user-ID or
// set-group-ID, and a regular file opened to be written or truncated
// loses those bits: a directory shared with a sandbox never gains a
// set-id program from it, even when the provider is root. Handles are
// host file descriptors. The provider holds a descriptor of hostDir,
// which its Close method (io.Closer) releases.
func NewRealFS(hostDir string) (Provider, error) {
	fd, err := unix.Open(hostDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: hostDir, Err: err}
	}
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: resolveFlags}
	probe, err := unix.Openat2(fd, ".", &how)
	if err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "openat2", Path: hostDir, Err: err}
	}
	unix.Close(probe)
	return &realFS{fd: fd, dir: hostDir, asRoot: os.Geteuid() == 0}, nil
}

// Close releases the descriptor of the directory.
func (r *realFS) Close() error { return unix.Close(r.fd) }

func (r *realFS) Readonly() bool { return false }

// pathMax is the longest path one system call takes, its NUL included.
const pathMax = unix.PathMax

// openat2 opens a clean path under the directory. A path too long for
// one call (a provider's may be, MaxPath) is resolved a part at a time,
// each part of whole names beneath the directory the part before led
// to, all with resolveFlags.
func (r *realFS) openat2(p string, flags int, mode uint32) (int, error) {
	if _, err := CleanPath(p); err != nil {
		return -1, err
	}
	rel := "."
	if p != "/" {
		rel = p[1:]
	}
	dfd := r.fd
	for len(rel) >= pathMax {
		// Names are at most MaxName bytes: a slash is near the end.
		i := strings.LastIndexByte(rel[:pathMax-1], '/')
		if i <= 0 {
			return -1, syscall.ENAMETOOLONG
		}
		fd, err := openat2Beneath(dfd, rel[:i], unix.O_PATH|unix.O_DIRECTORY, 0)
		if dfd != r.fd {
			unix.Close(dfd)
		}
		if err != nil {
			return -1, err
		}
		dfd, rel = fd, rel[i+1:]
	}
	fd, err := openat2Beneath(dfd, rel, flags, mode)
	if dfd != r.fd {
		unix.Close(dfd)
	}
	return fd, err
}

// openat2Beneath opens rel beneath the directory dfd with resolveFlags.
func openat2Beneath(dfd int, rel string, flags int, mode uint32) (int, error) {
	how := unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Mode: uint64(mode), Resolve: resolveFlags}
	for range 64 {
		fd, err := unix.Openat2(dfd, rel, &how)
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		return fd, err
	}
	return -1, syscall.EAGAIN
}

// parent opens the directory that holds p's last name and returns it
// with the name; for "/" it returns the directory itself and ".". The
// caller closes the descriptor with done.
func (r *realFS) parent(p string) (dfd int, name string, done func(), err error) {
	if p == "/" {
		return r.fd, ".", func() {}, nil
	}
	dir, name := splitPath(p)
	dfd, err = r.openat2(dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return -1, "", nil, err
	}
	return dfd, name, func() { unix.Close(dfd) }, nil
}

// at runs fn with the parent directory and last name of p.
func (r *realFS) at(p string, fn func(dfd int, name string) error) error {
	dfd, name, done, err := r.parent(p)
	if err != nil {
		return err
	}
	defer done()
	return fn(dfd, name)
}

func fileModeFromUnix(m uint32) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	switch m & unix.S_IFMT {
	case unix.S_IFDIR:
		mode |= fs.ModeDir
	case unix.S_IFLNK:
		mode |= fs.ModeSymlink
	case unix.S_IFIFO:
		mode |= fs.ModeNamedPipe
	case unix.S_IFSOCK:
		mode |= fs.ModeSocket
	case unix.S_IFCHR:
		mode |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		mode |= fs.ModeDevice
	}
	if m&unix.S_ISUID != 0 {
		mode |= fs.ModeSetuid
	}
	if m&unix.S_ISGID != 0 {
		mode |= fs.ModeSetgid
	}
	if m&unix.S_ISVTX != 0 {
		mode |= fs.ModeSticky
	}
	return mode
}

func unixPerm(mode fs.FileMode) uint32 {
	m := uint32(mode.Perm())
	if mode&fs.ModeSetuid != 0 {
		m |= unix.S_ISUID
	}
	if mode&fs.ModeSetgid != 0 {
		m |= unix.S_ISGID
	}
	if mode&fs.ModeSticky != 0 {
		m |= unix.S_ISVTX
	}
	return m
}

// setID are the bits that make a program run as its owner or group.
const setID = unix.S_ISUID | unix.S_ISGID

// killSetID clears the set-id bits of regular file fd, as the kernel
// does for a writer without CAP_FSETID (set-group-ID only with group
// execute): a file a sandbox writes through this provider never stays a
// set-id program, even though the provider itself may be root.
func killSetID(fd int, st *unix.Stat_t) error {
	kill := st.Mode & unix.S_ISUID
	if st.Mode&unix.S_IXGRP != 0 {
		kill |= st.Mode & unix.S_ISGID
	}
	if kill == 0 || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil
	}
	return unix.Fchmod(fd, st.Mode&07777&^kill)
}

func infoFromStat(name string, st *unix.Stat_t) FileInfo {
	return FileInfo{
		Name:    name,
		Size:    st.Size,
		Mode:    fileModeFromUnix(st.Mode),
		ModTime: time.Unix(st.Mtim.Unix()),
		ATime:   time.Unix(st.Atim.Unix()),
		CTime:   time.Unix(st.Ctim.Unix()),
		UID:     st.Uid,
		GID:     st.Gid,
		Nlink:   uint32(st.Nlink),
		Ino:     st.Ino,
		Blocks:  st.Blocks,
	}
}

func (r *realFS) Stat(ctx context.Context, p string) (FileInfo, error) {
	var fi FileInfo
	err := r.at(p, func(dfd int, name string) error {
		var st unix.Stat_t
		if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		_, base := splitPath(p)
		fi = infoFromStat(base, &st)
		return nil
	})
	return fi, err
}

func (r *realFS) Readdir(ctx context.Context, p string) ([]FileInfo, error) {
	fd, err := r.openat2(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, Errno(err)
	}
	slices.Sort(names)
	out := make([]FileInfo, 0, len(names))
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	var serr error
	err = rc.Control(func(dfd uintptr) {
		for _, name := range names {
			var st unix.Stat_t
			switch err := unix.Fstatat(int(dfd), name, &st, unix.AT_SYMLINK_NOFOLLOW); err {
			case nil:
				out = append(out, infoFromStat(name, &st))
			case unix.ENOENT:
			default:
				serr = err
				return
			}
		}
	})
	if err == nil {
		err = serr
	}
	return out, err
}

func (r *realFS) Create(ctx context.Context, p string, mode fs.FileMode) (Handle, error) {
	return r.Open(ctx, p, os.O_RDWR|os.O_CREATE|os.O_TRUNC, mode)
}

// openFlags are the open flags a caller may pass.
const openFlags = unix.O_ACCMODE | unix.O_CREAT | unix.O_EXCL | unix.O_TRUNC | unix.O_APPEND | unix.O_SYNC | unix.O_DSYNC | unix.O_DIRECTORY

func (r *realFS) Open(ctx context.Context, p string, flags int, mode fs.FileMode) (Handle, error) {
	flags = flags&openFlags | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC
	if p == "/" && flags&unix.O_CREAT != 0 && flags&unix.O_EXCL != 0 {
		return nil, syscall.EEXIST
	}
	dfd, name, done, err := r.parent(p)
	if err != nil {
		return nil, err
	}
	defer done()
	var fd int
	created := false
	switch {
	case flags&unix.O_CREAT != 0 && flags&unix.O_EXCL == 0:
		// Learn whether the file is made, to give it its owner.
		for range 64 {
			fd, err = unix.Openat(dfd, name, flags|unix.O_EXCL, unixPerm(mode)&^setID)
			if err == nil {
				created = true
				break
			}
			if err != unix.EEXIST {
				break
			}
			fd, err = unix.Openat(dfd, name, flags&^unix.O_CREAT, 0)
			if err != unix.ENOENT {
				break
			}
		}
	default:
		fd, err = unix.Openat(dfd, name, flags, unixPerm(mode)&^setID)
		created = err == nil && flags&unix.O_CREAT != 0
	}
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if t := st.Mode & unix.S_IFMT; t != unix.S_IFREG && t != unix.S_IFDIR {
		unix.Close(fd)
		return nil, syscall.ENXIO
	}
	if created {
		if err := r.own(ctx, fd, dfd, mode, false); err != nil {
			unix.Close(fd)
			unix.Unlinkat(dfd, name, 0)
			return nil, err
		}
	} else if flags&unix.O_ACCMODE != unix.O_RDONLY || flags&unix.O_TRUNC != 0 {
		if err := killSetID(fd, &st); err != nil {
			unix.Close(fd)
			return nil, err
		}
	}
	if st.Mode&unix.S_IFMT == unix.S_IFREG {
		// Regular files block anyway; clear O_NONBLOCK for clarity.
		if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); err == nil {
			unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl&^unix.O_NONBLOCK)
		}
	}
	return &realHandle{f: os.NewFile(uintptr(fd), p), append: flags&unix.O_APPEND != 0}, nil
}

// own gives a new file its caller's owner (when running as root) and
// exactly the mode asked for, which the process's umask may have cut,
// but never set-id bits on a regular file. A set-group-ID parent keeps
// its group on the file, as the kernel made it.
func (r *realFS) own(ctx context.Context, fd, dfd int, mode fs.FileMode, dir bool) error {
	perm := unixPerm(mode)
	var pst unix.Stat_t
	if err := unix.Fstat(dfd, &pst); err != nil {
		return err
	}
	if c, ok := CallerFrom(ctx); ok && r.asRoot {
		gid := int(c.GID)
		if pst.Mode&unix.S_ISGID != 0 {
			gid = -1
		}
		if err := unix.Fchown(fd, int(c.UID), gid); err != nil {
			return err
		}
	}
	if dir && pst.Mode&unix.S_ISGID != 0 {
		perm |= unix.S_ISGID
	}
	if !dir {
		perm &^= setID
	}
	return unix.Fchmod(fd, perm)
}

func (r *realFS) Mkdir(ctx context.Context, p string, mode fs.FileMode) error {
	if p == "/" {
		return syscall.EEXIST
	}
	return r.at(p, func(dfd int, name string) error {
		if err := unix.Mkdirat(dfd, name, unixPerm(mode)&0o777); err != nil {
			return err
		}
		fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if err := r.own(ctx, fd, dfd, mode, true); err != nil {
			unix.Unlinkat(dfd, name, unix.AT_REMOVEDIR)
			return err
		}
		return nil
	})
}

func (r *realFS) Remove(ctx context.Context, p string) error {
	if p == "/" {
		return syscall.EBUSY
	}
	return r.at(p, func(dfd int, name string) error {
		err := unix.Unlinkat(dfd, name, 0)
		if err == unix.EISDIR {
			err = unix.Unlinkat(dfd, name, unix.AT_REMOVEDIR)
			if err == unix.EEXIST {
				err = unix.ENOTEMPTY
			}
		}
		return err
	})
}

func (r *realFS) Rename(ctx context.Context, oldPath, newPath string) error {
	if oldPath == "/" {
		return syscall.EBUSY
	}
	return r.at(oldPath, func(odfd int, oname string) error {
		if newPath == "/" {
			return syscall.EBUSY
		}
		return r.at(newPath, func(ndfd int, nname string) error {
			return unix.Renameat(odfd, oname, ndfd, nname)
		})
	})
}

func (r *realFS) Symlink(ctx context.Context, target, link string) error {
	if link == "/" {
		return syscall.EEXIST
	}
	return r.at(link, func(dfd int, name string) error {
		if err := unix.Symlinkat(target, dfd, name); err != nil {
			return err
		}
		if c, ok := CallerFrom(ctx); ok && r.asRoot {
			if err := unix.Fchownat(dfd, name, int(c.UID), int(c.GID), unix.AT_SYMLINK_NOFOLLOW); err != nil {
				unix.Unlinkat(dfd, name, 0)
				return err
			}
		}
		return nil
	})
}

// Mknod makes a FIFO or a socket's name with mknodat, in the directory
// that holds p (resolved beneath the provider's directory), by its last
// name, which mknodat never follows. It never makes a device: the type
// is checked first, and only S_IFIFO or S_IFSOCK is ever passed on.
func (r *realFS) Mknod(ctx context.Context, p string, mode fs.FileMode) error {
	if err := CheckMknod(mode); err != nil {
		return err
	}
	typ := uint32(unix.S_IFIFO)
	if mode.Type() == fs.ModeSocket {
		typ = unix.S_IFSOCK
	}
	if p == "/" {
		return syscall.EEXIST
	}
	return r.at(p, func(dfd int, name string) error {
		if err := unix.Mknodat(dfd, name, typ|unixPerm(mode)&0o777, 0); err != nil {
			return err
		}
		fd, err := unix.Openat(dfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT != typ {
			// Another file took the name meanwhile: not ours to change.
			return syscall.EEXIST
		}
		if err := r.ownSpecial(ctx, fd, dfd, mode); err != nil {
			unix.Unlinkat(dfd, name, 0)
			return err
		}
		return nil
	})
}

// ownSpecial gives the special file that the O_PATH descriptor fd names
// (a FIFO or a socket cannot be opened for fchown and fchmod) its
// caller's owner, when running as root, and exactly the mode asked for,
// which the process's umask may have cut.
func (r *realFS) ownSpecial(ctx context.Context, fd, dfd int, mode fs.FileMode) error {
	if c, ok := CallerFrom(ctx); ok && r.asRoot {
		var pst unix.Stat_t
		if err := unix.Fstat(dfd, &pst); err != nil {
			return err
		}
		gid := int(c.GID)
		if pst.Mode&unix.S_ISGID != 0 {
			gid = -1
		}
		if err := unix.Fchownat(fd, "", int(c.UID), gid, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
	}
	// The magic link of an O_PATH descriptor names its very inode.
	return unix.Fchmodat(unix.AT_FDCWD, "/proc/self/fd/"+itoa(fd), unixPerm(mode), 0)
}

func (r *realFS) Readlink(ctx context.Context, p string) (string, error) {
	var s string
	err := r.at(p, func(dfd int, name string) error {
		buf := make([]byte, MaxTarget+1)
		n, err := unix.Readlinkat(dfd, name, buf)
		if err != nil {
			return err
		}
		if n > MaxTarget {
			return syscall.ENAMETOOLONG
		}
		s = string(buf[:n])
		return nil
	})
	return s, err
}

func (r *realFS) Link(ctx context.Context, oldPath, newPath string) error {
	return r.at(oldPath, func(odfd int, oname string) error {
		// link(2) looks the old name up before the new one's directory.
		var st unix.Stat_t
		if err := unix.Fstatat(odfd, oname, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		if newPath == "/" {
			return syscall.EEXIST
		}
		return r.at(newPath, func(ndfd int, nname string) error {
			if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				var nst unix.Stat_t
				if unix.Fstatat(ndfd, nname, &nst, unix.AT_SYMLINK_NOFOLLOW) == nil {
					return unix.EEXIST
				}
				return unix.EPERM
			}
			return unix.Linkat(odfd, oname, ndfd, nname, 0)
		})
	})
}

// Chmod never makes a regular file set-id (see killSetID): asked for
// those bits, it changes the file through a descriptor that pins it, and
// drops them if the file is regular.
func (r *realFS) Chmod(ctx context.Context, p string, mode fs.FileMode) error {
	perm := unixPerm(mode)
	return r.at(p, func(dfd int, name string) error {
		if perm&setID == 0 {
			err := unix.Fchmodat(dfd, name, perm, unix.AT_SYMLINK_NOFOLLOW)
			if err != unix.EOPNOTSUPP {
				return err
			}
		}
		// Without fchmodat2, or to know what the file is: change it
		// through a descriptor of it, never of what a symlink names.
		fd, err := unix.Openat(dfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return err
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			return unix.EOPNOTSUPP
		case unix.S_IFREG:
			perm &^= setID
		}
		return unix.Fchmodat(unix.AT_FDCWD, "/proc/self/fd/"+itoa(fd), perm, 0)
	})
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

func (r *realFS) Chown(ctx context.Context, p string, uid, gid int) error {
	return r.at(p, func(dfd int, name string) error {
		return unix.Fchownat(dfd, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW)
	})
}

func (r *realFS) Truncate(ctx context.Context, p string, size int64) error {
	return r.at(p, func(dfd int, name string) error {
		// Only a regular file is opened: a FIFO's open for writing
		// would fail (ENXIO) or wake a reader on the host.
		var st unix.Stat_t
		if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
		case unix.S_IFDIR:
			return unix.EISDIR
		default:
			return unix.EINVAL
		}
		fd, err := unix.Openat(dfd, name, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
		if err == unix.ELOOP {
			return unix.EINVAL
		}
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if err := unix.Fstat(fd, &st); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			return unix.EINVAL
		}
		if err := killSetID(fd, &st); err != nil {
			return err
		}
		return unix.Ftruncate(fd, size)
	})
}

func (r *realFS) Utimens(ctx context.Context, p string, atime, mtime *time.Time) error {
	ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_OMIT}}
	for i, t := range []*time.Time{atime, mtime} {
		if t != nil {
			ts[i] = unix.NsecToTimespec(t.UnixNano())
		}
	}
	return r.at(p, func(dfd int, name string) error {
		return unix.UtimesNanoAt(dfd, name, ts, unix.AT_SYMLINK_NOFOLLOW)
	})
}

// Statfs describes the host file system that holds p, which is another
// than the directory's where a host mount is beneath it.
func (r *realFS) Statfs(ctx context.Context, p string) (StatFS, error) {
	fd, err := r.openat2(p, unix.O_PATH|unix.O_NOFOLLOW, 0)
	if err != nil {
		return StatFS{}, err
	}
	defer unix.Close(fd)
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil {
		return StatFS{}, err
	}
	bs := uint64(st.Bsize)
	return StatFS{
		TotalBytes: st.Blocks * bs, FreeBytes: st.Bfree * bs,
		ReservedBytes: (st.Bfree - min(st.Bavail, st.Bfree)) * bs,
		TotalFiles:    st.Files, FreeFiles: st.Ffree, NameMax: uint32(st.Namelen),
	}, nil
}

// realHandle is an open host file.
type realHandle struct {
	f      *os.File
	append bool
}

func (h *realHandle) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	return h.f.ReadAt(p, off)
}

func (h *realHandle) WriteAt(ctx context.Context, p []byte, off int64) (int, error) {
	if h.append {
		return h.f.Write(p)
	}
	return h.f.WriteAt(p, off)
}

func (h *realHandle) Stat(ctx context.Context) (FileInfo, error) {
	var st unix.Stat_t
	var serr error
	rc, err := h.f.SyscallConn()
	if err != nil {
		return FileInfo{}, err
	}
	if err := rc.Control(func(fd uintptr) { serr = unix.Fstat(int(fd), &st) }); err != nil {
		return FileInfo{}, err
	}
	if serr != nil {
		return FileInfo{}, serr
	}
	_, name := splitPath(h.f.Name())
	return infoFromStat(name, &st), nil
}

func (h *realHandle) Truncate(ctx context.Context, size int64) error { return h.f.Truncate(size) }
func (h *realHandle) Sync(ctx context.Context) error                 { return h.f.Sync() }
func (h *realHandle) Close() error                                   { return h.f.Close() }

func (h *realHandle) hostFile() *os.File { return h.f }
