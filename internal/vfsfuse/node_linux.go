package vfsfuse

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/vfs"
)

// node is one file or directory of the mount. It holds no state of its
// own: every operation names its file by the node's path from the
// mount's root, as the kernel's tree of dentries knows it now, and asks
// the provider.
type node struct {
	gofs.Inode
	fsys *fileSystem
}

var (
	_ gofs.NodeLookuper       = (*node)(nil)
	_ gofs.NodeGetattrer      = (*node)(nil)
	_ gofs.NodeSetattrer      = (*node)(nil)
	_ gofs.NodeOpener         = (*node)(nil)
	_ gofs.NodeCreater        = (*node)(nil)
	_ gofs.NodeOpendirHandler = (*node)(nil)
	_ gofs.NodeMkdirer        = (*node)(nil)
	_ gofs.NodeUnlinker       = (*node)(nil)
	_ gofs.NodeRmdirer        = (*node)(nil)
	_ gofs.NodeRenamer        = (*node)(nil)
	_ gofs.NodeSymlinker      = (*node)(nil)
	_ gofs.NodeReadlinker     = (*node)(nil)
	_ gofs.NodeLinker         = (*node)(nil)
	_ gofs.NodeStatfser       = (*node)(nil)
	_ gofs.NodeMknoder        = (*node)(nil)
	_ gofs.NodeGetxattrer     = (*node)(nil)
	_ gofs.NodeListxattrer    = (*node)(nil)
	_ gofs.NodeSetxattrer     = (*node)(nil)
	_ gofs.NodeRemovexattrer  = (*node)(nil)
	_ gofs.FileLookuper       = (*dirHandle)(nil)
	_ gofs.FileReaddirenter   = (*dirHandle)(nil)
	_ gofs.FileSeekdirer      = (*dirHandle)(nil)
	_ gofs.FileReader         = (*fileHandle)(nil)
	_ gofs.FileWriter         = (*fileHandle)(nil)
	_ gofs.FileGetattrer      = (*fileHandle)(nil)
	_ gofs.FileFsyncer        = (*fileHandle)(nil)
	_ gofs.FileReleaser       = (*fileHandle)(nil)
	_ gofs.FileFlusher        = (*fileHandle)(nil)
	_ gofs.FileSetattrer      = (*fileHandle)(nil)
	_ gofs.FileReleasedirer   = (*dirHandle)(nil)
	_ gofs.NodeWrapChilder    = (*node)(nil)
	_ gofs.NodeOnForgetter    = (*node)(nil)
)

// WrapChild is never asked for: children are made here.
func (n *node) WrapChild(_ context.Context, ops gofs.InodeEmbedder) gofs.InodeEmbedder { return ops }

// OnForget needs nothing: a node holds no state.
func (n *node) OnForget() {}

// path is the node's path in the provider. An unlinked node's path
// names nothing (go-fuse puts a placeholder where its name was), so
// path operations on it fail with ENOENT while its open handles work.
//
// A path a provider may not be given (vfs.CleanPath: too long or too
// deep) fails with ENAMETOOLONG. The kernel resolves names one at a
// time and a rename moves a whole tree deeper, so nothing else bounds
// the paths of a mount.
func (n *node) path() (string, syscall.Errno) {
	return checked("/" + n.Path(n.Root()))
}

func (n *node) child(name string) (string, syscall.Errno) {
	p, e := n.path()
	if e != 0 {
		return "", e
	}
	return checked(path.Join(p, name))
}

func checked(p string) (string, syscall.Errno) {
	if _, err := vfs.CleanPath(p); err != nil {
		return "", errno(err)
	}
	return p, 0
}

// caller marks a request's context as the sandbox's, with its caller,
// for the provider. The kernel's interrupts do not cancel it: a signal
// to the caller (a Go program's preemption signals arrive all the time)
// would otherwise fail the system call with EINTR, which close and many
// programs do not retry; a request runs to its end, or to the
// provider's timeout, as on a local file system.
func (f *fileSystem) caller(ctx context.Context) context.Context {
	ctx = vfs.WithOrigin(context.WithoutCancel(ctx), vfs.OriginSandbox)
	if c, ok := fuse.FromContext(ctx); ok {
		return vfs.WithCaller(ctx, vfs.Caller{UID: f.ids.toProvider(c.Uid), GID: f.ids.toProvider(c.Gid), PID: c.Pid})
	}
	return ctx
}

func errno(err error) syscall.Errno { return vfs.Errno(err) }

