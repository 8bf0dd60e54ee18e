// Package untar applies the layers of an image, tar streams that may be
// hostile, to a root directory.
//
// Every path is resolved beneath the root with os.Root (openat2
// RESOLVE_BENEATH on Linux), never by string checks alone, so nothing a
// layer holds writes outside it:
//
//   - an entry named with ".." that leaves the root is refused; a leading
//     "/" is taken as the root, as docker does;
//   - a symbolic link is made as the layer says, but is followed by later
//     entries (of this layer or the next) only while it stays beneath the
//     root: an absolute link, or one whose ".." leaves the root, refuses
//     the entry that would write through it;
//   - an entry replaces whatever its name held (a link is removed, never
//     written through);
//   - a hard link's target is resolved beneath the root too;
//   - character and block devices are not made (a sandbox gets its own
//     /dev; a device node in an image could only reach host hardware):
//     they are counted in Stats.Skipped. FIFOs are made: they are a
//     rendezvous between processes of one sandbox and reach nothing else.
//   - setuid and setgid bits are kept: the image cache is private to its
//     owner (mode 0700), so no host user can run them, and inside a
//     sandbox they act only within its user namespace.
//   - owners are kept as the layer says when the caller may set them
//     (Options.KeepOwners, for root); an id beyond 65535, which no
//     sandbox maps, refuses the layer, as rootless podman does, rather
//     than changing whom a file belongs to. Otherwise every file belongs
//     to the caller, and directories keep their owner's rwx bits so that
//     the next layer can change them.
//   - extended attributes (file capabilities, SELinux labels) are not
//     applied.
//
// Whiteouts (".wh.name") remove name from the layers below, and an opaque
// marker (".wh..wh..opq") empties its directory of what the layers below
// put there, as the OCI image spec says. The total size of the entries and
// their number are bounded across all the layers one Unpacker applies.
package untar

import (
	"archive/tar"
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"
)

// MaxID is the largest uid or gid kept: a sandbox maps 65,536 ids.
const MaxID = 65535

const (
	whiteoutPrefix = ".wh."
	whiteoutMeta   = ".wh..wh."
	opaqueMarker   = ".wh..wh..opq"

	// maxName bounds an entry's name and link target (PATH_MAX).
	maxName = 4096
	// maxLayerNames bounds the bytes of names one layer's bookkeeping
	// holds (what it made, for opaque directories, and its directories'
	// modes, set when the layer ends).
	maxLayerNames = 128 << 20
	// maxSkipped bounds the names kept in Stats.Skipped.
	maxSkipped = 32
)

// Limits bound what all the layers one Unpacker applies may hold.
type Limits struct {
	// Bytes bounds the sum of the entries' sizes (a regular file's
	// length, as its header gives it: a sparse file counts whole).
	Bytes int64
	// Entries bounds the number of entries, whiteouts included.
	Entries int64
}

// LimitError is returned when a layer goes past a limit.
type LimitError struct {
	What  string // "bytes" or "entries"
	Limit int64
}

func (e *LimitError) Error() string {
	if e.What == "bytes" {
		return fmt.Sprintf("the image unpacks to more than %d bytes, its limit: give it more disk or pull a smaller image", e.Limit)
	}
	return fmt.Sprintf("the image holds more than %d entries, its limit", e.Limit)
}

// Options say how layers are applied.
type Options struct {
	Limits Limits
	// KeepOwners sets each entry's owner as the layer says (which needs
	// root); otherwise entries belong to the caller.
	KeepOwners bool
	// Base is what the tree holds already, from layers applied before
	// (a cached chain of them): it counts against Limits.
	Base Stats
}

// Stats is what the layers applied so far held.
type Stats struct {
	Entries int64 `json:"entries"`
	Bytes   int64 `json:"bytes"`
	// Skipped names device nodes that were not made (the first few).
	Skipped      []string `json:"skipped,omitempty"`
	SkippedCount int64    `json:"skipped_count,omitempty"`
}

