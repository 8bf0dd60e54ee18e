package cli

import (
	"archive/tar"
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/client"
)

func (a *app) newCpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy files or directories between this machine and a running sandbox",
		Long: `Copy a file or a directory tree into or out of a running sandbox, like
docker cp. One of SRC and DST is ID:PATH (the id may be abbreviated). When
DST is an existing directory, SRC is copied into it under its own name.
Symbolic links are copied as links, never followed on either side, and
files and directories keep their permission bits and modification times;
special files (devices, FIFOs, sockets) are skipped, with a warning.
Files of any size go in parts, with memory flat.

SRC - reads a tar archive from standard input and unpacks it into the
directory DST in the sandbox; DST - writes SRC, as a tar archive, to
standard output.

Paths in the sandbox resolve inside its root: a symbolic link there never
leads out of it, and kernel filesystems such as /proc and /sys are not
reached (read them with airlock exec). Files copied out keep their
permission bits less your umask, never setuid, setgid or sticky, and are
written only under DST: a link copied out is made as a link, whatever it
points to, and nothing is ever written through one.`,
		Example: `  airlock cp ./script.py sb-1a2b:/workspace/
  airlock cp sb-1a2b:/workspace/out ./out
  tar -C src -c . | airlock cp - sb-1a2b:/workspace
  airlock cp sb-1a2b:/workspace/out - | tar -x`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			srcID, srcPath, srcRemote := splitRemote(args[0])
			dstID, dstPath, dstRemote := splitRemote(args[1])
			switch {
			case srcRemote == dstRemote:
				return errors.New("exactly one of SRC and DST must be ID:PATH (a path in a sandbox)")
			case srcRemote:
				c, sb, err := a.runningSandbox(ctx, srcID)
				if err != nil {
					return err
				}
				defer c.Close()
				if dstPath == "-" {
					return a.copyOutTar(ctx, sb, srcPath, os.Stdout)
				}
				return a.copyOut(ctx, sb, srcPath, dstPath)
			default:
				c, sb, err := a.runningSandbox(ctx, dstID)
				if err != nil {
					return err
				}
				defer c.Close()
				if srcPath == "-" {
					return a.copyInTar(ctx, sb, os.Stdin, dstPath)
				}
				return a.copyIn(ctx, sb, srcPath, dstPath)
			}
		},
	}
}

// splitRemote recognises ID:PATH; a local path with a colon can be given
// as ./a:b.
func splitRemote(arg string) (id, p string, remote bool) {
	i := strings.IndexByte(arg, ':')
	if i <= 0 || strings.ContainsRune(arg[:i], '/') {
		return "", arg, false
	}
	p = arg[i+1:]
	if p == "" {
		p = "/workspace"
	}
	return arg[:i], p, true
}

// inCopier puts files into the sandbox. Each path is resolved by the
// agent inside the sandbox's root, so whatever the sandbox swaps under
// the destination meanwhile, the copy lands in the sandbox, never
// outside it.
type inCopier struct {
	ctx context.Context
	sb  *client.Sandbox
	// dirs are the directories made, whose modes and times are set once
	// they are full (setting them first would let a read-only mode
	// keep their files out, and their files would change their times).
	dirs []inDir
}

type inDir struct {
	path  string
	mode  fs.FileMode
	mtime time.Time
}

func (c *inCopier) dir(target string, mode fs.FileMode, mtime time.Time) error {
	// Owner access to fill it; its own mode comes at the end.
	if err := c.sb.Mkdir(c.ctx, target, mode.Perm()|0o700, true); err != nil {
		return fmt.Errorf("make %s in the sandbox: %w", termText(target), err)
	}
	c.dirs = append(c.dirs, inDir{target, mode, mtime})
	return nil
}

func (c *inCopier) file(target string, r io.Reader, mode fs.FileMode, mtime time.Time, src string) error {
	if _, err := c.sb.WriteFileFrom(c.ctx, target, r, mode.Perm()); err != nil {
		return fmt.Errorf("copy %s to %s: %w", termText(src), termText(target), err)
	}
	return c.attr(target, &mode, mtime)
}

