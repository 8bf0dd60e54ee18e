package vfs

import (
	"context"
	"io"
	"io/fs"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// pageSize is the unit in which Memory stores and counts file data.
const pageSize = 4096

// Default quotas of a Memory provider.
const (
	DefaultMemoryBytes  = 1 << 30
	DefaultMemoryInodes = 1 << 20
)

// maxLinks is the most names one file may have.
const maxLinks = 65000

// MemoryOptions configures a Memory provider.
type MemoryOptions struct {
	// MaxBytes bounds the bytes stored: file data, counted in 4 KiB pages
	// that were written to (a hole costs nothing), and symlink targets.
	// 0 means DefaultMemoryBytes.
	MaxBytes int64
	// MaxInodes bounds the number of files, directories, symlinks and
	// special files, the root and removed files still open included. 0 means
	// DefaultMemoryInodes.
	MaxInodes int64
	// RootMode is the permission bits of the root directory; 0 means
	// 0755. RootUID and RootGID are its owner.
	RootMode         fs.FileMode
	RootUID, RootGID uint32
}

// Memory is a Provider that keeps its tree in memory, within quotas of
// bytes and inodes: a write that would exceed them fails with ENOSPC, and
// the tree stays usable. Files are sparse, and may have several names.
// It holds FIFOs and sockets (Mknod), never devices.
// Memory does not check permissions (the sandbox's kernel does), and
// does not update access times on reads. On Linux the files' bytes are
// in a memfd of the process that holds the provider (memory of its
// kernel, charged to its cgroup), not in its Go heap.
//
// Memory implements Watcher: every change made with a context whose
// Origin is not OriginSandbox is reported to watchers (see WithOrigin).
type Memory struct {
	mu         sync.RWMutex
	root       *memNode
	maxBytes   int64
	maxInodes  int64
	usedBytes  int64
	usedInodes int64
	nextIno    uint64
	// store holds the files' bytes (memdata.go); freeSlots are its
	// chunks that files gave back, nextSlot the first never handed out.
	store       pageStore
	storeClosed bool
	freeSlots   []int64
	nextSlot    int64
	watchMu     sync.Mutex
	watchers    map[uint64]func(string)
	nextWatchID uint64
}

type memNode struct {
	ino                 uint64
	mode                fs.FileMode
	uid, gid            uint32
	nlink               uint32 // names; a directory counts "." and its subdirectories' ".."
	open                int    // open handles
	atime, mtime, ctime time.Time

	size  int64               // regular file
	data  map[int64]*memChunk // regular file: its bytes, by MiB (memdata.go)
	pages int64               // regular file: pages written

	target string // symlink; a FIFO or a socket has only its mode

	children map[string]*memNode // directory
	sorted   []string            // directory: names in order, nil when stale
}

// NewMemory returns an empty Memory provider.
func NewMemory(opts MemoryOptions) *Memory {
	m := &Memory{
		maxBytes:  opts.MaxBytes,
		maxInodes: opts.MaxInodes,
		watchers:  make(map[uint64]func(string)),
		store:     newPageStore(),
	}
	if m.maxBytes <= 0 {
		m.maxBytes = DefaultMemoryBytes
	}
	if m.maxInodes <= 0 {
		m.maxInodes = DefaultMemoryInodes
	}
	mode := opts.RootMode & permBits
	if mode == 0 {
		mode = 0o755
	}
	now := time.Now()
	m.nextIno = 1
	m.usedInodes = 1
	m.root = &memNode{
		ino: m.nextIno, mode: fs.ModeDir | mode, uid: opts.RootUID, gid: opts.RootGID,
		nlink: 2, atime: now, mtime: now, ctime: now,
		children: make(map[string]*memNode),
	}
	return m
}

// permBits are the mode bits Chmod sets.
const permBits = fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky

// Close frees the files' bytes at once, where they would otherwise go
// only once nothing refers to the provider any more (a memfd holds them
// until the garbage collector closes it). The provider is not to be used
// after: its files' reads and writes then fail.
func (m *Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.storeClosed {
		return nil
	}
	m.storeClosed = true
	return m.store.close()
}

// Usage returns the bytes and inodes in use, as counted against the
// quotas.
func (m *Memory) Usage() (bytes, inodes int64) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.usedBytes, m.usedInodes
}

