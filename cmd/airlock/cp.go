package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/client"
)

func newCpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy files or directories between this machine and a running sandbox",
		Long: `Copy a file or a directory tree into or out of a running sandbox, like
docker cp. One of SRC and DST is ID:PATH (the id may be abbreviated). When
DST is an existing directory, SRC is copied into it under its own name.
Symbolic links and special files inside a tree are skipped, with a
warning.

Paths in the sandbox resolve inside its root: a symbolic link there never
leads out of it, and kernel filesystems such as /proc and /sys are not
reached (read them with airlock exec). Files copied out keep their
permission bits less your umask, never setuid, setgid or sticky, and are
written only under DST.`,
		Example: `  airlock cp ./script.py sb-1a2b:/workspace/
  airlock cp sb-1a2b:/workspace/out ./out`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			srcID, srcPath, srcRemote := splitRemote(args[0])
			dstID, dstPath, dstRemote := splitRemote(args[1])
			switch {
			case srcRemote == dstRemote:
				return errors.New("exactly one of SRC and DST must be ID:PATH (a path in a sandbox)")
			case srcRemote:
				c, sb, err := runningSandbox(ctx, srcID)
				if err != nil {
					return err
				}
				defer c.Close()
				return copyOut(ctx, sb, srcPath, dstPath)
			default:
				c, sb, err := runningSandbox(ctx, dstID)
				if err != nil {
					return err
				}
				defer c.Close()
				return copyIn(ctx, sb, srcPath, dstPath)
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

func copyIn(ctx context.Context, sb *client.Sandbox, src, dst string) error {
	fi, err := os.Stat(src)
	if err != nil {
		return err
	}
	if st, err := sb.Stat(ctx, dst); err == nil && st.IsDir {
		dst = path.Join(dst, filepath.Base(src))
	}
	if !fi.IsDir() {
		return copyFileIn(ctx, sb, src, dst, fi)
	}
	// Each path is resolved by the agent inside the sandbox's root, so
	// whatever the sandbox swaps under dst meanwhile, the copy lands in
	// the sandbox, never outside it.
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := path.Join(dst, filepath.ToSlash(rel))
		info, err := d.Info()
		if err != nil {
			return err
		}
		if d.IsDir() {
			if err := sb.Mkdir(ctx, target, info.Mode().Perm(), true); err != nil {
				return fmt.Errorf("make %s in the sandbox: %w", termText(target), err)
			}
			return nil
		}
		return copyFileIn(ctx, sb, p, target, info)
	})
}

func copyFileIn(ctx context.Context, sb *client.Sandbox, src, dst string, fi fs.FileInfo) error {
	if !fi.Mode().IsRegular() {
		fmt.Fprintf(os.Stderr, "airlock: skipping %s: not a regular file\n", termText(src))
		return nil
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := sb.WriteFile(ctx, dst, data, fi.Mode().Perm()); err != nil {
		return fmt.Errorf("copy %s to %s: %w", termText(src), termText(dst), err)
	}
	return nil
}

// maxCopyDepth bounds how deep a tree copied out may be: each level holds
// a directory open.
const maxCopyDepth = 256

// copyOut copies src in the sandbox to dst here. Everything it writes is
// created through an os.Root of the destination's directory, with names
// that are single path elements, so nothing the sandbox names or links
// leaves that directory. Files and directories are created with the
// permission bits they have in the sandbox less this process's umask,
// and never setuid, setgid or sticky: what a sandbox makes is not
// privileged here.
func copyOut(ctx context.Context, sb *client.Sandbox, src, dst string) error {
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
	defer root.Close()
	c := copier{ctx: ctx, sb: sb}
	if !st.IsDir {
		return c.fileOut(root, src, name, fs.FileMode(st.Mode), st.Link != "")
	}
	return c.dirOut(root, src, name, fs.FileMode(st.Mode), 0)
}

// plainName reports whether name, from the sandbox, is one path element.
func plainName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsAny(name, "/\x00")
}

type copier struct {
	ctx context.Context
	sb  *client.Sandbox
}

// dirOut copies the directory src into root as name.
func (c copier) dirOut(root *os.Root, src, name string, mode fs.FileMode, depth int) error {
	if depth >= maxCopyDepth {
		return fmt.Errorf("%s in the sandbox is more than %d levels deep: copy a part of it", termText(src), maxCopyDepth)
	}
	entries, err := c.sb.ListFiles(c.ctx, src)
	if err != nil {
		if depth > 0 && errors.Is(err, fs.ErrPermission) {
			// A directory the file operations do not reach, such as
			// /proc: skip it as a special file.
			fmt.Fprintf(os.Stderr, "airlock: skipping %s: %s\n", termText(src), termText(err.Error()))
			return nil
		}
		return fmt.Errorf("list %s in the sandbox: %w", termText(src), err)
	}
	// Owner access to fill it; the umask applies.
	if err := root.Mkdir(name, mode.Perm()|0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if fi, err := root.Lstat(name); err != nil {
		return err
	} else if !fi.IsDir() {
		return fmt.Errorf("cannot copy the directory %s to %s: it exists and is not a directory", termText(src), termText(filepath.Join(root.Name(), name)))
	}
	sub, err := root.OpenRoot(name)
	if err != nil {
		return err
	}
	defer sub.Close()
	for _, e := range entries {
		if !plainName(e.Name) {
			continue // never let a name from the sandbox leave the directory
		}
		s := path.Join(src, e.Name)
		if e.IsDir {
			err = c.dirOut(sub, s, e.Name, fs.FileMode(e.Mode), depth+1)
		} else {
			err = c.fileOut(sub, s, e.Name, fs.FileMode(e.Mode), e.Link != "")
		}
		if errors.Is(err, fs.ErrNotExist) {
			// Removed since the listing, or named with bytes that are not
			// UTF-8, which JSON-RPC cannot carry.
			fmt.Fprintf(os.Stderr, "airlock: skipping %s: it is gone, or its name is not UTF-8\n", termText(s))
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// fileOut copies the regular file src into root as name, replacing what
// is there, through a temporary file so that a failure leaves no partial
// copy.
func (c copier) fileOut(root *os.Root, src, name string, mode fs.FileMode, link bool) error {
	if link || !mode.IsRegular() {
		fmt.Fprintf(os.Stderr, "airlock: skipping %s: not a regular file\n", termText(src))
		return nil
	}
	data, err := c.sb.ReadFile(c.ctx, src)
	if err != nil {
		return fmt.Errorf("read %s in the sandbox: %w", termText(src), err)
	}
	var r [8]byte
	_, _ = rand.Read(r[:])
	tmp := ".airlock-cp-" + hex.EncodeToString(r[:])
	// O_EXCL: never through a symlink. Perm: no setuid, setgid or sticky
	// bit; the kernel applies the umask.
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode.Perm())
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Rename(tmp, name)
	}
	if err != nil {
		_ = root.Remove(tmp)
		return fmt.Errorf("copy %s to %s: %w", termText(src), termText(filepath.Join(root.Name(), name)), err)
	}
	return nil
}
