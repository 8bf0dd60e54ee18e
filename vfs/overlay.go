package vfs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Names the overlay keeps in its upper layer. No name that starts with
// hiddenPrefix is ever shown, in either layer, nor accepted from a caller.
const (
	hiddenPrefix = ".airlock-"
	// whiteoutPrefix+name, in a directory of the upper, hides name of the
	// lower; whiteoutHashPrefix+hex(sha256(name)) does for names too long
	// for the first form.
	whiteoutPrefix     = ".airlock-wh."
	whiteoutHashPrefix = ".airlock-wh#"
	// opaqueName, in a directory of the upper, hides the whole directory
	// of the same path in the lower.
	opaqueName = ".airlock-opaque"
	// tmpPrefix names files being copied up, renamed into place when whole.
	tmpPrefix = ".airlock-tmp."
)

// copyBuf is the size of the reads and writes of a copy-up.
const copyBuf = 1 << 20

// NewOverlay returns a copy-on-write union of upper over lower: a name in
// upper hides the same name in lower, directories present in both are
// merged, and every change is made in upper. lower is never changed, and
// may be read-only.
//
// A file of lower is copied whole into upper (with its mode, owner and
// times) before it is opened for writing, truncated, or its metadata
// changed, linked or renamed (a FIFO or a socket is made anew in upper,
// a device cannot be: EOPNOTSUPP); a directory of lower is made in upper
// (empty) before anything is made in it. Renaming a directory that has
// entries in lower copies its whole tree up first.
//
// Removed names of lower are hidden by whiteouts: an empty file named
// ".airlock-wh.NAME" in the upper's directory (".airlock-wh#" and the
// hex SHA-256 of NAME for names over 243 bytes); a directory made where
// lower had one removed, or renamed into place, is marked opaque with an
// empty file ".airlock-opaque" in it, and then shows nothing of lower.
// Names starting with ".airlock-" are reserved: they never show in
// Readdir or Stat, and a caller cannot make one (EPERM). Upper keeps the
// overlay's state whole, so an overlay made again over the same layers
// shows the same tree.
//
// Inode numbers are the upper's doubled and the lower's doubled plus
// one, so a file's number changes when it is copied up. Hard links of
// lower become separate files when one of them is copied up, and a
// handle opened for reading before a copy-up keeps reading the lower
// file. Watch reports the changes of both layers.
func NewOverlay(upper, lower Provider) Provider {
	return &overlay{upper: upper, lower: lower}
}

type overlay struct {
	upper, lower Provider
	mu           sync.Mutex // serializes changes
	tmpSeq       atomic.Uint64
}

// reserved reports whether a component of p is a reserved name.
func reserved(p string) bool {
	return strings.Contains(p, "/"+hiddenPrefix)
}

func whiteoutName(name string) string {
	if len(whiteoutPrefix)+len(name) <= MaxName {
		return whiteoutPrefix + name
	}
	sum := sha256.Sum256([]byte(name))
	return whiteoutHashPrefix + hex.EncodeToString(sum[:])
}

func mapIno(fi FileInfo, upper bool) FileInfo {
	if fi.Ino != 0 {
		fi.Ino <<= 1
		if !upper {
			fi.Ino |= 1
		}
	}
	return fi
}

func isErrno(err error, e syscall.Errno) bool { return err != nil && Errno(err) == e }

func (o *overlay) exists(ctx context.Context, p string) bool {
	_, err := o.upper.Stat(ctx, p)
	return err == nil
}

// lowerVisible reports whether lower's entry at p, if any, would show
// were upper not to have p itself: no whiteout of p or an ancestor, no
// opaque ancestor, and no ancestor that is not a directory in upper.
func (o *overlay) lowerVisible(ctx context.Context, p string) (bool, error) {
	dir := "/"
	rest := p[1:]
	for rest != "" {
		name, tail, _ := strings.Cut(rest, "/")
		if o.exists(ctx, joinPath(dir, opaqueName)) || o.exists(ctx, joinPath(dir, whiteoutName(name))) {
			return false, nil
		}
		q := joinPath(dir, name)
		if tail == "" {
			return true, nil
		}
		fi, err := o.upper.Stat(ctx, q)
		switch {
		case isErrno(err, syscall.ENOENT):
			return true, nil // upper has nothing at or below q
		case err != nil:
			return false, err
		case !fi.IsDir():
			return false, nil
		}
		dir, rest = q, tail
	}
	return true, nil
}

