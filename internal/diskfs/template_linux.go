package diskfs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// template opens, making it first if needed, the formatted filesystem of
// size bytes and inodes that every disk of that shape starts as. Made
// once by mke2fs (tens of milliseconds) and copied after (its data is a
// few MiB), it takes mke2fs out of a sandbox's start. It is sparse: its
// holes are the disk's free space. The file is renamed into place
// complete, so a reader never sees one being made; two makers racing
// write the same thing.
func template(ctx context.Context, dir string, size, inodes int64) (*os.File, error) {
	path := filepath.Join(dir, fmt.Sprintf("ext4-%d-%d.img", size, inodes))
	f, err := openTemplate(path, size)
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		return f, err
	}
	tmp, err := os.CreateTemp(dir, ".ext4-*.img")
	if err != nil {
		return nil, fmt.Errorf("make a disk template: %w", err)
	}
	defer os.Remove(tmp.Name())
	err = tmp.Truncate(size)
	tmp.Close()
	if err != nil {
		return nil, fmt.Errorf("make a disk template: %w", err)
	}
	if err := mkfs(ctx, tmp.Name(), inodes); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return nil, fmt.Errorf("make a disk template: %w", err)
	}
	return openTemplate(path, size)
}

// openTemplate opens the template at path and checks it is what this
// package made: a regular file of the caller's, writable by no one else,
// of the expected size.
func openTemplate(path string, size int64) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open disk template", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("check disk template %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0 || st.Size != size {
		f.Close()
		return nil, fmt.Errorf("disk template %s is not a file of uid %d, writable by it only, of %d bytes: remove it and airlock makes it again", path, os.Geteuid(), size)
	}
	return f, nil
}

// mkfs formats path as ext4 for a disposable disk: no journal (nothing
// survives a crash anyway), no blocks reserved for root (the sandbox's
// root is not the host's), 4 KiB blocks, exactly the inodes asked for
// (rounded up by ext4), and inode tables marked zeroed, since the sparse
// file reads as zeros.
func mkfs(ctx context.Context, path string, inodes int64) error {
	bin, err := exec.LookPath("mkfs.ext4")
	if err != nil {
		for _, p := range []string{"/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"} {
			if _, serr := os.Stat(p); serr == nil {
				bin, err = p, nil
				break
			}
		}
	}
	if err != nil {
		return errors.New("make a disk: mkfs.ext4 was not found: install e2fsprogs (apt-get install e2fsprogs)")
	}
	run := func(ext string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, bin, "-q", "-F", "-b", "4096", "-m", "0", "-N", fmt.Sprint(inodes),
			"-O", "^has_journal", "-E", ext, "-L", "airlock", path)
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
		return cmd.CombinedOutput()
	}
	out, err := run("lazy_itable_init=1,assume_storage_prezeroed=1,nodiscard")
	if err != nil && bytes.Contains(out, []byte("assume_storage_prezeroed")) {
		// e2fsprogs before 1.47; the mount skips the zeroing instead.
		out, err = run("lazy_itable_init=1,nodiscard")
	}
	if err != nil {
		return fmt.Errorf("make a disk: mkfs.ext4: %w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}