// Watch implements Watcher.
func (m *Memory) Watch(fn func(path string)) (stop func()) {
	m.watchMu.Lock()
	defer m.watchMu.Unlock()
	id := m.nextWatchID
	m.nextWatchID++
	m.watchers[id] = fn
	return func() {
		m.watchMu.Lock()
		defer m.watchMu.Unlock()
		delete(m.watchers, id)
	}
}

// notify reports paths to the watchers unless ctx comes from the sandbox.
// It must be called without m.mu held.
func (m *Memory) notify(ctx context.Context, paths ...string) {
	if OriginFrom(ctx) == OriginSandbox {
		return
	}
	m.watchMu.Lock()
	fns := make([]func(string), 0, len(m.watchers))
	for _, fn := range m.watchers {
		fns = append(fns, fn)
	}
	m.watchMu.Unlock()
	for _, fn := range fns {
		for _, p := range paths {
			fn(p)
		}
	}
}

// Readonly implements Provider.
func (m *Memory) Readonly() bool { return false }

// lookup finds the node at a clean path. m.mu must be held.
func (m *Memory) lookup(p string) (*memNode, error) {
	n := m.root
	if p == "/" {
		return n, nil
	}
	if p == "" || p[0] != '/' {
		return nil, syscall.EINVAL
	}
	for name := range strings.SplitSeq(p[1:], "/") {
		if !n.mode.IsDir() {
			if n.mode&fs.ModeSymlink != 0 {
				return nil, syscall.ELOOP
			}
			return nil, syscall.ENOTDIR
		}
		switch {
		case name == "", name == ".", name == "..":
			return nil, syscall.EINVAL
		case len(name) > MaxName:
			return nil, syscall.ENAMETOOLONG
		}
		n = n.children[name]
		if n == nil {
			return nil, syscall.ENOENT
		}
	}
	return n, nil
}

// lookupParent finds the directory that holds the last name of p, which
// is not "/". m.mu must be held.
func (m *Memory) lookupParent(p string) (*memNode, string, error) {
	if p == "/" {
		return nil, "", syscall.EBUSY
	}
	dir, name := splitPath(p)
	if name == "" || name == "." || name == ".." {
		return nil, "", syscall.EINVAL
	}
	if len(name) > MaxName {
		return nil, "", syscall.ENAMETOOLONG
	}
	d, err := m.lookup(dir)
	if err != nil {
		return nil, "", err
	}
	if d.mode&fs.ModeSymlink != 0 {
		return nil, "", syscall.ELOOP
	}
	if !d.mode.IsDir() {
		return nil, "", syscall.ENOTDIR
	}
	return d, name, nil
}

func (n *memNode) info(name string) FileInfo {
	fi := FileInfo{
		Name: name, Mode: n.mode, ModTime: n.mtime, ATime: n.atime, CTime: n.ctime,
		UID: n.uid, GID: n.gid, Nlink: n.nlink, Ino: n.ino,
	}
	switch {
	case n.mode.IsDir():
		fi.Size = pageSize
		fi.Blocks = pageSize / 512
	case n.mode&fs.ModeSymlink != 0:
		fi.Size = int64(len(n.target))
	default:
		fi.Size = n.size
		fi.Blocks = n.pages * (pageSize / 512)
	}
	return fi
}

// newNode makes a node owned by the caller, counting it against the
// inode quota. m.mu must be held.
func (m *Memory) newNode(ctx context.Context, parent *memNode, mode fs.FileMode) (*memNode, error) {
	if m.usedInodes >= m.maxInodes {
		return nil, syscall.ENOSPC
	}
	m.usedInodes++
	m.nextIno++
	now := time.Now()
	n := &memNode{ino: m.nextIno, mode: mode, nlink: 1, atime: now, mtime: now, ctime: now}
	if c, ok := CallerFrom(ctx); ok {
		n.uid, n.gid = c.UID, c.GID
	}
	if parent.mode&fs.ModeSetgid != 0 {
		n.gid = parent.gid
		if mode.IsDir() {
			n.mode |= fs.ModeSetgid
		}
	}
	return n, nil
}

// link adds a name to dir. m.mu must be held.
func (d *memNode) link(name string, n *memNode, now time.Time) {
	d.children[name] = n
	d.sorted = nil
	d.mtime, d.ctime = now, now
	if n.mode.IsDir() {
		d.nlink++
	}
}

