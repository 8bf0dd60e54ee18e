package agent

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
)

// sandboxFS carries out the host's file operations inside the sandbox.
//
// Every path is resolved by the kernel with openat2 from a descriptor of
// the sandbox's root, as if that root were "/" (RESOLVE_IN_ROOT): an
// absolute symlink or a ".." never leaves it, whatever a command in the
// sandbox plants or swaps while the operation runs, and no magic link
// (/proc/PID/root, /proc/PID/fd/N, /proc/PID/cwd) is followed. An operation
// then works on the descriptor it resolved (a directory for mkdir, remove
// and the temporary file of a write; the file itself for read, stat and
// list), never on the path again, so a swap after the check changes
// nothing.
//
// Kernel filesystems (/proc, /sys, cgroup, ...) are refused, wherever a
// path lands on one: the agent's /proc is its own, PID 1 of the outer
// namespace with more privilege than user commands, not the /proc that
// commands see. Everything else in the sandbox's tree is reached with the
// agent's credentials (root of the sandbox's user namespace), as docker cp
// does in a container.
type sandboxFS struct {
	root int // O_PATH descriptor of the sandbox's root directory
}

// openSandboxFS opens dir as the root of the file operations.
func openSandboxFS(dir string) (*sandboxFS, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open the sandbox's root %s: %w", dir, err)
	}
	return &sandboxFS{root: fd}, nil
}

func (s *sandboxFS) Close() error { return unix.Close(s.root) }

const (
	// resolveInRoot resolves a path from the host inside the sandbox's
	// root. RESOLVE_NO_XDEV cannot be used: the root is made of many
	// mounts (/usr, /dev, /tmp, mounted providers, ...).
	resolveInRoot = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS
	// resolveChild resolves one name in a directory already resolved:
	// no symlink, no other mount.
	resolveChild = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV
)

// maxResolveRetries bounds the retries of a resolution that a concurrent
// rename or mount in the sandbox interrupted (EAGAIN).
const maxResolveRetries = 64

func openat2(dir int, name string, flags, mode, resolve uint64) (int, error) {
	how := &unix.OpenHow{Flags: flags | unix.O_CLOEXEC, Mode: mode, Resolve: resolve}
	for range maxResolveRetries {
		fd, err := unix.Openat2(dir, name, how)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		return fd, err
	}
	return -1, unix.EAGAIN
}

// rel is p, absolute and clean, relative to the root.
func rel(p string) string {
	if r := strings.TrimLeft(p, "/"); r != "" {
		return r
	}
	return "."
}

// resolve opens p inside the root with flags, following symlinks (inside
// the root) unless flags has O_NOFOLLOW, and refuses kernel filesystems.
func (s *sandboxFS) resolve(op, p string, flags uint64) (int, error) {
	fd, err := openat2(s.root, rel(p), flags, 0, resolveInRoot)
	if err != nil {
		return -1, pathError(op, p, err)
	}
	if err := checkFS(fd, p); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

func pathError(op, p string, err error) error {
	switch {
	case errors.Is(err, unix.EXDEV):
		// From RESOLVE_IN_ROOT this means a concurrent rename moved a
		// component out of the root during the lookup.
		return agentproto.Errorf(agentproto.CodeInvalid, fmt.Sprintf("%s %s: the path changed while it was resolved: retry", op, p))
	case errors.Is(err, unix.EAGAIN):
		return agentproto.Errorf(agentproto.CodeInvalid, fmt.Sprintf("%s %s: the path kept changing while it was resolved: retry", op, p))
	case errors.Is(err, unix.ENOSYS):
		return agentproto.Errorf(agentproto.CodeInternal, fmt.Sprintf("%s %s: this kernel has no openat2, which file operations need to resolve paths safely inside the sandbox (Linux 5.6 or later)", op, p))
	}
	return &os.PathError{Op: op, Path: p, Err: err}
}

// FUSE's control filesystem and configfs, which x/sys/unix does not name.
const (
	fusectlMagic  = 0x65735543
	configfsMagic = 0x62656570
)

// kernelFS names the filesystems that show kernel or process state rather
// than files: file operations do not reach them.
var kernelFS = map[int64]string{
	unix.PROC_SUPER_MAGIC:    "proc",
	unix.SYSFS_MAGIC:         "sysfs",
	unix.CGROUP_SUPER_MAGIC:  "cgroup",
	unix.CGROUP2_SUPER_MAGIC: "cgroup2",
	unix.DEBUGFS_MAGIC:       "debugfs",
	unix.TRACEFS_MAGIC:       "tracefs",
	unix.SECURITYFS_MAGIC:    "securityfs",
	unix.BPF_FS_MAGIC:        "bpf",
	unix.PSTOREFS_MAGIC:      "pstore",
	unix.EFIVARFS_MAGIC:      "efivarfs",
	unix.SELINUX_MAGIC:       "selinuxfs",
	unix.SMACK_MAGIC:         "smackfs",
	unix.BINFMTFS_MAGIC:      "binfmt_misc",
	unix.NSFS_MAGIC:          "nsfs",
	unix.PID_FS_MAGIC:        "pidfs",
	fusectlMagic:             "fusectl",
	configfsMagic:            "configfs",
}

// checkFS refuses a descriptor on a kernel filesystem.
func checkFS(fd int, p string) error {
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil {
		return &os.PathError{Op: "statfs", Path: p, Err: err}
	}
	if name, ok := kernelFS[int64(st.Type)]; ok {
		return agentproto.Errorf(agentproto.CodePermission, fmt.Sprintf(
			"%s is on %s, a kernel filesystem: file operations reach only the sandbox's files (the agent's view of it is not the one commands see); read it with a command instead, such as cat %s",
			p, name, p))
	}
	return nil
}

// stat describes p without following a final symlink.
func (s *sandboxFS) stat(p string) (agentproto.FileInfo, error) {
	fd, err := s.resolve("stat", p, unix.O_PATH|unix.O_NOFOLLOW)
	if err != nil {
		return agentproto.FileInfo{}, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return agentproto.FileInfo{}, &os.PathError{Op: "stat", Path: p, Err: err}
	}
	info := infoOf(p, &st)
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		info.Link = readlinkat(fd, "")
	}
	return info, nil
}

