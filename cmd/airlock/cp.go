package main

import (
	"context"
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
warning.`,
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
			return sb.Mkdir(ctx, target, info.Mode().Perm(), true)
		}
		return copyFileIn(ctx, sb, p, target, info)
	})
}

func copyFileIn(ctx context.Context, sb *client.Sandbox, src, dst string, fi fs.FileInfo) error {
	if !fi.Mode().IsRegular() {
		fmt.Fprintf(os.Stderr, "airlock: skipping %s: not a regular file\n", src)
		return nil
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := sb.WriteFile(ctx, dst, data, fi.Mode().Perm()); err != nil {
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	return nil
}

func copyOut(ctx context.Context, sb *client.Sandbox, src, dst string) error {
	st, err := sb.Stat(ctx, src)
	if err != nil {
		return fmt.Errorf("%s in the sandbox: %w", src, err)
	}
	if fi, err := os.Stat(dst); err == nil && fi.IsDir() {
		dst = filepath.Join(dst, path.Base(src))
	}
	if !st.IsDir {
		return copyFileOut(ctx, sb, src, dst, fs.FileMode(st.Mode), st.Link != "")
	}
	return copyDirOut(ctx, sb, src, dst, fs.FileMode(st.Mode))
}

func copyDirOut(ctx context.Context, sb *client.Sandbox, src, dst string, mode fs.FileMode) error {
	if err := os.MkdirAll(dst, mode.Perm()|0o700); err != nil {
		return err
	}
	entries, err := sb.ListFiles(ctx, src)
	if err != nil {
		return fmt.Errorf("list %s in the sandbox: %w", src, err)
	}
	for _, e := range entries {
		if e.Name == "" || e.Name == "." || e.Name == ".." || strings.ContainsRune(e.Name, '/') {
			continue // never let a name from the sandbox leave dst
		}
		s, d := path.Join(src, e.Name), filepath.Join(dst, e.Name)
		if e.IsDir {
			if err := copyDirOut(ctx, sb, s, d, fs.FileMode(e.Mode)); err != nil {
				return err
			}
			continue
		}
		if err := copyFileOut(ctx, sb, s, d, fs.FileMode(e.Mode), e.Link != ""); err != nil {
			return err
		}
	}
	return nil
}

func copyFileOut(ctx context.Context, sb *client.Sandbox, src, dst string, mode fs.FileMode, link bool) error {
	if link || !mode.IsRegular() {
		fmt.Fprintf(os.Stderr, "airlock: skipping %s: not a regular file\n", src)
		return nil
	}
	data, err := sb.ReadFile(ctx, src)
	if err != nil {
		return fmt.Errorf("read %s in the sandbox: %w", src, err)
	}
	// Write through a temporary file so a failure leaves no partial copy,
	// and never follow a symlink planted at the destination.
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".airlock-cp-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Chmod(mode.Perm()); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), dst)
}