// unlink drops a name from dir and frees the node if it was the last
// name and no handle has it open. m.mu must be held.
func (m *Memory) unlink(d *memNode, name string, now time.Time) {
	n := d.children[name]
	delete(d.children, name)
	d.sorted = nil
	d.mtime, d.ctime = now, now
	if n.mode.IsDir() {
		d.nlink--
		n.nlink = 0
	} else {
		n.nlink--
	}
	n.ctime = now
	m.maybeFree(n)
}

func (m *Memory) maybeFree(n *memNode) {
	if n.nlink > 0 || n.open > 0 {
		return
	}
	m.freeData(n)
	m.usedBytes -= int64(len(n.target))
	m.usedInodes--
	n.children = nil
}

// Stat implements Provider.
func (m *Memory) Stat(ctx context.Context, p string) (FileInfo, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	n, err := m.lookup(p)
	if err != nil {
		return FileInfo{}, err
	}
	_, name := splitPath(p)
	return n.info(name), nil
}

// Readdir implements Provider. Entries are sorted by name.
func (m *Memory) Readdir(ctx context.Context, p string) ([]FileInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.lookup(p)
	if err != nil {
		return nil, err
	}
	if !n.mode.IsDir() {
		return nil, syscall.ENOTDIR
	}
	if n.sorted == nil {
		n.sorted = make([]string, 0, len(n.children))
		for name := range n.children {
			n.sorted = append(n.sorted, name)
		}
		slices.Sort(n.sorted)
	}
	out := make([]FileInfo, len(n.sorted))
	for i, name := range n.sorted {
		out[i] = n.children[name].info(name)
	}
	return out, nil
}

// Create implements Provider.
func (m *Memory) Create(ctx context.Context, p string, mode fs.FileMode) (Handle, error) {
	return m.Open(ctx, p, os.O_RDWR|os.O_CREATE|os.O_TRUNC, mode)
}

// Open implements Provider.
func (m *Memory) Open(ctx context.Context, p string, flags int, mode fs.FileMode) (Handle, error) {
	h, changed, err := m.open(ctx, p, flags, mode)
	if changed {
		m.notify(ctx, p)
	}
	return h, err
}

func (m *Memory) open(ctx context.Context, p string, flags int, mode fs.FileMode) (h *memHandle, changed bool, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	write := flags&(os.O_WRONLY|os.O_RDWR) != 0
	var n *memNode
	if p == "/" {
		n = m.root
	} else {
		d, name, err := m.lookupParent(p)
		if err != nil {
			return nil, false, err
		}
		n = d.children[name]
		if n == nil {
			if flags&os.O_CREATE == 0 {
				return nil, false, syscall.ENOENT
			}
			n, err = m.newNode(ctx, d, mode&permBits)
			if err != nil {
				return nil, false, err
			}
			d.link(name, n, n.mtime)
			changed = true
		} else if flags&(os.O_CREATE|os.O_EXCL) == os.O_CREATE|os.O_EXCL {
			return nil, false, syscall.EEXIST
		}
	}
	if !changed {
		switch {
		case flags&(os.O_CREATE|os.O_EXCL) == os.O_CREATE|os.O_EXCL:
			return nil, false, syscall.EEXIST
		case n.mode&fs.ModeSymlink != 0:
			return nil, false, syscall.ELOOP
		case n.mode.IsDir() && (write || flags&os.O_TRUNC != 0):
			return nil, false, syscall.EISDIR
		case !n.mode.IsRegular() && !n.mode.IsDir():
			return nil, false, syscall.ENXIO
		case flags&os.O_TRUNC != 0 && write:
			m.resize(n, 0)
			n.mtime = time.Now()
			n.ctime = n.mtime
			changed = true
		}
	}
	n.open++
	return &memHandle{m: m, n: n, path: p, flags: flags}, changed, nil
}

// resize sets a regular file's size, freeing the pages past it and
// zeroing the tail of the last one. m.mu must be held.
func (m *Memory) resize(n *memNode, size int64) {
	if size < n.size {
		m.cutData(n, size)
	}
	n.size = size
}

// Mkdir implements Provider.
func (m *Memory) Mkdir(ctx context.Context, p string, mode fs.FileMode) error {
	err := m.mkdir(ctx, p, mode)
	if err == nil {
		m.notify(ctx, p)
	}
	return err
}