// open opens the regular file p for reading, following symlinks inside
// the root.
func (s *sandboxFS) open(p string) (*os.File, agentproto.FileInfo, error) {
	// O_NONBLOCK: opening a FIFO must not wait for a writer.
	fd, err := s.resolve("open", p, unix.O_RDONLY|unix.O_NOCTTY|unix.O_NONBLOCK)
	if err != nil {
		return nil, agentproto.FileInfo{}, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, agentproto.FileInfo{}, &os.PathError{Op: "stat", Path: p, Err: err}
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFDIR:
		unix.Close(fd)
		return nil, agentproto.FileInfo{}, agentproto.Errorf(agentproto.CodeIsDir, p+" is a directory")
	default:
		// FIFOs, sockets and devices can block forever or never end.
		unix.Close(fd)
		return nil, agentproto.FileInfo{}, agentproto.Errorf(agentproto.CodeInvalid, p+" is not a regular file")
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, agentproto.FileInfo{}, err
	}
	return os.NewFile(uintptr(fd), p), infoOf(path.Base(p), &st), nil
}

// maxList bounds one directory listing.
const maxList = 100000

// list describes the entries of the directory p (following symlinks
// inside the root to it); entries that are symlinks are not followed.
func (s *sandboxFS) list(p string) ([]agentproto.FileInfo, error) {
	fd, err := s.resolve("open", p, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	d := os.NewFile(uintptr(fd), p)
	defer d.Close()
	names, err := d.Readdirnames(maxList + 1)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if len(names) > maxList {
		return nil, agentproto.Errorf(agentproto.CodeTooLarge, fmt.Sprintf("%s has more than %d entries; list a narrower directory", p, maxList))
	}
	out := make([]agentproto.FileInfo, 0, len(names))
	for _, name := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			continue // removed while listing
		}
		info := infoOf(name, &st)
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			info.Link = readlinkat(fd, name)
		}
		out = append(out, info)
	}
	return out, nil
}

// readlinkat reads a symlink's target, "" if it cannot.
func readlinkat(dir int, name string) string {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(dir, name, buf)
	if err != nil {
		return ""
	}
	return string(buf[:n])
}

func infoOf(name string, st *unix.Stat_t) agentproto.FileInfo {
	return agentproto.FileInfo{
		Name:    name,
		Size:    st.Size,
		Mode:    uint32(fileMode(st.Mode)),
		ModTime: st.Mtim.Nano(),
		IsDir:   st.Mode&unix.S_IFMT == unix.S_IFDIR,
	}
}