// newChild makes (or finds, for another link of the same file) the
// inode of a file the provider described, and fills out.
func (n *node) newChild(ctx context.Context, p string, fi vfs.FileInfo, out *fuse.EntryOut) *gofs.Inode {
	n.fsys.fillAttr(fi, &out.Attr)
	n.fsys.setEntryTimeouts(p, out)
	return n.NewInode(ctx, &node{fsys: n.fsys}, gofs.StableAttr{Mode: out.Attr.Mode & syscall.S_IFMT, Ino: fi.Ino})
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if len(name) > maxName {
		return nil, syscall.ENAMETOOLONG
	}
	p, e := n.child(name)
	if e != 0 {
		return nil, e
	}
	fi, err := n.fsys.p.Stat(n.fsys.caller(ctx), p)
	if err != nil {
		return nil, errno(err)
	}
	return n.newChild(ctx, p, fi, out), 0
}

func (n *node) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if fh, ok := f.(*fileHandle); ok {
		return fh.Getattr(ctx, out)
	}
	p, e := n.path()
	if e != 0 {
		return e
	}
	fi, err := n.fsys.p.Stat(n.fsys.caller(ctx), p)
	if err != nil {
		return errno(err)
	}
	n.fsys.fillAttr(fi, &out.Attr)
	out.SetTimeout(n.fsys.attrTimeoutOf(p))
	return 0
}

func (n *node) Setattr(ctx context.Context, f gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	ctx = n.fsys.caller(ctx)
	p, e := n.path()
	if e != 0 {
		return e
	}
	fh, _ := f.(*fileHandle)
	if mode, ok := in.GetMode(); ok {
		if err := n.fsys.p.Chmod(ctx, p, fileMode(mode)); err != nil {
			return errno(err)
		}
	}
	uid, uok := in.GetUID()
	gid, gok := in.GetGID()
	if uok || gok {
		u, g := -1, -1
		if uok {
			u = int(n.fsys.ids.toProvider(uid))
		}
		if gok {
			g = int(n.fsys.ids.toProvider(gid))
		}
		if err := n.fsys.p.Chown(ctx, p, u, g); err != nil {
			return errno(err)
		}
	}
	if size, ok := in.GetSize(); ok {
		var err error
		if fh != nil {
			err = fh.h.Truncate(ctx, int64(size))
		} else {
			err = n.fsys.p.Truncate(ctx, p, int64(size))
		}
		if err != nil {
			return errno(err)
		}
	}
	atime, aok := in.GetATime()
	mtime, mok := in.GetMTime()
	if aok || mok {
		var a, m *time.Time
		if aok {
			a = &atime
		}
		if mok {
			m = &mtime
		}
		if err := n.fsys.p.Utimens(ctx, p, a, m); err != nil {
			return errno(err)
		}
	}
	if fh != nil {
		return fh.Getattr(ctx, out)
	}
	return n.Getattr(ctx, nil, out)
}

func (n *node) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	p, e := n.path()
	if e != 0 {
		return nil, 0, e
	}
	of := openFlags(flags)
	h, err := n.fsys.p.Open(n.fsys.caller(ctx), p, of, 0)
	if err != nil {
		return nil, 0, errno(err)
	}
	return &fileHandle{h: h, fsys: n.fsys, readOnly: of&(os.O_WRONLY|os.O_RDWR) == 0, attrTimeout: n.fsys.attrTimeoutOf(p)}, n.fsys.openFlags, 0
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	if len(name) > maxName {
		return nil, nil, 0, syscall.ENAMETOOLONG
	}
	ctx = n.fsys.caller(ctx)
	p, e := n.child(name)
	if e != 0 {
		return nil, nil, 0, e
	}
	h, err := n.fsys.p.Open(ctx, p, openFlags(flags)|os.O_CREATE, fileMode(mode).Perm()|fileMode(mode)&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky))
	if err != nil {
		return nil, nil, 0, errno(err)
	}
	fi, err := h.Stat(ctx)
	if err != nil {
		h.Close()
		return nil, nil, 0, errno(err)
	}
	return n.newChild(ctx, p, fi, out), &fileHandle{h: h, fsys: n.fsys, attrTimeout: n.fsys.attrTimeoutOf(p)}, n.fsys.openFlags, 0
}