// resolve finds p in the merged tree, and says which layer has it.
func (o *overlay) resolve(ctx context.Context, p string) (fi FileInfo, inUpper bool, err error) {
	if reserved(p) {
		return FileInfo{}, false, syscall.ENOENT
	}
	fi, err = o.upper.Stat(ctx, p)
	if err == nil {
		return mapIno(fi, true), true, nil
	}
	if !isErrno(err, syscall.ENOENT) {
		return FileInfo{}, false, err
	}
	vis, err := o.lowerVisible(ctx, p)
	if err != nil {
		return FileInfo{}, false, err
	}
	if !vis {
		return FileInfo{}, false, syscall.ENOENT
	}
	fi, err = o.lower.Stat(ctx, p)
	if err != nil {
		return FileInfo{}, false, err
	}
	return mapIno(fi, false), false, nil
}

// lowerShows reports whether removing p from upper would leave lower's p
// showing, so that a whiteout is needed.
func (o *overlay) lowerShows(ctx context.Context, p string) (bool, error) {
	vis, err := o.lowerVisible(ctx, p)
	if err != nil || !vis {
		return false, err
	}
	_, err = o.lower.Stat(ctx, p)
	switch {
	case err == nil:
		return true, nil
	case isErrno(err, syscall.ENOENT), isErrno(err, syscall.ENOTDIR):
		return false, nil
	}
	return false, err
}

