// Package vfs is airlock's programmable filesystem: host-side providers
// that a sandbox sees as ordinary directories.
//
// A Provider serves one tree. Paths given to a provider are absolute,
// slash-separated and clean ("/", "/a/b"), relative to the provider's own
// root; the caller (airlock's protocol server, or a wrapper such as
// MountRouter) has already refused empty components, "..", NUL bytes and
// over-long paths. Stat, Chmod, Chown, Utimens and Remove never follow a
// final symlink; intermediate symlinks are not followed by providers
// either: the kernel resolves them component by component through Stat
// and Readlink.
//
// Errors are errno values (syscall.Errno) or errors that wrap one; the
// io/fs sentinels (fs.ErrNotExist, fs.ErrExist, fs.ErrPermission) are
// accepted too. Errno maps any error to the errno the sandbox sees.
//
// Providers are used from many goroutines at once and must be safe for
// that.
package vfs

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"syscall"
	"time"
)

// FileInfo describes one file. Mode holds the type bits, the permission
// bits and the set-id and sticky bits, as io/fs defines them.
type FileInfo struct {
	Name    string
	Size    int64
	Mode    fs.FileMode
	ModTime time.Time
	// ATime and CTime are the access and change times; the zero time
	// means ModTime.
	ATime time.Time
	CTime time.Time
	// UID and GID are the owner as the sandbox sees it.
	UID, GID uint32
	// Nlink is the number of hard links; 0 means 1 (2 for a directory).
	Nlink uint32
	// Ino is the file's inode number within the provider, stable for the
	// file's life; 0 lets the consumer choose one.
	Ino uint64
	// Blocks is the number of 512-byte blocks allocated (sparse files
	// report fewer than Size suggests); 0 means Size rounded up.
	Blocks int64
}

// IsDir reports whether the file is a directory.
func (fi FileInfo) IsDir() bool { return fi.Mode.IsDir() }

// StatFS describes a provider's capacity, in bytes and files.
type StatFS struct {
	TotalBytes, FreeBytes uint64
	// ReservedBytes are the free bytes that only a privileged writer
	// may take (a host file system's reserve for root), counted in
	// FreeBytes; the sandbox's df shows the rest as available.
	ReservedBytes         uint64
	TotalFiles, FreeFiles uint64
	// NameMax is the longest name allowed; 0 means 255.
	NameMax uint32
}

// Provider serves one file tree.
type Provider interface {
	// Readonly reports whether every write fails with EROFS.
	Readonly() bool

	// Stat describes path without following a final symlink.
	Stat(ctx context.Context, path string) (FileInfo, error)
	// Readdir lists a directory, without "." and "..", in a stable
	// order (the same between calls while the directory is unchanged).
	Readdir(ctx context.Context, path string) ([]FileInfo, error)

	// Open opens path with os.O_* flags. With O_CREATE a missing file is
	// made with mode (permission bits only) and owned by the caller
	// (CallerFrom); with O_EXCL an existing one is EEXIST; with O_TRUNC
	// it is emptied. A directory may be opened read-only.
	Open(ctx context.Context, path string, flags int, mode fs.FileMode) (Handle, error)
	// Create is Open with O_RDWR|O_CREATE|O_TRUNC.
	Create(ctx context.Context, path string, mode fs.FileMode) (Handle, error)

	Mkdir(ctx context.Context, path string, mode fs.FileMode) error
	// Remove removes a file, a symlink or an empty directory (ENOTEMPTY
	// otherwise). A removed file stays readable through open handles.
	Remove(ctx context.Context, path string) error
	// Rename moves oldPath to newPath with rename(2)'s rules: an existing
	// newPath is replaced atomically if the types agree (EISDIR,
	// ENOTDIR, ENOTEMPTY otherwise).
	Rename(ctx context.Context, oldPath, newPath string) error

	Symlink(ctx context.Context, target, link string) error
	Readlink(ctx context.Context, path string) (string, error)
	// Mknod makes a special file at path, owned by the caller: a FIFO
	// (mode's type fs.ModeNamedPipe) or the name of a UNIX socket
	// (fs.ModeSocket), with mode's permission, set-id and sticky bits.
	// A device (fs.ModeDevice) is EPERM: no built-in provider makes
	// one, and one on the host must never make a device node there.
	// Any other type is EINVAL (CheckMknod). A special file holds no
	// data: the sandbox's kernel gives a FIFO its pipe and a socket its
	// listener, so opening one through a provider is ENXIO.
	Mknod(ctx context.Context, path string, mode fs.FileMode) error
	// Link makes newPath another name of the file at oldPath.
	Link(ctx context.Context, oldPath, newPath string) error

	// Chmod sets the permission, set-id and sticky bits.
	Chmod(ctx context.Context, path string, mode fs.FileMode) error
	// Chown sets the owner; -1 leaves that id as it is.
	Chown(ctx context.Context, path string, uid, gid int) error
	Truncate(ctx context.Context, path string, size int64) error
	// Utimens sets the access and modification times; nil leaves one
	// as it is.
	Utimens(ctx context.Context, path string, atime, mtime *time.Time) error
	// Statfs describes the file system that holds path, as statfs(2)
	// does: the sandbox's df and free-space checks see it. A provider
	// made of several (a router of mounts) answers for the one that
	// holds path.
	Statfs(ctx context.Context, path string) (StatFS, error)
}