// Mknod makes a regular file (mknod with S_IFREG, as some programs do),
// a FIFO or a socket (bind of a UNIX socket makes one). The kernel gives
// a FIFO or socket of the mount its pipe and its listener itself: their
// opens and connects never reach the server, and nothing of them
// reaches the provider but their names and attributes. Devices are
// refused (EPERM), whatever the caller may do elsewhere: the mount is
// nodev, and no provider holds one.
func (n *node) Mknod(ctx context.Context, name string, mode uint32, _ uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if len(name) > maxName {
		return nil, syscall.ENAMETOOLONG
	}
	ctx = n.fsys.caller(ctx)
	p, e := n.child(name)
	if e != 0 {
		return nil, e
	}
	perm := fileMode(mode)
	switch mode & syscall.S_IFMT {
	case syscall.S_IFREG, 0:
		h, err := n.fsys.p.Open(ctx, p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
		if err != nil {
			return nil, errno(err)
		}
		fi, err := h.Stat(ctx)
		h.Close()
		if err != nil {
			return nil, errno(err)
		}
		return n.newChild(ctx, p, fi, out), 0
	case syscall.S_IFIFO:
		perm |= fs.ModeNamedPipe
	case syscall.S_IFSOCK:
		perm |= fs.ModeSocket
	case syscall.S_IFCHR, syscall.S_IFBLK:
		return nil, syscall.EPERM
	default:
		return nil, syscall.EINVAL
	}
	if err := n.fsys.p.Mknod(ctx, p, perm); err != nil {
		return nil, errno(err)
	}
	return n.entry(ctx, p, out)
}

func (n *node) entry(ctx context.Context, p string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	fi, err := n.fsys.p.Stat(ctx, p)
	if err != nil {
		return nil, errno(err)
	}
	return n.newChild(ctx, p, fi, out), 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	ctx = n.fsys.caller(ctx)
	p, e := n.child(name)
	if e != 0 {
		return nil, e
	}
	if err := n.fsys.p.Mkdir(ctx, p, fileMode(mode)&(fs.ModePerm|fs.ModeSetgid|fs.ModeSticky)); err != nil {
		return nil, errno(err)
	}
	return n.entry(ctx, p, out)
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	p, e := n.child(name)
	if e != 0 {
		return e
	}
	return errno(n.fsys.p.Remove(n.fsys.caller(ctx), p))
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno { return n.Unlink(ctx, name) }

func (n *node) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	ctx = n.fsys.caller(ctx)
	from, e := n.child(name)
	if e != 0 {
		return e
	}
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	to, e := np.child(newName)
	if e != 0 {
		return e
	}
	switch flags {
	case 0:
	case unix.RENAME_NOREPLACE:
		if _, err := n.fsys.p.Stat(ctx, to); err == nil {
			return syscall.EEXIST
		} else if e := errno(err); e != syscall.ENOENT {
			return e
		}
	default:
		// RENAME_EXCHANGE and RENAME_WHITEOUT: no provider can do them
		// atomically.
		return syscall.EINVAL
	}
	return errno(n.fsys.p.Rename(ctx, from, to))
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	ctx = n.fsys.caller(ctx)
	p, e := n.child(name)
	if e != 0 {
		return nil, e
	}
	if err := n.fsys.p.Symlink(ctx, target, p); err != nil {
		return nil, errno(err)
	}
	return n.entry(ctx, p, out)
}

func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	p, e := n.path()
	if e != 0 {
		return nil, e
	}
	t, err := n.fsys.p.Readlink(n.fsys.caller(ctx), p)
	if err != nil {
		return nil, errno(err)
	}
	return []byte(t), 0
}

func (n *node) Link(ctx context.Context, target gofs.InodeEmbedder, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	ctx = n.fsys.caller(ctx)
	p, e := n.child(name)
	if e != 0 {
		return nil, e
	}
	tn, ok := target.(*node)
	if !ok {
		return nil, syscall.EXDEV
	}
	old, e := tn.path()
	if e != 0 {
		return nil, e
	}
	if err := n.fsys.p.Link(ctx, old, p); err != nil {
		return nil, errno(err)
	}
	return n.entry(ctx, p, out)
}

func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	p, e := n.path()
	if e != 0 {
		return e
	}
	st, err := n.fsys.p.Statfs(n.fsys.caller(ctx), p)
	if err != nil {
		return errno(err)
	}
	const bsize = 4096
	out.Bsize = bsize
	out.Frsize = bsize
	out.Blocks = st.TotalBytes / bsize
	out.Bfree = st.FreeBytes / bsize
	out.Bavail = (st.FreeBytes - min(st.ReservedBytes, st.FreeBytes)) / bsize
	out.Files = st.TotalFiles
	out.Ffree = st.FreeFiles
	out.NameLen = st.NameMax
	if out.NameLen == 0 {
		out.NameLen = maxName
	}
	return 0
}