func (m *Memory) mkdir(ctx context.Context, p string, mode fs.FileMode) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p == "/" {
		return syscall.EEXIST
	}
	d, name, err := m.lookupParent(p)
	if err != nil {
		return err
	}
	if d.children[name] != nil {
		return syscall.EEXIST
	}
	n, err := m.newNode(ctx, d, fs.ModeDir|mode&permBits)
	if err != nil {
		return err
	}
	n.nlink = 2
	n.children = make(map[string]*memNode)
	d.link(name, n, n.mtime)
	return nil
}

// Remove implements Provider.
func (m *Memory) Remove(ctx context.Context, p string) error {
	err := m.remove(p)
	if err == nil {
		m.notify(ctx, p)
	}
	return err
}

func (m *Memory) remove(p string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, name, err := m.lookupParent(p)
	if err != nil {
		return err
	}
	n := d.children[name]
	switch {
	case n == nil:
		return syscall.ENOENT
	case n.mode.IsDir() && len(n.children) > 0:
		return syscall.ENOTEMPTY
	}
	m.unlink(d, name, time.Now())
	return nil
}

// Rename implements Provider.
func (m *Memory) Rename(ctx context.Context, oldPath, newPath string) error {
	err := m.rename(oldPath, newPath)
	if err == nil {
		m.notify(ctx, oldPath, newPath)
	}
	return err
}

func (m *Memory) rename(oldPath, newPath string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	od, oname, err := m.lookupParent(oldPath)
	if err != nil {
		return err
	}
	nd, nname, err := m.lookupParent(newPath)
	if err != nil {
		return err
	}
	src := od.children[oname]
	if src == nil {
		return syscall.ENOENT
	}
	dst := nd.children[nname]
	if dst == src {
		return nil
	}
	switch {
	case src.mode.IsDir() && isWithin(newPath, oldPath):
		return syscall.EINVAL
	case isWithin(oldPath, newPath):
		return syscall.ENOTEMPTY // newPath is an ancestor of oldPath
	}
	if dst != nil {
		switch {
		case src.mode.IsDir() && !dst.mode.IsDir():
			return syscall.ENOTDIR
		case !src.mode.IsDir() && dst.mode.IsDir():
			return syscall.EISDIR
		case dst.mode.IsDir() && len(dst.children) > 0:
			return syscall.ENOTEMPTY
		}
	}
	now := time.Now()
	if dst != nil {
		m.unlink(nd, nname, now)
	}
	delete(od.children, oname)
	od.sorted = nil
	od.mtime, od.ctime = now, now
	if src.mode.IsDir() {
		od.nlink--
	}
	nd.link(nname, src, now)
	src.ctime = now
	return nil
}

// Symlink implements Provider.
func (m *Memory) Symlink(ctx context.Context, target, link string) error {
	err := m.symlink(ctx, target, link)
	if err == nil {
		m.notify(ctx, link)
	}
	return err
}