// Handle is an open file.
type Handle interface {
	// ReadAt reads at off; at end of file it returns what it has and
	// io.EOF, or 0 and io.EOF.
	ReadAt(ctx context.Context, p []byte, off int64) (int, error)
	// WriteAt writes at off, extending the file as needed. A handle
	// opened with O_APPEND writes at the end whatever off is.
	WriteAt(ctx context.Context, p []byte, off int64) (int, error)
	// Stat describes the open file, even after it was removed.
	Stat(ctx context.Context) (FileInfo, error)
	Truncate(ctx context.Context, size int64) error
	Sync(ctx context.Context) error
	Close() error
}

// Watcher is implemented by providers whose files can change other than
// through the sandbox (from host code or the file API): fn is called with
// each changed path, so that the sandbox's caches of it are dropped. The
// returned function stops the calls.
type Watcher interface {
	Watch(fn func(path string)) (stop func())
}

// Caller is who, inside the sandbox, asks for an operation.
type Caller struct {
	UID, GID uint32
	PID      uint32
}

type callerKey struct{}

// WithCaller returns ctx carrying c.
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerFrom returns the caller ctx carries, and whether it carries one.
// Without one, files are made owned by root (0:0).
func CallerFrom(ctx context.Context) (Caller, bool) {
	c, ok := ctx.Value(callerKey{}).(Caller)
	return c, ok
}

// CheckMknod checks the type of a Mknod's mode: nil for a FIFO or a
// socket, EPERM for a device (character or block), EINVAL for anything
// else. Providers call it before making anything.
func CheckMknod(mode fs.FileMode) error {
	switch mode.Type() {
	case fs.ModeNamedPipe, fs.ModeSocket:
		return nil
	case fs.ModeDevice, fs.ModeDevice | fs.ModeCharDevice:
		return syscall.EPERM
	}
	return syscall.EINVAL
}

// Errno returns the errno that err stands for: err's own if it wraps a
// syscall.Errno, the matching one for the io/fs sentinels and context
// errors, and EIO for anything else. nil gives 0.
func Errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var e syscall.Errno
	switch {
	case errors.As(err, &e):
		return e
	case errors.Is(err, fs.ErrNotExist):
		return syscall.ENOENT
	case errors.Is(err, fs.ErrExist):
		return syscall.EEXIST
	case errors.Is(err, fs.ErrPermission):
		return syscall.EACCES
	case errors.Is(err, fs.ErrInvalid):
		return syscall.EINVAL
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded):
		return syscall.ETIMEDOUT
	case errors.Is(err, context.Canceled):
		return syscall.EINTR
	}
	return syscall.EIO
}
