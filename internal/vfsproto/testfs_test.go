package vfsproto

import (
	"context"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/vfs"
)

// testFS is a small in-memory provider for the tests: enough of POSIX to
// see every op travel.
type testFS struct {
	mu    sync.Mutex
	nodes map[string]*testNode
	ino   uint64
	ro    bool
	// open counts the handles open.
	open atomic.Int64
}

type testNode struct {
	mode   fs.FileMode
	data   []byte
	target string
	uid    uint32
	gid    uint32
	mtime  time.Time
	atime  time.Time
	ino    uint64
	nlink  uint32
}

func newTestFS() *testFS {
	t := &testFS{nodes: map[string]*testNode{}}
	t.nodes["/"] = &testNode{mode: fs.ModeDir | 0o755, ino: 1}
	t.ino = 1
	return t
}

func (t *testFS) Readonly() bool { return t.ro }

func (t *testFS) info(p string, n *testNode) vfs.FileInfo {
	return vfs.FileInfo{
		Name: path.Base(p), Size: int64(len(n.data)), Mode: n.mode,
		ModTime: n.mtime, ATime: n.atime, UID: n.uid, GID: n.gid,
		Ino: n.ino, Nlink: n.nlink,
	}
}

func (t *testFS) Stat(ctx context.Context, p string) (vfs.FileInfo, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.nodes[p]
	if n == nil {
		return vfs.FileInfo{}, syscall.ENOENT
	}
	return t.info(p, n), nil
}