// Unpacker applies layers in order to one root directory.
type Unpacker struct {
	root  *os.Root
	opts  Options
	stats Stats
}

// New opens dir, which must exist, as the root that layers are applied
// to.
func New(dir string, opts Options) (*Unpacker, error) {
	if opts.Limits.Bytes <= 0 || opts.Limits.Entries <= 0 {
		return nil, errors.New("untar: the limits on bytes and entries must be set")
	}
	st := opts.Base
	st.Skipped = append([]string(nil), st.Skipped...)
	if st.Bytes < 0 || st.Entries < 0 {
		return nil, errors.New("untar: the base stats are negative")
	}
	if st.Bytes > opts.Limits.Bytes {
		return nil, &LimitError{What: "bytes", Limit: opts.Limits.Bytes}
	}
	if st.Entries > opts.Limits.Entries {
		return nil, &LimitError{What: "entries", Limit: opts.Limits.Entries}
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("open the image root %s: %w", dir, err)
	}
	return &Unpacker{root: r, opts: opts, stats: st}, nil
}

// Root is the directory the layers are applied to.
func (u *Unpacker) Root() string { return u.root.Name() }

// Close releases the root.
func (u *Unpacker) Close() error { return u.root.Close() }

// Stats returns what the layers applied so far held, Base included.
func (u *Unpacker) Stats() Stats {
	st := u.stats
	st.Skipped = append([]string(nil), st.Skipped...)
	return st
}

// layer is the bookkeeping of the layer being applied.
type layer struct {
	// made holds the names this layer made: an opaque marker and a
	// whiteout act on the layers below only.
	made      map[string]bool
	dirs      []dirMeta
	nameBytes int64
}

// dirMeta is a directory's mode, owner and time, set when its layer ends
// so that its entries can be made first.
type dirMeta struct {
	name  string
	mode  fs.FileMode
	mtime time.Time
}

// Apply applies one layer, a tar stream that is uncompressed or
// compressed with gzip or zstd, read from r.
func (u *Unpacker) Apply(ctx context.Context, r io.Reader) error {
	dr, closeFn, err := decompress(bufio.NewReaderSize(r, 1<<16))
	if err != nil {
		return err
	}
	defer closeFn()
	tr := tar.NewReader(&ctxReader{ctx: ctx, r: dr})
	l := &layer{made: map[string]bool{}}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read the layer: %w", err)
		}
		if err := u.count(hdr); err != nil {
			return err
		}
		if err := u.entry(tr, hdr, l); err != nil {
			return fmt.Errorf("layer entry %q: %w", hdr.Name, err)
		}
	}
	return u.finish(l)
}

// count charges an entry to the limits.
func (u *Unpacker) count(hdr *tar.Header) error {
	u.stats.Entries++
	if u.stats.Entries > u.opts.Limits.Entries {
		return &LimitError{What: "entries", Limit: u.opts.Limits.Entries}
	}
	if hdr.Size < 0 {
		return fmt.Errorf("layer entry %q has a negative size", hdr.Name)
	}
	// Every entry's size counts, even one whose data is skipped: the
	// reader decompresses it all the same.
	u.stats.Bytes += hdr.Size
	if u.stats.Bytes > u.opts.Limits.Bytes || u.stats.Bytes < 0 {
		return &LimitError{What: "bytes", Limit: u.opts.Limits.Bytes}
	}
	return nil
}

// clean turns an entry's name into a path relative to the root, refusing
// one that leaves it.
func clean(name string) (string, error) {
	if len(name) > maxName {
		return "", fmt.Errorf("a name longer than %d bytes", maxName)
	}
	if strings.IndexByte(name, 0) >= 0 {
		return "", errors.New("a name with a NUL byte")
	}
	n := path.Clean(strings.TrimLeft(name, "/"))
	if n != "." && !filepath.IsLocal(n) {
		return "", fmt.Errorf("%q leaves the image root", name)
	}
	return n, nil
}