func (c *inCopier) link(target, to string, mtime time.Time) error {
	if err := c.sb.Symlink(c.ctx, to, target); err != nil {
		return fmt.Errorf("make the link %s in the sandbox: %w", termText(target), err)
	}
	return c.attr(target, nil, mtime)
}

func (c *inCopier) attr(target string, mode *fs.FileMode, mtime time.Time) error {
	if mode != nil {
		m := mode.Perm()
		mode = &m
	}
	if err := c.sb.SetAttr(c.ctx, target, mode, mtime); err != nil {
		return fmt.Errorf("set the mode and time of %s in the sandbox: %w", termText(target), err)
	}
	return nil
}

// finish gives the directories made their modes and times, the deepest
// first.
func (c *inCopier) finish() error {
	for _, d := range slices.Backward(c.dirs) {
		if err := c.attr(d.path, &d.mode, d.mtime); err != nil {
			return err
		}
	}
	return nil
}

func (a *app) copyIn(ctx context.Context, sb *client.Sandbox, src, dst string) error {
	fi, err := os.Lstat(src)
	if err != nil {
		return err
	}
	if st, err := sb.Stat(ctx, dst); err == nil && st.IsDir {
		dst = path.Join(dst, filepath.Base(src))
	}
	c := &inCopier{ctx: ctx, sb: sb}
	// WalkDir follows no link, SRC's own included: a link is copied as
	// a link.
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := path.Join(dst, filepath.ToSlash(rel))
		info, err := d.Info()
		if p == src {
			info = fi
		} else if err != nil {
			return err
		}
		switch mode := info.Mode(); {
		case mode.IsDir():
			return c.dir(target, mode, info.ModTime())
		case mode&fs.ModeSymlink != 0:
			to, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return c.link(target, to, info.ModTime())
		case mode.IsRegular():
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			return c.file(target, f, mode, info.ModTime(), p)
		default:
			a.warnf("skipping %s: not a regular file, directory or link", termText(p))
			return nil
		}
	})
	if err != nil {
		return err
	}
	return c.finish()
}

// copyInTar unpacks the tar archive r into the directory dst in the
// sandbox. Names are taken relative to dst, whatever their form ("/a",
// "../a" and "./a" all land at dst/a).
func (a *app) copyInTar(ctx context.Context, sb *client.Sandbox, r io.Reader, dst string) error {
	if st, err := sb.Stat(ctx, dst); err != nil {
		return fmt.Errorf("%s in the sandbox: %w", termText(dst), err)
	} else if !st.IsDir {
		return fmt.Errorf("%s in the sandbox is not a directory: a tar archive unpacks into a directory", termText(dst))
	}
	c := &inCopier{ctx: ctx, sb: sb}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read the tar archive: %w", err)
		}
		target := path.Join(dst, path.Clean("/"+h.Name))
		mode := fs.FileMode(h.Mode).Perm()
		switch h.Typeflag {
		case tar.TypeDir:
			err = c.dir(target, mode|fs.ModeDir, h.ModTime)
		case tar.TypeReg:
			err = c.file(target, tr, mode, h.ModTime, h.Name)
		case tar.TypeSymlink:
			err = c.link(target, h.Linkname, h.ModTime)
		case tar.TypeLink:
			// A hard link: a copy of the file it names, from the
			// sandbox, where it was unpacked already.
			err = c.hardLink(target, path.Join(dst, path.Clean("/"+h.Linkname)), mode, h.ModTime, h.Name)
		default:
			a.warnf("skipping %s: not a regular file, directory or link", termText(h.Name))
		}
		if err != nil {
			return err
		}
	}
	return c.finish()
}

