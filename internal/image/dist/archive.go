package dist

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
	"time"

	"github.com/klauspost/compress/zstd"
)

// maxID is the largest owner an archive may name: a sandbox maps 65,536
// ids, and the unpacker refuses any beyond.
const maxID = 65535

// archiveStats is what writing an archive left out or saw.
type archiveStats struct {
	Entries int64
	Bytes   int64
	// Skipped are device nodes and sockets, which an image does not
	// carry (a sandbox has its own /dev).
	Skipped []string
}

// writeArchive writes the tree at dir as a tar compressed with zstd.
//
// The archive is the same for the same tree: entries in lexical order,
// times to the second, no access or change times, no user or group
// names (owners are numbers, as they are inside a sandbox), and one
// zstd encoder thread. It keeps owners, modes with their setuid, setgid
// and sticky bits, symbolic links as they are written, hard links
// (within the tree), FIFOs and modification times; not extended
// attributes, which the unpacker does not apply.
func writeArchive(ctx context.Context, w io.Writer, dir string) (archiveStats, error) {
	var st archiveStats
	root, err := os.OpenRoot(dir)
	if err != nil {
		return st, fmt.Errorf("open the image tree %s: %w", dir, err)
	}
	defer root.Close()
	zw, err := zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedBetterCompression), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return st, err
	}
	tw := tar.NewWriter(zw)
	type inode struct{ dev, ino uint64 }
	links := map[inode]string{}
	err = fs.WalkDir(root.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		fi, err := root.Lstat(name)
		if err != nil {
			return err
		}
		sys, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("%s: no owner information", name)
		}
		mode := fi.Mode()
		if mode&(fs.ModeDevice|fs.ModeCharDevice|fs.ModeSocket) != 0 {
			st.Skipped = append(st.Skipped, "/"+name)
			return nil
		}
		if sys.Uid > maxID || sys.Gid > maxID {
			return fmt.Errorf("/%s belongs to %d:%d, beyond the %d ids a sandbox maps", name, sys.Uid, sys.Gid, maxID+1)
		}
		var target string
		if mode&fs.ModeSymlink != 0 {
			if target, err = root.Readlink(name); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(fi, target)
		if err != nil {
			return fmt.Errorf("/%s: %w", name, err)
		}
		hdr.Name = name
		if name == "." {
			hdr.Name = "./"
		} else if fi.IsDir() {
			hdr.Name = name + "/"
		}
		hdr.Uid, hdr.Gid = int(sys.Uid), int(sys.Gid)
		hdr.Uname, hdr.Gname = "", ""
		hdr.ModTime = fi.ModTime().Truncate(time.Second)
		hdr.AccessTime, hdr.ChangeTime = time.Time{}, time.Time{}
		hdr.Format = tar.FormatPAX
		if mode.IsRegular() && sys.Nlink > 1 {
			key := inode{uint64(sys.Dev), sys.Ino}
			if first, ok := links[key]; ok {
				hdr.Typeflag = tar.TypeLink
				hdr.Linkname = first
				hdr.Size = 0
			} else {
				links[key] = name
			}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("/%s: %w", name, err)
		}
		st.Entries++
		if hdr.Typeflag != tar.TypeReg || hdr.Size == 0 {
			return nil
		}
		f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		n, err := io.Copy(tw, f)
		if err != nil {
			return fmt.Errorf("/%s: %w", name, err)
		}
		if n != hdr.Size {
			return fmt.Errorf("/%s changed while it was archived", name)
		}
		st.Bytes += n
		return nil
	})
	if err != nil {
		return st, fmt.Errorf("archive the image tree %s: %w", dir, err)
	}
	if err := tw.Close(); err != nil {
		return st, err
	}
	return st, zw.Close()
}