// fileMode is the os.FileMode of a stat mode, as os.Lstat gives it.
func fileMode(m uint32) os.FileMode {
	mode := os.FileMode(m & 0o777)
	switch m & unix.S_IFMT {
	case unix.S_IFBLK:
		mode |= os.ModeDevice
	case unix.S_IFCHR:
		mode |= os.ModeDevice | os.ModeCharDevice
	case unix.S_IFDIR:
		mode |= os.ModeDir
	case unix.S_IFIFO:
		mode |= os.ModeNamedPipe
	case unix.S_IFLNK:
		mode |= os.ModeSymlink
	case unix.S_IFSOCK:
		mode |= os.ModeSocket
	}
	if m&unix.S_ISUID != 0 {
		mode |= os.ModeSetuid
	}
	if m&unix.S_ISGID != 0 {
		mode |= os.ModeSetgid
	}
	if m&unix.S_ISVTX != 0 {
		mode |= os.ModeSticky
	}
	return mode
}

// parent opens the directory that holds p (following symlinks inside the
// root to it) and returns it with p's last name.
func (s *sandboxFS) parent(op, p string) (int, string, error) {
	if p == "/" {
		return -1, "", agentproto.Errorf(agentproto.CodeInvalid, fmt.Sprintf("%s /: the sandbox's root has no parent directory", op))
	}
	fd, err := s.resolve(op, path.Dir(p), unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return -1, "", err
	}
	return fd, path.Base(p), nil
}

// mkdir makes the directory p; with parents, also its missing parents,
// and an existing directory is no error.
func (s *sandboxFS) mkdir(p string, mode uint32, parents bool) error {
	if parents {
		fd, err := s.mkdirAll(p, mode)
		if err == nil {
			unix.Close(fd)
		}
		return err
	}
	dir, name, err := s.parent("mkdir", p)
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	if err := unix.Mkdirat(dir, name, mode); err != nil {
		return &os.PathError{Op: "mkdir", Path: p, Err: err}
	}
	return nil
}

// mkdirAll makes the directory p and its missing parents, and returns an
// O_PATH descriptor of it. A directory it makes is opened from its parent
// without following a symlink, so one swapped in meanwhile is an error.
func (s *sandboxFS) mkdirAll(p string, mode uint32) (int, error) {
	fd, err := s.resolve("mkdir", p, unix.O_PATH|unix.O_DIRECTORY)
	if err == nil || !errors.Is(err, os.ErrNotExist) || p == "/" {
		return fd, err
	}
	dir, err := s.mkdirAll(path.Dir(p), mode)
	if err != nil {
		return -1, err
	}
	defer unix.Close(dir)
	name := path.Base(p)
	if err := unix.Mkdirat(dir, name, mode); err != nil && !errors.Is(err, unix.EEXIST) {
		return -1, &os.PathError{Op: "mkdir", Path: p, Err: err}
	}
	fd, err = openat2(dir, name, unix.O_PATH|unix.O_DIRECTORY, 0, resolveChild)
	if err != nil {
		return -1, &os.PathError{Op: "mkdir", Path: p, Err: err}
	}
	return fd, nil
}

// maxRemoveDepth bounds the depth of a recursive removal: each level
// holds a descriptor open.
const maxRemoveDepth = 256

// remove removes the file or empty directory p, never following a final
// symlink; with recursive, a whole tree, which stays on p's filesystem.
func (s *sandboxFS) remove(p string, recursive bool) error {
	if p == "/" {
		return agentproto.Errorf(agentproto.CodeInvalid, "refusing to remove /")
	}
	dir, name, err := s.parent("remove", p)
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	if recursive {
		return removeAll(dir, name, p, 0)
	}
	err = unix.Unlinkat(dir, name, 0)
	if errors.Is(err, unix.EISDIR) {
		err = unix.Unlinkat(dir, name, unix.AT_REMOVEDIR)
	}
	if err != nil {
		return &os.PathError{Op: "remove", Path: p, Err: err}
	}
	return nil
}