// hardLink copies the file from, in the sandbox, to target.
func (c *inCopier) hardLink(target, from string, mode fs.FileMode, mtime time.Time, name string) error {
	pr, pw := io.Pipe()
	go func() {
		_, err := c.sb.ReadFileTo(c.ctx, from, pw)
		pw.CloseWithError(err)
	}()
	err := c.file(target, pr, mode, mtime, name)
	pr.CloseWithError(errors.New("copy ended"))
	return err
}

// maxCopyDepth bounds how deep a tree copied out may be: each level holds
// a directory open.
const maxCopyDepth = 256

// outDest is where a tree copied out goes: a directory here, or a tar
// archive.
type outDest interface {
	// dir makes the directory name and returns where its entries go.
	dir(name string, fi api.FileInfo) (outDest, error)
	// done ends a directory that dir made, with fi's mode and time.
	done(name string, fi api.FileInfo) error
	file(name, src string, fi api.FileInfo) error
	link(name string, fi api.FileInfo) error
	close() error
}

// copyOut copies src in the sandbox to dst here. Everything it writes is
// created through an os.Root of the destination's directory, with names
// that are single path elements, so nothing the sandbox names or links
// leaves that directory. Files and directories are created with the
// permission bits they have in the sandbox less this process's umask,
// and never setuid, setgid or sticky: what a sandbox makes is not
// privileged here. Links are made as links, with the target the sandbox
// gave, and never followed.
func (a *app) copyOut(ctx context.Context, sb *client.Sandbox, src, dst string) error {
	st, err := sb.Stat(ctx, src)
	if err != nil {
		return fmt.Errorf("%s in the sandbox: %w", termText(src), err)
	}
	dir, name := dst, path.Base(src)
	if fi, err := os.Stat(dst); err != nil || !fi.IsDir() {
		dir, name = filepath.Dir(dst), filepath.Base(dst)
	}
	if !plainName(name) {
		return fmt.Errorf("cannot name a copy of %s %q: give a destination that names the copy, such as ./out", termText(src), termText(name))
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("copy %s out: open the destination directory: %w", termText(src), err)
	}
	d := &rootDest{c: copier{ctx: ctx, sb: sb, warnf: a.warnf}, root: root, umask: umask()}
	defer d.close()
	if err := (copier{ctx: ctx, sb: sb, warnf: a.warnf}).entry(d, src, name, st, 0); err != nil {
		return err
	}
	return d.close()
}

// copyOutTar writes src in the sandbox to w as a tar archive, its entries
// under src's base name.
func (a *app) copyOutTar(ctx context.Context, sb *client.Sandbox, src string, w io.Writer) error {
	st, err := sb.Stat(ctx, src)
	if err != nil {
		return fmt.Errorf("%s in the sandbox: %w", termText(src), err)
	}
	bw := bufio.NewWriterSize(w, 256<<10)
	d := &tarDest{c: copier{ctx: ctx, sb: sb, warnf: a.warnf}, tw: tar.NewWriter(bw), uid: os.Getuid(), gid: os.Getgid()}
	name := path.Base(src)
	if name == "/" {
		name = "."
	}
	if err := (copier{ctx: ctx, sb: sb, warnf: a.warnf}).entry(d, src, name, st, 0); err != nil {
		return err
	}
	if err := d.tw.Close(); err != nil {
		return err
	}
	return bw.Flush()
}

// plainName reports whether name, from the sandbox, is one path element.
func plainName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsAny(name, "/\x00")
}

type copier struct {
	ctx context.Context
	sb  *client.Sandbox
	// warnf says what is left out.
	warnf func(format string, args ...any)
}

// entry copies src, described by fi, to d as name.
func (c copier) entry(d outDest, src, name string, fi api.FileInfo, depth int) error {
	mode := fs.FileMode(fi.Mode)
	switch {
	case fi.IsDir:
		return c.dirOut(d, src, name, fi, depth)
	case mode&fs.ModeSymlink != 0:
		if fi.Link == "" {
			// A link whose target could not be read.
			c.warnf("skipping %s: its target cannot be read", termText(src))
			return nil
		}
		return d.link(name, fi)
	case mode.IsRegular():
		return d.file(name, src, fi)
	default:
		c.warnf("skipping %s: not a regular file, directory or link", termText(src))
		return nil
	}
}