func (u *Unpacker) entry(tr *tar.Reader, hdr *tar.Header, l *layer) error {
	n, err := clean(hdr.Name)
	if err != nil {
		return err
	}
	l.nameBytes += int64(len(n))
	if l.nameBytes > maxLayerNames {
		return fmt.Errorf("the layer's names take more than %d bytes", maxLayerNames)
	}
	dir, base := path.Split(n)
	dir = path.Clean(dir)
	switch {
	case base == opaqueMarker:
		return u.opaque(dir, l)
	case strings.HasPrefix(base, whiteoutMeta):
		// Other aufs metadata (.wh..wh.plnk, ...) means nothing here.
		return nil
	case strings.HasPrefix(base, whiteoutPrefix):
		return u.whiteout(dir, base[len(whiteoutPrefix):], l)
	}
	uid, gid := hdr.Uid, hdr.Gid
	if u.opts.KeepOwners && (uid < 0 || uid > MaxID || gid < 0 || gid > MaxID) {
		return fmt.Errorf("owner %d:%d is beyond the %d ids a sandbox maps", uid, gid, MaxID+1)
	}
	mode := hdr.FileInfo().Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
	switch hdr.Typeflag {
	case tar.TypeDir:
		return u.dir(n, hdr, mode, l)
	case tar.TypeReg: // the reader turns the old TypeRegA into TypeReg
		return u.file(tr, n, hdr, mode, l)
	case tar.TypeSymlink:
		return u.symlink(n, hdr, l)
	case tar.TypeLink:
		return u.link(n, hdr, l)
	case tar.TypeFifo:
		return u.fifo(n, hdr, mode, l)
	case tar.TypeChar, tar.TypeBlock:
		u.stats.SkippedCount++
		if len(u.stats.Skipped) < maxSkipped {
			u.stats.Skipped = append(u.stats.Skipped, "/"+n)
		}
		return nil
	case tar.TypeXGlobalHeader:
		return nil
	default:
		return fmt.Errorf("unsupported entry type %q", hdr.Typeflag)
	}
}

// replace makes way for an entry named n: it makes n's parent folders
// and removes what n holds, unless both are directories. It reports
// whether n is a directory that stays.
func (u *Unpacker) replace(n string, dir bool) (bool, error) {
	if n == "." {
		if !dir {
			return false, errors.New("only a directory may be the image root")
		}
		return true, nil
	}
	if err := u.root.MkdirAll(path.Dir(n), 0o755); err != nil {
		return false, err
	}
	fi, err := u.root.Lstat(n)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if dir && fi.IsDir() {
		return true, nil
	}
	return false, u.root.RemoveAll(n)
}

func (u *Unpacker) chown(n string, hdr *tar.Header) error {
	if !u.opts.KeepOwners {
		return nil
	}
	return u.root.Lchown(n, hdr.Uid, hdr.Gid)
}

func (u *Unpacker) dir(n string, hdr *tar.Header, mode fs.FileMode, l *layer) error {
	kept, err := u.replace(n, true)
	if err != nil {
		return err
	}
	if !kept {
		if err := u.root.Mkdir(n, 0o700); err != nil {
			return err
		}
	}
	if err := u.chown(n, hdr); err != nil {
		return err
	}
	l.made[n] = true
	l.dirs = append(l.dirs, dirMeta{name: n, mode: mode, mtime: hdr.ModTime})
	return nil
}