func (o *overlay) addWhiteout(ctx context.Context, p string) error {
	dir, name := splitPath(p)
	h, err := o.upper.Open(ctx, joinPath(dir, whiteoutName(name)), os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	return h.Close()
}

func (o *overlay) dropWhiteout(ctx context.Context, p string) error {
	dir, name := splitPath(p)
	err := o.upper.Remove(ctx, joinPath(dir, whiteoutName(name)))
	if isErrno(err, syscall.ENOENT) {
		return nil
	}
	return err
}

func (o *overlay) markOpaque(ctx context.Context, dir string) error {
	h, err := o.upper.Open(ctx, joinPath(dir, opaqueName), os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	return h.Close()
}

// clearHidden removes the overlay's own names from an upper directory.
func (o *overlay) clearHidden(ctx context.Context, dir string) error {
	list, err := o.upper.Readdir(ctx, dir)
	if err != nil {
		return err
	}
	for _, e := range list {
		if strings.HasPrefix(e.Name, hiddenPrefix) {
			if err := o.upper.Remove(ctx, joinPath(dir, e.Name)); err != nil && !isErrno(err, syscall.ENOENT) {
				return err
			}
		}
	}
	return nil
}

// copyUp makes p, which exists in the merged tree, exist in upper, with
// its parents. o.mu must be held.
func (o *overlay) copyUp(ctx context.Context, p string) error {
	if p == "/" {
		return nil
	}
	fi, inUpper, err := o.resolve(ctx, p)
	if err != nil || inUpper {
		return err
	}
	dir, _ := splitPath(p)
	if err := o.copyUp(ctx, dir); err != nil {
		return err
	}
	switch {
	case fi.IsDir():
		if err := o.upper.Mkdir(ctx, p, fi.Mode&permBits); err != nil {
			return err
		}
		return o.copyMeta(ctx, p, fi)
	case fi.Mode&fs.ModeSymlink != 0:
		target, err := o.lower.Readlink(ctx, p)
		if err != nil {
			return err
		}
		if err := o.upper.Symlink(ctx, target, p); err != nil {
			return err
		}
		return o.copyMeta(ctx, p, fi)
	case fi.Mode.IsRegular():
		tmp := joinPath(dir, tmpPrefix+strconv.FormatUint(o.tmpSeq.Add(1), 10))
		if err := o.copyFile(ctx, p, tmp, fi); err != nil {
			o.upper.Remove(ctx, tmp)
			return err
		}
		if err := o.upper.Rename(ctx, tmp, p); err != nil {
			o.upper.Remove(ctx, tmp)
			return err
		}
		return nil
	case fi.Mode.Type() == fs.ModeNamedPipe, fi.Mode.Type() == fs.ModeSocket:
		// A FIFO or a socket has no data: its copy is a new one.
		if err := o.upper.Mknod(ctx, p, fi.Mode.Type()|fi.Mode&permBits); err != nil {
			return err
		}
		return o.copyMeta(ctx, p, fi)
	}
	// A device of lower cannot be made in upper.
	return syscall.EOPNOTSUPP
}

// copyFile copies lower's regular file at p to upper's tmp, leaving holes
// where lower has blocks of zeros.
func (o *overlay) copyFile(ctx context.Context, p, tmp string, fi FileInfo) error {
	src, err := o.lower.Open(ctx, p, os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := o.upper.Open(ctx, tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	buf := make([]byte, min(copyBuf, max(fi.Size, 1)))
	var off int64
	for {
		n, rerr := src.ReadAt(ctx, buf, off)
		if n > 0 && slices.ContainsFunc(buf[:n], func(b byte) bool { return b != 0 }) {
			if _, err := dst.WriteAt(ctx, buf[:n], off); err != nil {
				dst.Close()
				return err
			}
		}
		off += int64(n)
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			dst.Close()
			return rerr
		}
		if n == 0 {
			dst.Close()
			return syscall.EIO
		}
	}
	if err := dst.Truncate(ctx, off); err != nil {
		dst.Close()
		return err
	}
	if err := dst.Close(); err != nil {
		return err
	}
	return o.copyMeta(ctx, tmp, fi)
}

// copyMeta gives upper's p the owner, mode and times of fi. An upper that
// may not change owners keeps its own.
func (o *overlay) copyMeta(ctx context.Context, p string, fi FileInfo) error {
	if err := o.upper.Chown(ctx, p, int(fi.UID), int(fi.GID)); err != nil && !isErrno(err, syscall.EPERM) {
		return err
	}
	if fi.Mode&fs.ModeSymlink == 0 {
		if err := o.upper.Chmod(ctx, p, fi.Mode&permBits); err != nil {
			return err
		}
	}
	at := fi.ATime
	if at.IsZero() {
		at = fi.ModTime
	}
	mt := fi.ModTime
	return o.upper.Utimens(ctx, p, &at, &mt)
}

// copyUpTree copies up directory p and everything below it, then marks it
// opaque: the result no longer depends on lower.
func (o *overlay) copyUpTree(ctx context.Context, p string) error {
	if err := o.copyUp(ctx, p); err != nil {
		return err
	}
	list, err := o.readdir(ctx, p)
	if err != nil {
		return err
	}
	for _, e := range list {
		child := joinPath(p, e.Name)
		if e.IsDir() {
			err = o.copyUpTree(ctx, child)
		} else {
			err = o.copyUp(ctx, child)
		}
		if err != nil {
			return err
		}
	}
	if o.exists(ctx, joinPath(p, opaqueName)) {
		return nil
	}
	return o.markOpaque(ctx, p)
}

// checkParent checks that p's parent is a directory of the merged tree.
func (o *overlay) checkParent(ctx context.Context, p string) error {
	dir, _ := splitPath(p)
	fi, _, err := o.resolve(ctx, dir)
	switch {
	case err != nil:
		return err
	case fi.Mode&fs.ModeSymlink != 0:
		return syscall.ELOOP
	case !fi.IsDir():
		return syscall.ENOTDIR
	}
	return nil
}

// parentDir checks that p's parent is a directory of the merged tree and
// copies it up.
func (o *overlay) parentDir(ctx context.Context, p string) error {
	if err := o.checkParent(ctx, p); err != nil {
		return err
	}
	dir, _ := splitPath(p)
	return o.copyUp(ctx, dir)
}

func (o *overlay) Readonly() bool { return o.upper.Readonly() }

func (o *overlay) Stat(ctx context.Context, p string) (FileInfo, error) {
	fi, _, err := o.resolve(ctx, p)
	return fi, err
}

func (o *overlay) Readdir(ctx context.Context, p string) ([]FileInfo, error) {
	return o.readdir(ctx, p)
}

func (o *overlay) readdir(ctx context.Context, p string) ([]FileInfo, error) {
	fi, inUpper, err := o.resolve(ctx, p)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, syscall.ENOTDIR
	}
	var out []FileInfo
	seen := make(map[string]bool)
	hidden := make(map[string]bool)
	opaque := false
	if inUpper {
		list, err := o.upper.Readdir(ctx, p)
		if err != nil {
			return nil, err
		}
		for _, e := range list {
			switch {
			case e.Name == opaqueName:
				opaque = true
			case strings.HasPrefix(e.Name, hiddenPrefix):
				hidden[e.Name] = true
			default:
				seen[e.Name] = true
				out = append(out, mapIno(e, true))
			}
		}
	}
	if !opaque {
		vis, err := o.lowerVisible(ctx, p)
		if err != nil {
			return nil, err
		}
		if vis {
			list, err := o.lower.Readdir(ctx, p)
			switch {
			case err == nil:
				for _, e := range list {
					if !seen[e.Name] && !hidden[whiteoutName(e.Name)] && !strings.HasPrefix(e.Name, hiddenPrefix) {
						out = append(out, mapIno(e, false))
					}
				}
			case !inUpper, !isErrno(err, syscall.ENOENT) && !isErrno(err, syscall.ENOTDIR):
				return nil, err
			}
		}
	}
	slices.SortFunc(out, func(a, b FileInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (o *overlay) Create(ctx context.Context, p string, mode fs.FileMode) (Handle, error) {
	return o.Open(ctx, p, os.O_RDWR|os.O_CREATE|os.O_TRUNC, mode)
}

func (o *overlay) Open(ctx context.Context, p string, flags int, mode fs.FileMode) (Handle, error) {
	if reserved(p) {
		if flags&os.O_CREATE != 0 {
			return nil, syscall.EPERM
		}
		return nil, syscall.ENOENT
	}
	if flags&writeFlags == 0 {
		_, inUpper, err := o.resolve(ctx, p)
		if err != nil {
			return nil, err
		}
		layer := o.lower
		if inUpper {
			layer = o.upper
		}
		h, err := layer.Open(ctx, p, flags, mode)
		if err != nil {
			return nil, err
		}
		return overlayHandle{h, inUpper}, nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	fi, inUpper, err := o.resolve(ctx, p)
	switch {
	case err == nil:
		switch {
		case flags&(os.O_CREATE|os.O_EXCL) == os.O_CREATE|os.O_EXCL:
			return nil, syscall.EEXIST
		case fi.Mode&fs.ModeSymlink != 0:
			return nil, syscall.ELOOP
		case fi.IsDir():
			return nil, syscall.EISDIR
		case !fi.Mode.IsRegular():
			// A FIFO, a socket or a device: nothing to open here, and
			// nothing to copy up for it.
			return nil, syscall.ENXIO
		}
		if !inUpper {
			if err := o.copyUp(ctx, p); err != nil {
				return nil, err
			}
		}
		h, err := o.upper.Open(ctx, p, flags&^os.O_EXCL, mode)
		if err != nil {
			return nil, err
		}
		return overlayHandle{h, true}, nil
	case isErrno(err, syscall.ENOENT) && flags&os.O_CREATE != 0:
		if err := o.parentDir(ctx, p); err != nil {
			return nil, err
		}
		h, err := o.upper.Open(ctx, p, flags|os.O_EXCL, mode)
		if err != nil {
			return nil, err
		}
		if err := o.dropWhiteout(ctx, p); err != nil {
			h.Close()
			return nil, err
		}
		return overlayHandle{h, true}, nil
	}
	return nil, err
}

func (o *overlay) Mkdir(ctx context.Context, p string, mode fs.FileMode) error {
	if reserved(p) {
		return syscall.EPERM
	}
	if p == "/" {
		return syscall.EEXIST
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, _, err := o.resolve(ctx, p); err == nil {
		return syscall.EEXIST
	} else if !isErrno(err, syscall.ENOENT) {
		return err
	}
	if err := o.parentDir(ctx, p); err != nil {
		return err
	}
	dir, name := splitPath(p)
	whited := o.exists(ctx, joinPath(dir, whiteoutName(name)))
	if err := o.upper.Mkdir(ctx, p, mode); err != nil {
		return err
	}
	if whited {
		if err := o.markOpaque(ctx, p); err != nil {
			o.upper.Remove(ctx, p)
			return err
		}
	}
	return o.dropWhiteout(ctx, p)
}

func (o *overlay) Remove(ctx context.Context, p string) error {
	if p == "/" {
		return syscall.EBUSY
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	fi, inUpper, err := o.resolve(ctx, p)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		list, err := o.readdir(ctx, p)
		if err != nil {
			return err
		}
		if len(list) > 0 {
			return syscall.ENOTEMPTY
		}
	}
	shows, err := o.lowerShows(ctx, p)
	if err != nil {
		return err
	}
	if shows {
		if err := o.parentDir(ctx, p); err != nil {
			return err
		}
		if err := o.addWhiteout(ctx, p); err != nil {
			return err
		}
	}
	if inUpper {
		if fi.IsDir() {
			if err := o.clearHidden(ctx, p); err != nil {
				return err
			}
		}
		return o.upper.Remove(ctx, p)
	}
	return nil
}

func (o *overlay) Rename(ctx context.Context, oldPath, newPath string) error {
	switch {
	case reserved(oldPath):
		return syscall.ENOENT
	case reserved(newPath):
		return syscall.EPERM
	case oldPath == "/":
		return syscall.EBUSY
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.checkParent(ctx, oldPath); err != nil {
		return err
	}
	if newPath == "/" {
		return syscall.EBUSY
	}
	if err := o.checkParent(ctx, newPath); err != nil {
		return err
	}
	ofi, _, err := o.resolve(ctx, oldPath)
	if err != nil {
		return err
	}
	switch {
	case oldPath == newPath:
		return nil
	case ofi.IsDir() && isWithin(newPath, oldPath):
		return syscall.EINVAL
	case isWithin(oldPath, newPath):
		return syscall.ENOTEMPTY
	}
	if err := o.parentDir(ctx, newPath); err != nil {
		return err
	}
	nfi, nUpper, err := o.resolve(ctx, newPath)
	switch {
	case err == nil:
		if ofi.Ino != 0 && ofi.Ino == nfi.Ino {
			return nil
		}
		switch {
		case ofi.IsDir() && !nfi.IsDir():
			return syscall.ENOTDIR
		case !ofi.IsDir() && nfi.IsDir():
			return syscall.EISDIR
		case nfi.IsDir():
			list, err := o.readdir(ctx, newPath)
			if err != nil {
				return err
			}
			if len(list) > 0 {
				return syscall.ENOTEMPTY
			}
		}
	case !isErrno(err, syscall.ENOENT):
		return err
	}
	if ofi.IsDir() {
		err = o.copyUpTree(ctx, oldPath)
	} else {
		err = o.copyUp(ctx, oldPath)
	}
	if err != nil {
		return err
	}
	if nUpper && nfi.IsDir() {
		if err := o.clearHidden(ctx, newPath); err != nil {
			return err
		}
	}
	shows, err := o.lowerShows(ctx, oldPath)
	if err != nil {
		return err
	}
	if shows {
		if err := o.addWhiteout(ctx, oldPath); err != nil {
			return err
		}
	}
	if err := o.upper.Rename(ctx, oldPath, newPath); err != nil {
		if shows {
			o.dropWhiteout(ctx, oldPath)
		}
		return err
	}
	return o.dropWhiteout(ctx, newPath)
}

func (o *overlay) Symlink(ctx context.Context, target, link string) error {
	return o.makeNew(ctx, link, func() error { return o.upper.Symlink(ctx, target, link) })
}

func (o *overlay) Mknod(ctx context.Context, p string, mode fs.FileMode) error {
	if err := CheckMknod(mode); err != nil {
		return err
	}
	return o.makeNew(ctx, p, func() error { return o.upper.Mknod(ctx, p, mode) })
}

// makeNew makes p, which must not exist in either layer, in the upper
// with mk, and drops a whiteout of p there.
func (o *overlay) makeNew(ctx context.Context, p string, mk func() error) error {
	if reserved(p) {
		return syscall.EPERM
	}
	if p == "/" {
		return syscall.EEXIST
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, _, err := o.resolve(ctx, p); err == nil {
		return syscall.EEXIST
	} else if !isErrno(err, syscall.ENOENT) {
		return err
	}
	if err := o.parentDir(ctx, p); err != nil {
		return err
	}
	if err := mk(); err != nil {
		return err
	}
	return o.dropWhiteout(ctx, p)
}

func (o *overlay) Readlink(ctx context.Context, p string) (string, error) {
	_, inUpper, err := o.resolve(ctx, p)
	if err != nil {
		return "", err
	}
	if inUpper {
		return o.upper.Readlink(ctx, p)
	}
	return o.lower.Readlink(ctx, p)
}

func (o *overlay) Link(ctx context.Context, oldPath, newPath string) error {
	switch {
	case reserved(oldPath):
		return syscall.ENOENT
	case reserved(newPath):
		return syscall.EPERM
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	ofi, _, err := o.resolve(ctx, oldPath)
	if err != nil {
		return err
	}
	if newPath == "/" {
		return syscall.EEXIST
	}
	if err := o.checkParent(ctx, newPath); err != nil {
		return err
	}
	if _, _, err := o.resolve(ctx, newPath); err == nil {
		return syscall.EEXIST
	} else if !isErrno(err, syscall.ENOENT) {
		return err
	}
	if ofi.IsDir() {
		return syscall.EPERM
	}
	if err := o.parentDir(ctx, newPath); err != nil {
		return err
	}
	if err := o.copyUp(ctx, oldPath); err != nil {
		return err
	}
	if err := o.upper.Link(ctx, oldPath, newPath); err != nil {
		return err
	}
	return o.dropWhiteout(ctx, newPath)
}

// change copies p up and then runs fn on upper.
func (o *overlay) change(ctx context.Context, p string, check func(FileInfo) error, fn func() error) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	fi, inUpper, err := o.resolve(ctx, p)
	if err != nil {
		return err
	}
	if check != nil {
		if err := check(fi); err != nil {
			return err
		}
	}
	if !inUpper {
		if err := o.copyUp(ctx, p); err != nil {
			return err
		}
	}
	return fn()
}

func (o *overlay) Chmod(ctx context.Context, p string, mode fs.FileMode) error {
	return o.change(ctx, p, nil, func() error { return o.upper.Chmod(ctx, p, mode) })
}

func (o *overlay) Chown(ctx context.Context, p string, uid, gid int) error {
	return o.change(ctx, p, nil, func() error { return o.upper.Chown(ctx, p, uid, gid) })
}

func (o *overlay) Truncate(ctx context.Context, p string, size int64) error {
	check := func(fi FileInfo) error {
		switch {
		case fi.IsDir():
			return syscall.EISDIR
		case !fi.Mode.IsRegular(), size < 0:
			return syscall.EINVAL
		}
		return nil
	}
	return o.change(ctx, p, check, func() error { return o.upper.Truncate(ctx, p, size) })
}

func (o *overlay) Utimens(ctx context.Context, p string, atime, mtime *time.Time) error {
	return o.change(ctx, p, nil, func() error { return o.upper.Utimens(ctx, p, atime, mtime) })
}

// Statfs describes the upper layer, where every change goes: its free
// space is what is left to write.
func (o *overlay) Statfs(ctx context.Context, _ string) (StatFS, error) {
	return o.upper.Statfs(ctx, "/")
}

// Watch implements Watcher, with the changes of both layers.
func (o *overlay) Watch(fn func(path string)) (stop func()) {
	s1, s2 := watchOf(o.upper, fn), watchOf(o.lower, fn)
	return func() { s1(); s2() }
}

// overlayHandle maps the inode number of the open file.
type overlayHandle struct {
	Handle
	upper bool
}

func (h overlayHandle) Stat(ctx context.Context) (FileInfo, error) {
	fi, err := h.Handle.Stat(ctx)
	return mapIno(fi, h.upper), err
}