// Extended attributes are not part of a provider: reads find none and
// writes are refused, as on a file system without them.
func (n *node) Getxattr(context.Context, string, []byte) (uint32, syscall.Errno) {
	return 0, syscall.ENODATA
}
func (n *node) Listxattr(context.Context, []byte) (uint32, syscall.Errno) { return 0, 0 }
func (n *node) Setxattr(context.Context, string, []byte, uint32) syscall.Errno {
	return syscall.ENOTSUP
}
func (n *node) Removexattr(context.Context, string) syscall.Errno { return syscall.ENODATA }

// OpendirHandle opens a directory, which is listed when it is first
// read, and again each time it is read from the start (rewinddir): a
// reader that keeps a directory open (as gVisor's file server does)
// sees what changed since. The listing's entries answer the kernel's
// reads and, for READDIRPLUS, its lookups, with no further request to
// the provider.
func (n *node) OpendirHandle(context.Context, uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	return &dirHandle{n: n}, 0, 0
}

// dirHandle is an open directory: its listing, read from a position,
// with "." and "..".
type dirHandle struct {
	n       *node
	path    string // the directory's, when listed
	entries []vfs.FileInfo
	listed  bool
	pos     int
}

// list lists the directory now. A directory removed meanwhile is empty,
// as Linux reads one.
func (d *dirHandle) list(ctx context.Context) syscall.Errno {
	p, e := d.n.path()
	if e != 0 {
		return e
	}
	entries, err := d.n.fsys.p.Readdir(d.n.fsys.caller(ctx), p)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return errno(err)
	}
	d.path, d.entries, d.listed = p, entries, true
	return 0
}

func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	if !d.listed {
		if e := d.list(ctx); e != 0 {
			return nil, e
		}
	}
	switch {
	case d.pos == 0:
		d.pos++
		return &fuse.DirEntry{Name: ".", Mode: syscall.S_IFDIR, Off: 1}, 0
	case d.pos == 1:
		d.pos++
		return &fuse.DirEntry{Name: "..", Mode: syscall.S_IFDIR, Off: 2}, 0
	case d.pos-2 >= len(d.entries):
		return nil, 0
	}
	fi := d.entries[d.pos-2]
	d.pos++
	return &fuse.DirEntry{Name: fi.Name, Mode: modeBits(fi.Mode) & syscall.S_IFMT, Ino: fi.Ino, Off: uint64(d.pos)}, 0
}

func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	if off == 0 {
		d.listed, d.pos = false, 0
		return 0
	}
	if !d.listed {
		if e := d.list(ctx); e != 0 {
			return e
		}
	}
	if off > uint64(len(d.entries))+2 {
		return syscall.EINVAL
	}
	d.pos = int(off)
	return 0
}

// Lookup answers READDIRPLUS for the entry just read, from the listing.
func (d *dirHandle) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	i := d.pos - 3
	if name == "." || name == ".." || i < 0 || i >= len(d.entries) || d.entries[i].Name != name {
		return d.n.Lookup(ctx, name, out)
	}
	return d.n.newChild(ctx, path.Join(d.path, name), d.entries[i], out), 0
}

func (d *dirHandle) Releasedir(context.Context, uint32) { d.entries = nil }

// fileHandle is an open file of the provider.
type fileHandle struct {
	h    vfs.Handle
	fsys *fileSystem
	// readOnly: opened for reading only.
	readOnly bool
	// attrTimeout is how long the kernel keeps the file's attributes.
	attrTimeout time.Duration
}

// PassthroughFd has the kernel read a file opened for reading only
// straight from the host file behind it (vfs.HostFiler: a real_fs
// file), with Options.Passthrough and where the kernel allows it (Linux
// 6.9 and later, a server with CAP_SYS_ADMIN: the supervisor as root):
// reads then never reach the provider, which has nothing to do with
// them, hooks and events being for changes. Anything else goes to the
// provider.
func (f *fileHandle) PassthroughFd() (int, bool) {
	if !f.readOnly || !f.fsys.passthrough {
		return -1, false
	}
	hf := vfs.HostFileOf(f.h)
	if hf == nil {
		return -1, false
	}
	return int(hf.Fd()), true
}