func (u *Unpacker) file(tr *tar.Reader, n string, hdr *tar.Header, mode fs.FileMode, l *layer) error {
	if _, err := u.replace(n, false); err != nil {
		return err
	}
	f, err := u.root.OpenFile(n, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	l.made[n] = true
	if _, err := io.Copy(f, tr); err != nil {
		f.Close()
		return err
	}
	// On the open file, not by name: nothing can be swapped in between.
	// The owner first: chown clears setuid and setgid.
	if u.opts.KeepOwners {
		if err := f.Chown(hdr.Uid, hdr.Gid); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return u.root.Chtimes(n, hdr.ModTime, hdr.ModTime)
}

func (u *Unpacker) symlink(n string, hdr *tar.Header, l *layer) error {
	if len(hdr.Linkname) > maxName || strings.IndexByte(hdr.Linkname, 0) >= 0 || hdr.Linkname == "" {
		return fmt.Errorf("a symbolic link to %q", hdr.Linkname)
	}
	if _, err := u.replace(n, false); err != nil {
		return err
	}
	// The target is kept as written: it is resolved beneath the root by
	// every later step here, and inside the sandbox, whose root this is.
	if err := u.root.Symlink(hdr.Linkname, n); err != nil {
		return err
	}
	l.made[n] = true
	return u.chown(n, hdr)
}

func (u *Unpacker) link(n string, hdr *tar.Header, l *layer) error {
	target, err := clean(hdr.Linkname)
	if err != nil {
		return fmt.Errorf("hard link: %w", err)
	}
	if target == "." || target == n {
		return fmt.Errorf("a hard link to %q", hdr.Linkname)
	}
	if _, err := u.replace(n, false); err != nil {
		return err
	}
	if err := u.root.Link(target, n); err != nil {
		return err
	}
	l.made[n] = true
	return nil
}

func (u *Unpacker) fifo(n string, hdr *tar.Header, mode fs.FileMode, l *layer) error {
	if _, err := u.replace(n, false); err != nil {
		return err
	}
	parent, err := u.root.Open(path.Dir(n))
	if err != nil {
		return err
	}
	err = mkfifoat(parent, path.Base(n), uint32(mode.Perm()))
	parent.Close()
	if err != nil {
		return err
	}
	l.made[n] = true
	if err := u.chown(n, hdr); err != nil {
		return err
	}
	return u.root.Chmod(n, mode)
}

// whiteout removes name from dir, as the layers below left it.
func (u *Unpacker) whiteout(dir, name string, l *layer) error {
	if name == "" || name == "." || name == ".." {
		return fmt.Errorf("a whiteout of %q", name)
	}
	n := path.Join(dir, name)
	if l.made[n] {
		return nil
	}
	if err := u.root.RemoveAll(n); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("whiteout: %w", err)
	}
	return nil
}

// opaque empties dir of what the layers below put there.
func (u *Unpacker) opaque(dir string, l *layer) error {
	fi, err := u.root.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		// Nothing below to hide; the directory itself is this layer's.
		if err := u.root.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		l.made[dir] = true
		return nil
	}
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("an opaque marker in %q, which is not a directory", dir)
	}
	f, err := u.root.Open(dir)
	if err != nil {
		return err
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return err
	}
	for _, name := range names {
		n := path.Join(dir, name)
		if l.made[n] {
			continue
		}
		if err := u.root.RemoveAll(n); err != nil {
			return fmt.Errorf("opaque directory: %w", err)
		}
	}
	return nil
}

// finish sets the modes and times of the layer's directories, deepest
// last made first, now that their entries are in.
func (u *Unpacker) finish(l *layer) error {
	for i := len(l.dirs) - 1; i >= 0; i-- {
		d := l.dirs[i]
		fi, err := u.root.Lstat(d.name)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("layer directory %q: %w", d.name, err)
		}
		if !fi.IsDir() {
			// Replaced later in the layer.
			continue
		}
		mode := d.mode
		if !u.opts.KeepOwners {
			// The caller owns everything: the next layer must be able
			// to change what is inside (inside a sandbox, its root
			// may anyway).
			mode |= 0o700
		}
		if err := u.root.Chmod(d.name, mode); err != nil {
			return fmt.Errorf("layer directory %q: %w", d.name, err)
		}
		if err := u.root.Chtimes(d.name, d.mtime, d.mtime); err != nil {
			return fmt.Errorf("layer directory %q: %w", d.name, err)
		}
	}
	return nil
}

// ctxReader stops reading once ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