// removeAll removes name in dir and, for a directory, everything in it,
// without following symlinks or entering another mount.
func removeAll(dir int, name, p string, depth int) error {
	err := unix.Unlinkat(dir, name, 0)
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) {
		return &os.PathError{Op: "remove", Path: p, Err: err}
	}
	if depth >= maxRemoveDepth {
		return agentproto.Errorf(agentproto.CodeTooLarge, fmt.Sprintf("remove %s: the tree is more than %d levels deep; remove it with a command (rm -rf)", p, maxRemoveDepth))
	}
	fd, err := openat2(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, resolveChild)
	if errors.Is(err, unix.EXDEV) {
		return agentproto.Errorf(agentproto.CodePermission, fmt.Sprintf("remove %s: it is a mount point; a recursive removal does not cross into another filesystem", p))
	}
	if err != nil {
		return &os.PathError{Op: "remove", Path: p, Err: err}
	}
	d := os.NewFile(uintptr(fd), p)
	for {
		names, rerr := d.Readdirnames(1024)
		for _, n := range names {
			if err := removeAll(fd, n, path.Join(p, n), depth+1); err != nil && !errors.Is(err, os.ErrNotExist) {
				d.Close()
				return err
			}
		}
		if len(names) == 0 || rerr != nil {
			break
		}
	}
	d.Close()
	if err := unix.Unlinkat(dir, name, unix.AT_REMOVEDIR); err != nil {
		return &os.PathError{Op: "remove", Path: p, Err: err}
	}
	return nil
}

// upload is a file being written: a temporary file in the destination's
// directory, renamed over the destination when complete.
type upload struct {
	*os.File
	dir       int
	tmp, name string
	path      string
}

// create starts writing p, making its missing parent directories.
func (s *sandboxFS) create(p string) (*upload, error) {
	if p == "/" {
		return nil, agentproto.Errorf(agentproto.CodeIsDir, "/ is a directory")
	}
	dir, err := s.mkdirAll(path.Dir(p), 0o755)
	if err != nil {
		return nil, err
	}
	var r [8]byte
	_, _ = rand.Read(r[:])
	tmp := ".airlock-write-" + hex.EncodeToString(r[:])
	fd, err := openat2(dir, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o600, resolveChild)
	if err != nil {
		unix.Close(dir)
		return nil, &os.PathError{Op: "create", Path: p, Err: err}
	}
	return &upload{File: os.NewFile(uintptr(fd), p), dir: dir, tmp: tmp, name: path.Base(p), path: p}, nil
}

// commit gives the file its mode and puts it in place of the destination
// (replacing what is there, a symlink included, rather than following it).
// A destination that is a mount point (a host file bound there) cannot be
// replaced: the upload is copied into it, which keeps its mode.
func (u *upload) commit(mode uint32) error {
	defer unix.Close(u.dir)
	err := unix.Fchmod(int(u.Fd()), mode)
	if cerr := u.File.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(u.dir, u.tmp, u.dir, u.name)
		if errors.Is(err, unix.EBUSY) {
			err = u.copyOver()
			_ = unix.Unlinkat(u.dir, u.tmp, 0)
			return err
		}
	}
	if err != nil {
		_ = unix.Unlinkat(u.dir, u.tmp, 0)
		return &os.PathError{Op: "write", Path: u.path, Err: err}
	}
	return nil
}

// copyOver writes the upload into the regular file that u.name is,
// truncated first.
func (u *upload) copyOver() error {
	const resolve = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS
	dst, err := openat2(u.dir, u.name, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_NOCTTY|unix.O_NONBLOCK, 0, resolve)
	if err != nil {
		return pathError("write", u.path, err)
	}
	out := os.NewFile(uintptr(dst), u.path)
	defer out.Close()
	var st unix.Stat_t
	if err := unix.Fstat(dst, &st); err != nil {
		return &os.PathError{Op: "write", Path: u.path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return agentproto.Errorf(agentproto.CodeInvalid, fmt.Sprintf("write %s: it is a mount point and not a regular file", u.path))
	}
	src, err := openat2(u.dir, u.tmp, unix.O_RDONLY|unix.O_NOFOLLOW, 0, resolve)
	if err != nil {
		return &os.PathError{Op: "write", Path: u.path, Err: err}
	}
	in := os.NewFile(uintptr(src), u.tmp)
	defer in.Close()
	if err := out.Truncate(0); err != nil {
		return &os.PathError{Op: "write", Path: u.path, Err: err}
	}
	if _, err := io.Copy(out, in); err != nil {
		return &os.PathError{Op: "write", Path: u.path, Err: err}
	}
	return nil
}

// abort removes the partial file.
func (u *upload) abort() {
	u.File.Close()
	_ = unix.Unlinkat(u.dir, u.tmp, 0)
	unix.Close(u.dir)
}

// openWrite opens the regular file p for writing in place, making it
// (with mode, and its missing parent directories) if it is missing. A
// final symlink is refused rather than followed, and so is anything but
// a regular file.
func (s *sandboxFS) openWrite(p string, mode uint32) (*os.File, error) {
	if p == "/" {
		return nil, agentproto.Errorf(agentproto.CodeIsDir, "/ is a directory")
	}
	dir, err := s.mkdirAll(path.Dir(p), 0o755)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dir)
	name := path.Base(p)
	// One name below a resolved directory, which may be a mount point
	// (a bound file): no symlink, no magic link. O_NONBLOCK: a FIFO
	// fails rather than waits for a reader.
	const resolve = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS
	flags := uint64(unix.O_WRONLY | unix.O_NOFOLLOW | unix.O_NOCTTY | unix.O_NONBLOCK)
	created := true
	fd, err := openat2(dir, name, flags|unix.O_CREAT|unix.O_EXCL, uint64(mode), resolve)
	if errors.Is(err, unix.EEXIST) {
		created = false
		fd, err = openat2(dir, name, flags, 0, resolve)
	}
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, agentproto.Errorf(agentproto.CodeInvalid, fmt.Sprintf("write %s: it is a symbolic link, which a write at an offset does not follow: write to its target", p))
		}
		return nil, pathError("write", p, err)
	}
	if err := checkFS(fd, p); err != nil {
		unix.Close(fd)
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "write", Path: p, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, agentproto.Errorf(agentproto.CodeInvalid, p+" is not a regular file")
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if created {
		// The exact bits, whatever the agent's umask.
		if err := unix.Fchmod(fd, mode); err != nil {
			unix.Close(fd)
			return nil, &os.PathError{Op: "chmod", Path: p, Err: err}
		}
	}
	return os.NewFile(uintptr(fd), p), nil
}