func (m *Memory) symlink(ctx context.Context, target, link string) error {
	switch {
	case target == "":
		return syscall.ENOENT
	case len(target) >= MaxTarget:
		return syscall.ENAMETOOLONG
	}
	for i := range len(target) {
		if target[i] == 0 {
			return syscall.EINVAL
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if link == "/" {
		return syscall.EEXIST
	}
	d, name, err := m.lookupParent(link)
	if err != nil {
		return err
	}
	if d.children[name] != nil {
		return syscall.EEXIST
	}
	if m.usedBytes+int64(len(target)) > m.maxBytes {
		return syscall.ENOSPC
	}
	n, err := m.newNode(ctx, d, fs.ModeSymlink|0o777)
	if err != nil {
		return err
	}
	n.target = target
	m.usedBytes += int64(len(target))
	d.link(name, n, n.mtime)
	return nil
}

// Mknod implements Provider: a FIFO or a socket, never a device (EPERM).
func (m *Memory) Mknod(ctx context.Context, p string, mode fs.FileMode) error {
	err := m.mknod(ctx, p, mode)
	if err == nil {
		m.notify(ctx, p)
	}
	return err
}

func (m *Memory) mknod(ctx context.Context, p string, mode fs.FileMode) error {
	if err := CheckMknod(mode); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if p == "/" {
		return syscall.EEXIST
	}
	d, name, err := m.lookupParent(p)
	if err != nil {
		return err
	}
	if d.children[name] != nil {
		return syscall.EEXIST
	}
	n, err := m.newNode(ctx, d, mode.Type()|mode&permBits)
	if err != nil {
		return err
	}
	d.link(name, n, n.mtime)
	return nil
}

// Readlink implements Provider.
func (m *Memory) Readlink(ctx context.Context, p string) (string, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	n, err := m.lookup(p)
	if err != nil {
		return "", err
	}
	if n.mode&fs.ModeSymlink == 0 {
		return "", syscall.EINVAL
	}
	return n.target, nil
}

// Link implements Provider.
func (m *Memory) Link(ctx context.Context, oldPath, newPath string) error {
	err := m.link(oldPath, newPath)
	if err == nil {
		m.notify(ctx, oldPath, newPath)
	}
	return err
}

func (m *Memory) link(oldPath, newPath string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.lookup(oldPath)
	if err != nil {
		return err
	}
	if newPath == "/" {
		return syscall.EEXIST
	}
	d, name, err := m.lookupParent(newPath)
	if err != nil {
		return err
	}
	switch {
	case d.children[name] != nil:
		return syscall.EEXIST
	case n.mode.IsDir():
		return syscall.EPERM
	case n.nlink >= maxLinks:
		return syscall.EMLINK
	}
	now := time.Now()
	n.nlink++
	n.ctime = now
	d.link(name, n, now)
	return nil
}

// setattr runs fn on the node at p under the lock, then notifies.
func (m *Memory) setattr(ctx context.Context, p string, fn func(n *memNode, now time.Time) error) error {
	m.mu.Lock()
	n, err := m.lookup(p)
	if err == nil {
		err = fn(n, time.Now())
	}
	m.mu.Unlock()
	if err == nil {
		m.notify(ctx, p)
	}
	return err
}

// Chmod implements Provider. A symlink's mode cannot be changed
// (EOPNOTSUPP), as on Linux.
func (m *Memory) Chmod(ctx context.Context, p string, mode fs.FileMode) error {
	return m.setattr(ctx, p, func(n *memNode, now time.Time) error {
		if n.mode&fs.ModeSymlink != 0 {
			return syscall.EOPNOTSUPP
		}
		n.mode = n.mode&^permBits | mode&permBits
		n.ctime = now
		return nil
	})
}

// Chown implements Provider. Changing the owner of a file that is not a
// directory clears its set-user-ID bit, and its set-group-ID bit if it is
// group-executable, as Linux does.
func (m *Memory) Chown(ctx context.Context, p string, uid, gid int) error {
	if uid < -1 || gid < -1 || uid > math.MaxUint32 || gid > math.MaxUint32 {
		return syscall.EINVAL
	}
	return m.setattr(ctx, p, func(n *memNode, now time.Time) error {
		if uid != -1 {
			n.uid = uint32(uid)
		}
		if gid != -1 {
			n.gid = uint32(gid)
		}
		if (uid != -1 || gid != -1) && !n.mode.IsDir() && n.mode&fs.ModeSymlink == 0 {
			killPriv(n)
		}
		n.ctime = now
		return nil
	})
}

// killPriv clears the set-id bits as a write or chown does.
func killPriv(n *memNode) {
	n.mode &^= fs.ModeSetuid
	if n.mode&0o010 != 0 {
		n.mode &^= fs.ModeSetgid
	}
}

// Truncate implements Provider.
func (m *Memory) Truncate(ctx context.Context, p string, size int64) error {
	return m.setattr(ctx, p, func(n *memNode, now time.Time) error {
		return m.truncate(ctx, n, size, now)
	})
}

func (m *Memory) truncate(ctx context.Context, n *memNode, size int64, now time.Time) error {
	switch {
	case n.mode.IsDir():
		return syscall.EISDIR
	case !n.mode.IsRegular():
		return syscall.EINVAL
	case size < 0:
		return syscall.EINVAL
	}
	m.resize(n, size)
	n.mtime, n.ctime = now, now
	if c, ok := CallerFrom(ctx); ok && c.UID != 0 {
		killPriv(n)
	}
	return nil
}

// Utimens implements Provider.
func (m *Memory) Utimens(ctx context.Context, p string, atime, mtime *time.Time) error {
	return m.setattr(ctx, p, func(n *memNode, now time.Time) error {
		if atime != nil {
			n.atime = *atime
		}
		if mtime != nil {
			n.mtime = *mtime
		}
		n.ctime = now
		return nil
	})
}

// Statfs implements Provider: the whole tree is one file system, whose
// size is the quota.
func (m *Memory) Statfs(ctx context.Context, _ string) (StatFS, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return StatFS{
		TotalBytes: uint64(m.maxBytes),
		FreeBytes:  uint64(max(0, m.maxBytes-m.usedBytes)),
		TotalFiles: uint64(m.maxInodes),
		FreeFiles:  uint64(max(0, m.maxInodes-m.usedInodes)),
		NameMax:    MaxName,
	}, nil
}

// memHandle is an open Memory file.
type memHandle struct {
	m      *Memory
	n      *memNode
	path   string
	flags  int
	closed bool // guarded by m.mu
}

func (h *memHandle) canRead() bool  { return h.flags&(os.O_WRONLY|os.O_RDWR) != os.O_WRONLY }
func (h *memHandle) canWrite() bool { return h.flags&(os.O_WRONLY|os.O_RDWR) != 0 }

// ReadAt implements Handle.
func (h *memHandle) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	h.m.mu.RLock()
	defer h.m.mu.RUnlock()
	n := h.n
	switch {
	case h.closed:
		return 0, syscall.EBADF
	case n.mode.IsDir():
		return 0, syscall.EISDIR
	case !h.canRead():
		return 0, syscall.EBADF
	case off < 0:
		return 0, syscall.EINVAL
	case off >= n.size:
		return 0, io.EOF
	}
	want := min(int64(len(p)), n.size-off)
	if err := h.m.readData(n, p[:want], off); err != nil {
		return 0, err
	}
	done := want
	if done < int64(len(p)) {
		return int(done), io.EOF
	}
	return int(done), nil
}

// WriteAt implements Handle. When the byte quota runs out part way, it
// writes the pages that fit and returns their count with ENOSPC.
func (h *memHandle) WriteAt(ctx context.Context, p []byte, off int64) (int, error) {
	n, err := h.writeAt(ctx, p, off)
	if n > 0 {
		h.m.notify(ctx, h.path)
	}
	return n, err
}

func (h *memHandle) writeAt(ctx context.Context, p []byte, off int64) (int, error) {
	m := h.m
	m.mu.Lock()
	defer m.mu.Unlock()
	n := h.n
	switch {
	case h.closed, !h.canWrite():
		return 0, syscall.EBADF
	case n.mode.IsDir():
		return 0, syscall.EISDIR
	}
	if h.flags&os.O_APPEND != 0 {
		off = n.size
	}
	if off < 0 {
		return 0, syscall.EINVAL
	}
	if len(p) == 0 {
		return 0, nil
	}
	if off > math.MaxInt64-int64(len(p)) {
		return 0, syscall.EFBIG
	}
	wrote, err := m.writeData(n, p, off)
	done := int64(wrote)
	if done > 0 {
		n.size = max(n.size, off+done)
		n.mtime = time.Now()
		n.ctime = n.mtime
		if c, ok := CallerFrom(ctx); ok && c.UID != 0 {
			killPriv(n)
		}
	}
	return int(done), err
}

// Stat implements Handle.
func (h *memHandle) Stat(ctx context.Context) (FileInfo, error) {
	h.m.mu.RLock()
	defer h.m.mu.RUnlock()
	if h.closed {
		return FileInfo{}, syscall.EBADF
	}
	_, name := splitPath(h.path)
	return h.n.info(name), nil
}

// Truncate implements Handle.
func (h *memHandle) Truncate(ctx context.Context, size int64) error {
	m := h.m
	m.mu.Lock()
	var err error
	switch {
	case h.closed:
		err = syscall.EBADF
	case !h.canWrite():
		err = syscall.EINVAL
	default:
		err = m.truncate(ctx, h.n, size, time.Now())
	}
	m.mu.Unlock()
	if err == nil {
		m.notify(ctx, h.path)
	}
	return err
}

// Sync implements Handle.
func (h *memHandle) Sync(ctx context.Context) error {
	h.m.mu.RLock()
	defer h.m.mu.RUnlock()
	if h.closed {
		return syscall.EBADF
	}
	return nil
}

// Close implements Handle.
func (h *memHandle) Close() error {
	h.m.mu.Lock()
	defer h.m.mu.Unlock()
	if h.closed {
		return syscall.EBADF
	}
	h.closed = true
	h.n.open--
	h.m.maybeFree(h.n)
	return nil
}