func (t *testFS) Readdir(ctx context.Context, p string) ([]vfs.FileInfo, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.nodes[p]
	if n == nil {
		return nil, syscall.ENOENT
	}
	if !n.mode.IsDir() {
		return nil, syscall.ENOTDIR
	}
	var out []vfs.FileInfo
	for q, c := range t.nodes {
		if q != "/" && path.Dir(q) == p {
			out = append(out, t.info(q, c))
		}
	}
	slices.SortFunc(out, func(a, b vfs.FileInfo) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	return out, nil
}

// parent checks that p's parent is a directory; t.mu is held.
func (t *testFS) parent(p string) error {
	d := t.nodes[path.Dir(p)]
	if d == nil {
		return syscall.ENOENT
	}
	if !d.mode.IsDir() {
		return syscall.ENOTDIR
	}
	return nil
}

func (t *testFS) newNode(ctx context.Context, mode fs.FileMode) *testNode {
	c, _ := vfs.CallerFrom(ctx)
	t.ino++
	return &testNode{mode: mode, uid: c.UID, gid: c.GID, ino: t.ino, nlink: 1, mtime: time.Unix(1, 0)}
}

func (t *testFS) Open(ctx context.Context, p string, flags int, mode fs.FileMode) (vfs.Handle, error) {
	if t.ro && flags&(os.O_WRONLY|os.O_RDWR|os.O_CREATE|os.O_TRUNC) != 0 {
		return nil, syscall.EROFS
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.nodes[p]
	switch {
	case n == nil && flags&os.O_CREATE == 0:
		return nil, syscall.ENOENT
	case n == nil:
		if err := t.parent(p); err != nil {
			return nil, err
		}
		n = t.newNode(ctx, mode.Perm())
		t.nodes[p] = n
	case flags&(os.O_CREATE|os.O_EXCL) == os.O_CREATE|os.O_EXCL:
		return nil, syscall.EEXIST
	case n.mode.IsDir() && flags&(os.O_WRONLY|os.O_RDWR) != 0:
		return nil, syscall.EISDIR
	}
	if flags&os.O_TRUNC != 0 {
		n.data = nil
	}
	t.open.Add(1)
	return &testHandle{t: t, n: n, p: p, append: flags&os.O_APPEND != 0}, nil
}

func (t *testFS) Create(ctx context.Context, p string, mode fs.FileMode) (vfs.Handle, error) {
	return t.Open(ctx, p, os.O_RDWR|os.O_CREATE|os.O_TRUNC, mode)
}

func (t *testFS) add(ctx context.Context, p string, n *testNode) error {
	if t.ro {
		return syscall.EROFS
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.parent(p); err != nil {
		return err
	}
	if t.nodes[p] != nil {
		return syscall.EEXIST
	}
	t.nodes[p] = n
	return nil
}

func (t *testFS) Mkdir(ctx context.Context, p string, mode fs.FileMode) error {
	t.mu.Lock()
	n := t.newNode(ctx, fs.ModeDir|mode)
	t.mu.Unlock()
	return t.add(ctx, p, n)
}

func (t *testFS) Remove(ctx context.Context, p string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.nodes[p]
	if n == nil {
		return syscall.ENOENT
	}
	if n.mode.IsDir() {
		for q := range t.nodes {
			if q != "/" && path.Dir(q) == p {
				return syscall.ENOTEMPTY
			}
		}
	}
	delete(t.nodes, p)
	n.nlink--
	return nil
}

func (t *testFS) Rename(ctx context.Context, o, n string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	node := t.nodes[o]
	if node == nil {
		return syscall.ENOENT
	}
	if err := t.parent(n); err != nil {
		return err
	}
	delete(t.nodes, o)
	t.nodes[n] = node
	return nil
}

func (t *testFS) Symlink(ctx context.Context, target, link string) error {
	t.mu.Lock()
	n := t.newNode(ctx, fs.ModeSymlink|0o777)
	t.mu.Unlock()
	n.target = target
	return t.add(ctx, link, n)
}

func (t *testFS) Mknod(ctx context.Context, p string, mode fs.FileMode) error {
	if err := vfs.CheckMknod(mode); err != nil {
		return err
	}
	t.mu.Lock()
	n := t.newNode(ctx, mode.Type()|mode.Perm())
	t.mu.Unlock()
	return t.add(ctx, p, n)
}

func (t *testFS) Readlink(ctx context.Context, p string) (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.nodes[p]
	if n == nil {
		return "", syscall.ENOENT
	}
	if n.mode&fs.ModeSymlink == 0 {
		return "", syscall.EINVAL
	}
	return n.target, nil
}

func (t *testFS) Link(ctx context.Context, o, n string) error {
	t.mu.Lock()
	node := t.nodes[o]
	t.mu.Unlock()
	if node == nil {
		return syscall.ENOENT
	}
	if err := t.add(ctx, n, node); err != nil {
		return err
	}
	t.mu.Lock()
	node.nlink++
	t.mu.Unlock()
	return nil
}

func (t *testFS) with(p string, fn func(n *testNode) error) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.nodes[p]
	if n == nil {
		return syscall.ENOENT
	}
	return fn(n)
}

func (t *testFS) Chmod(ctx context.Context, p string, mode fs.FileMode) error {
	return t.with(p, func(n *testNode) error {
		n.mode = n.mode.Type() | mode
		return nil
	})
}

func (t *testFS) Chown(ctx context.Context, p string, uid, gid int) error {
	return t.with(p, func(n *testNode) error {
		if uid != -1 {
			n.uid = uint32(uid)
		}
		if gid != -1 {
			n.gid = uint32(gid)
		}
		return nil
	})
}

func (t *testFS) Truncate(ctx context.Context, p string, size int64) error {
	if size > 1<<24 {
		return syscall.EFBIG
	}
	return t.with(p, func(n *testNode) error {
		n.data = resize(n.data, size)
		return nil
	})
}

func resize(b []byte, size int64) []byte {
	if int64(len(b)) >= size {
		return b[:size]
	}
	return append(b, make([]byte, size-int64(len(b)))...)
}

func (t *testFS) Utimens(ctx context.Context, p string, atime, mtime *time.Time) error {
	return t.with(p, func(n *testNode) error {
		if atime != nil {
			n.atime = *atime
		}
		if mtime != nil {
			n.mtime = *mtime
		}
		return nil
	})
}

func (t *testFS) Statfs(ctx context.Context, _ string) (vfs.StatFS, error) {
	return vfs.StatFS{TotalBytes: 1 << 30, FreeBytes: 1 << 29, TotalFiles: 1000, FreeFiles: 999, NameMax: 255}, nil
}

type testHandle struct {
	t      *testFS
	n      *testNode
	p      string
	append bool
	closed atomic.Bool
}

func (h *testHandle) ReadAt(ctx context.Context, b []byte, off int64) (int, error) {
	h.t.mu.Lock()
	defer h.t.mu.Unlock()
	if off >= int64(len(h.n.data)) {
		return 0, io.EOF
	}
	n := copy(b, h.n.data[off:])
	if n < len(b) {
		return n, io.EOF
	}
	return n, nil
}

func (h *testHandle) WriteAt(ctx context.Context, b []byte, off int64) (int, error) {
	h.t.mu.Lock()
	defer h.t.mu.Unlock()
	if h.append {
		off = int64(len(h.n.data))
	}
	if off+int64(len(b)) > 1<<24 {
		return 0, syscall.EFBIG
	}
	if end := off + int64(len(b)); end > int64(len(h.n.data)) {
		h.n.data = resize(h.n.data, end)
	}
	return copy(h.n.data[off:], b), nil
}

func (h *testHandle) Stat(ctx context.Context) (vfs.FileInfo, error) {
	h.t.mu.Lock()
	defer h.t.mu.Unlock()
	return h.t.info(h.p, h.n), nil
}

func (h *testHandle) Truncate(ctx context.Context, size int64) error {
	if size > 1<<24 {
		return syscall.EFBIG
	}
	h.t.mu.Lock()
	defer h.t.mu.Unlock()
	h.n.data = resize(h.n.data, size)
	return nil
}

func (h *testHandle) Sync(ctx context.Context) error { return nil }

func (h *testHandle) Close() error {
	if h.closed.Swap(true) {
		return syscall.EBADF
	}
	h.t.open.Add(-1)
	return nil
}