// symlink makes p a symbolic link to target, making p's missing parent
// directories, and replacing a file or link at p (not a directory). The
// target is stored as it is; nothing here ever follows it.
func (s *sandboxFS) symlink(p, target string) error {
	if p == "/" {
		return agentproto.Errorf(agentproto.CodeIsDir, "/ is a directory")
	}
	if target == "" || len(target) > maxPath || strings.IndexByte(target, 0) >= 0 {
		return agentproto.Errorf(agentproto.CodeInvalid, fmt.Sprintf("symlink %s: the target must be 1 to %d bytes, without NUL", p, maxPath))
	}
	dir, err := s.mkdirAll(path.Dir(p), 0o755)
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	var r [8]byte
	_, _ = rand.Read(r[:])
	tmp := ".airlock-link-" + hex.EncodeToString(r[:])
	if err := unix.Symlinkat(target, dir, tmp); err != nil {
		return &os.PathError{Op: "symlink", Path: p, Err: err}
	}
	if err := unix.Renameat(dir, tmp, dir, path.Base(p)); err != nil {
		_ = unix.Unlinkat(dir, tmp, 0)
		return &os.PathError{Op: "symlink", Path: p, Err: err}
	}
	return nil
}

// setAttr sets p's permission bits (with setMode) and modification time
// (when mtime is not 0, in Unix nanoseconds), never following a final
// symlink: a link gets its time, and keeps its mode (Linux has no mode
// for links).
func (s *sandboxFS) setAttr(p string, setMode bool, mode uint32, mtime int64) error {
	fd, err := s.resolve("set_attr", p, unix.O_PATH|unix.O_NOFOLLOW)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &os.PathError{Op: "set_attr", Path: p, Err: err}
	}
	kind := st.Mode & unix.S_IFMT
	if setMode && kind != unix.S_IFLNK {
		if kind != unix.S_IFREG && kind != unix.S_IFDIR {
			return agentproto.Errorf(agentproto.CodeInvalid, fmt.Sprintf("chmod %s: not a regular file or directory", p))
		}
		// fchmod needs a descriptor that is not O_PATH: open the same
		// name again, never following, and check it is the same file.
		flags := uint64(unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NOCTTY | unix.O_NONBLOCK)
		if kind == unix.S_IFDIR {
			flags |= unix.O_DIRECTORY
		}
		rfd, err := s.resolve("chmod", p, flags)
		if err != nil {
			return err
		}
		var st2 unix.Stat_t
		err = unix.Fstat(rfd, &st2)
		if err == nil && (st2.Dev != st.Dev || st2.Ino != st.Ino) {
			err = unix.ESTALE
		}
		if err == nil {
			err = unix.Fchmod(rfd, mode)
		}
		unix.Close(rfd)
		if err != nil {
			return &os.PathError{Op: "chmod", Path: p, Err: err}
		}
	}
	if mtime != 0 {
		ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, unix.NsecToTimespec(mtime)}
		if err := unix.UtimesNanoAt(fd, "", ts, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return &os.PathError{Op: "utimes", Path: p, Err: err}
		}
	}
	return nil
}