func (f *fileHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	n, err := f.h.ReadAt(f.fsys.caller(ctx), dest, off)
	if err != nil && err != io.EOF {
		return nil, errno(err)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

func (f *fileHandle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	n, err := f.h.WriteAt(f.fsys.caller(ctx), data, off)
	if err != nil && n == 0 {
		return 0, errno(err)
	}
	return uint32(n), 0
}

func (f *fileHandle) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	fi, err := f.h.Stat(f.fsys.caller(ctx))
	if err != nil {
		return errno(err)
	}
	f.fsys.fillAttr(fi, &out.Attr)
	out.SetTimeout(f.attrTimeout)
	return 0
}

func (f *fileHandle) Setattr(ctx context.Context, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if size, ok := in.GetSize(); ok {
		if err := f.h.Truncate(f.fsys.caller(ctx), int64(size)); err != nil {
			return errno(err)
		}
	}
	return f.Getattr(ctx, out)
}

func (f *fileHandle) Fsync(ctx context.Context, _ uint32) syscall.Errno {
	return errno(f.h.Sync(f.fsys.caller(ctx)))
}

// Flush needs nothing: writes reach the provider as they are made.
func (f *fileHandle) Flush(context.Context) syscall.Errno { return 0 }

func (f *fileHandle) Release(context.Context) syscall.Errno { return errno(f.h.Close()) }

// openFlags turns the kernel's open flags into the os.O_* flags a
// provider takes: the access mode, append, truncate and exclusive
// creation, nothing that only the kernel acts on.
func openFlags(flags uint32) int {
	f := int(flags) & (os.O_RDONLY | os.O_WRONLY | os.O_RDWR)
	for _, b := range []int{os.O_APPEND, os.O_TRUNC, os.O_EXCL, os.O_CREATE} {
		if int(flags)&b != 0 {
			f |= b
		}
	}
	return f
}

// fileMode turns a mode_t into an fs.FileMode's permission, set-id and
// sticky bits (not the type: a provider is told that by the call).
func fileMode(m uint32) fs.FileMode {
	out := fs.FileMode(m & 0o777)
	if m&syscall.S_ISUID != 0 {
		out |= fs.ModeSetuid
	}
	if m&syscall.S_ISGID != 0 {
		out |= fs.ModeSetgid
	}
	if m&syscall.S_ISVTX != 0 {
		out |= fs.ModeSticky
	}
	return out
}

// modeBits turns an fs.FileMode into a mode_t.
func modeBits(m fs.FileMode) uint32 {
	out := uint32(m.Perm())
	switch {
	case m.IsDir():
		out |= syscall.S_IFDIR
	case m&fs.ModeSymlink != 0:
		out |= syscall.S_IFLNK
	case m&fs.ModeNamedPipe != 0:
		out |= syscall.S_IFIFO
	case m&fs.ModeSocket != 0:
		out |= syscall.S_IFSOCK
	case m&fs.ModeCharDevice != 0:
		out |= syscall.S_IFCHR
	case m&fs.ModeDevice != 0:
		out |= syscall.S_IFBLK
	default:
		out |= syscall.S_IFREG
	}
	if m&fs.ModeSetuid != 0 {
		out |= syscall.S_ISUID
	}
	if m&fs.ModeSetgid != 0 {
		out |= syscall.S_ISGID
	}
	if m&fs.ModeSticky != 0 {
		out |= syscall.S_ISVTX
	}
	return out
}

// fillAttr turns a provider's description of a file into the kernel's.
func (f *fileSystem) fillAttr(fi vfs.FileInfo, a *fuse.Attr) {
	a.Ino = fi.Ino
	a.Mode = modeBits(fi.Mode)
	a.Size = uint64(max(fi.Size, 0))
	a.Blocks = uint64(fi.Blocks)
	if fi.Blocks == 0 {
		a.Blocks = (a.Size + 511) / 512
	}
	a.Blksize = 4096
	a.Nlink = fi.Nlink
	if a.Nlink == 0 {
		a.Nlink = 1
		if fi.Mode.IsDir() {
			a.Nlink = 2
		}
	}
	a.Owner = fuse.Owner{Uid: f.ids.toKernel(fi.UID), Gid: f.ids.toKernel(fi.GID)}
	mt := fi.ModTime
	at, ct := fi.ATime, fi.CTime
	if at.IsZero() {
		at = mt
	}
	if ct.IsZero() {
		ct = mt
	}
	a.SetTimes(&at, &mt, &ct)
}