// dirOut copies the directory src to d as name.
func (c copier) dirOut(d outDest, src, name string, fi api.FileInfo, depth int) error {
	if depth >= maxCopyDepth {
		return fmt.Errorf("%s in the sandbox is more than %d levels deep: copy a part of it", termText(src), maxCopyDepth)
	}
	entries, err := c.sb.ListFiles(c.ctx, src)
	if err != nil {
		if depth > 0 && errors.Is(err, fs.ErrPermission) {
			// A directory the file operations do not reach, such as
			// /proc: skip it as a special file.
			c.warnf("skipping %s: %s", termText(src), termText(err.Error()))
			return nil
		}
		return fmt.Errorf("list %s in the sandbox: %w", termText(src), err)
	}
	sub, err := d.dir(name, fi)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !plainName(e.Name) {
			continue // never let a name from the sandbox leave the directory
		}
		s := path.Join(src, e.Name)
		err := c.entry(sub, s, e.Name, e, depth+1)
		if errors.Is(err, fs.ErrNotExist) {
			// Removed since the listing, or named with bytes that are not
			// UTF-8, which JSON-RPC cannot carry.
			c.warnf("skipping %s: it is gone, or its name is not UTF-8", termText(s))
			continue
		}
		if err != nil {
			sub.close()
			return err
		}
	}
	if err := sub.close(); err != nil {
		return err
	}
	return d.done(name, fi)
}

// rootDest is a directory here, reached only through an os.Root.
type rootDest struct {
	c     copier
	root  *os.Root
	umask fs.FileMode
}

func (d *rootDest) close() error { return d.root.Close() }

func (d *rootDest) dir(name string, fi api.FileInfo) (outDest, error) {
	// Owner access to fill it; its mode comes once it is full.
	if err := d.root.Mkdir(name, fs.FileMode(fi.Mode).Perm()|0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, err
	}
	if st, err := d.root.Lstat(name); err != nil {
		return nil, err
	} else if !st.IsDir() {
		return nil, fmt.Errorf("cannot copy the directory %s to %s: it exists and is not a directory", termText(fi.Name), termText(filepath.Join(d.root.Name(), name)))
	}
	sub, err := d.root.OpenRoot(name)
	if err != nil {
		return nil, err
	}
	return &rootDest{c: d.c, root: sub, umask: d.umask}, nil
}

func (d *rootDest) done(name string, fi api.FileInfo) error {
	// The sandbox's bits less the umask, never set-id or sticky.
	if err := d.root.Chmod(name, fs.FileMode(fi.Mode).Perm()&^d.umask); err != nil {
		return err
	}
	return d.times(name, fi.ModTime)
}

// times sets name's times, never following a link: name is one element
// in a directory this copy reached through its os.Root.
func (d *rootDest) times(name string, mtime time.Time) error {
	if mtime.IsZero() {
		return nil
	}
	dir, err := d.root.Open(".")
	if err != nil {
		return err
	}
	defer dir.Close()
	ts := unix.NsecToTimespec(mtime.UnixNano())
	if err := unix.UtimesNanoAt(int(dir.Fd()), name, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &os.PathError{Op: "utimes", Path: filepath.Join(d.root.Name(), name), Err: err}
	}
	return nil
}

// tmpName is a new name for a file being made, renamed into place once
// complete.
func tmpName() string {
	var r [8]byte
	_, _ = rand.Read(r[:])
	return ".airlock-cp-" + hex.EncodeToString(r[:])
}

// file copies the regular file src into name, replacing what is there,
// through a temporary file so that a failure leaves no partial copy.
func (d *rootDest) file(name, src string, fi api.FileInfo) error {
	tmp := tmpName()
	// O_EXCL: never through a symlink. Perm: no setuid, setgid or sticky
	// bit; the kernel applies the umask.
	f, err := d.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fs.FileMode(fi.Mode).Perm())
	if err != nil {
		return err
	}
	_, err = d.c.sb.ReadFileTo(d.c.ctx, src, f)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		err = fmt.Errorf("read %s in the sandbox: %w", termText(src), err)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = d.times(tmp, fi.ModTime)
	}
	if err == nil {
		err = d.root.Rename(tmp, name)
	}
	if err != nil {
		_ = d.root.Remove(tmp)
		if errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return fmt.Errorf("copy %s to %s: %w", termText(src), termText(filepath.Join(d.root.Name(), name)), err)
	}
	return nil
}

// link makes name a symbolic link with the sandbox's target, replacing
// a file or link there. The target is not looked at, let alone followed.
func (d *rootDest) link(name string, fi api.FileInfo) error {
	tmp := tmpName()
	err := d.root.Symlink(fi.Link, tmp)
	if err == nil {
		err = d.times(tmp, fi.ModTime)
	}
	if err == nil {
		err = d.root.Rename(tmp, name)
	}
	if err != nil {
		_ = d.root.Remove(tmp)
		return fmt.Errorf("make the link %s: %w", termText(filepath.Join(d.root.Name(), name)), err)
	}
	return nil
}

// umask is this process's umask.
func umask() fs.FileMode {
	m := syscall.Umask(0o022)
	syscall.Umask(m)
	return fs.FileMode(m) & fs.ModePerm
}

// tarDest is a tar archive; prefix is the directory its entries go in.
type tarDest struct {
	c        copier
	tw       *tar.Writer
	prefix   string
	uid, gid int
}

func (d *tarDest) header(name string, fi api.FileInfo) *tar.Header {
	return &tar.Header{
		Name:    path.Join(d.prefix, name),
		Mode:    int64(fs.FileMode(fi.Mode).Perm()),
		ModTime: fi.ModTime,
		Uid:     d.uid,
		Gid:     d.gid,
		Format:  tar.FormatPAX,
	}
}

func (d *tarDest) close() error { return nil }

func (d *tarDest) dir(name string, fi api.FileInfo) (outDest, error) {
	h := d.header(name, fi)
	h.Typeflag = tar.TypeDir
	h.Name += "/"
	if err := d.tw.WriteHeader(h); err != nil {
		return nil, err
	}
	return &tarDest{c: d.c, tw: d.tw, prefix: path.Join(d.prefix, name), uid: d.uid, gid: d.gid}, nil
}

func (d *tarDest) done(string, api.FileInfo) error { return nil }

func (d *tarDest) link(name string, fi api.FileInfo) error {
	h := d.header(name, fi)
	h.Typeflag = tar.TypeSymlink
	h.Linkname = fi.Link
	return d.tw.WriteHeader(h)
}

// file writes src's content as listed: a file that grows meanwhile is cut
// at the listed size, one that shrinks is padded with zeros, with a
// warning, as a tar entry's size is written before its content.
func (d *tarDest) file(name, src string, fi api.FileInfo) error {
	h := d.header(name, fi)
	h.Typeflag = tar.TypeReg
	h.Size = fi.Size
	if err := d.tw.WriteHeader(h); err != nil {
		return err
	}
	var off int64
	for off < fi.Size {
		b, _, err := d.c.sb.ReadFileAt(d.c.ctx, src, off, min(fi.Size-off, client.StreamChunk))
		if err != nil {
			return fmt.Errorf("read %s in the sandbox: %w", termText(src), err)
		}
		if len(b) == 0 {
			break
		}
		if _, err := d.tw.Write(b); err != nil {
			return err
		}
		off += int64(len(b))
	}
	if off < fi.Size {
		d.c.warnf("%s shrank while being copied: padded with zeros", termText(src))
		if _, err := io.CopyN(d.tw, zeros{}, fi.Size-off); err != nil {
			return err
		}
	}
	return nil
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
