// Package initramfs writes the cpio archives ("newc" format) that Linux
// unpacks into its initial root file system (an -initrd for QEMU).
package initramfs

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
)

// Writer writes a newc cpio archive. Close writes the trailer; the
// caller closes the underlying writer.
type Writer struct {
	w   *bufio.Writer
	ino uint32
	off int64
	err error
}

// NewWriter writes an archive to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: bufio.NewWriter(w)} }

// Dir adds a directory.
func (w *Writer) Dir(name string, perm fs.FileMode) error {
	return w.entry(name, 0o040000|uint32(perm.Perm()), 0, 0, nil)
}

// File adds a regular file holding data.
func (w *Writer) File(name string, perm fs.FileMode, data []byte) error {
	return w.entry(name, 0o100000|uint32(perm.Perm()), 0, 0, data)
}

// CharDevice adds a character device node, such as dev/console (5, 1),
// which the kernel needs to give init a console.
func (w *Writer) CharDevice(name string, perm fs.FileMode, major, minor uint32) error {
	return w.entry(name, 0o020000|uint32(perm.Perm()), major, minor, nil)
}

// Symlink adds a symbolic link to target.
func (w *Writer) Symlink(name, target string) error {
	return w.entry(name, 0o120777, 0, 0, []byte(target))
}

// Close writes the trailer and flushes.
func (w *Writer) Close() error {
	if w.err != nil {
		return w.err
	}
	w.ino = 0
	if err := w.header("TRAILER!!!", 0, 0, 0, 0); err != nil {
		return err
	}
	if w.err = w.w.Flush(); w.err != nil {
		return fmt.Errorf("write the cpio archive: %w", w.err)
	}
	return nil
}

func (w *Writer) entry(name string, mode, rmajor, rminor uint32, data []byte) error {
	if w.err != nil {
		return w.err
	}
	name = strings.TrimPrefix(name, "/")
	if name == "" || strings.ContainsRune(name, 0) {
		return fmt.Errorf("cpio entry name %q", name)
	}
	w.ino++
	if err := w.header(name, mode, rmajor, rminor, len(data)); err != nil {
		return err
	}
	w.write(data)
	w.pad()
	return w.err
}

// header writes a newc header, the name and the padding after them.
func (w *Writer) header(name string, mode, rmajor, rminor uint32, size int) error {
	nlink := 1
	if mode&0o170000 == 0o040000 {
		nlink = 2
	}
	// magic, ino, mode, uid, gid, nlink, mtime, filesize, devmajor,
	// devminor, rdevmajor, rdevminor, namesize, check
	h := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		w.ino, mode, 0, 0, nlink, 0, size, 0, 0, rmajor, rminor, len(name)+1, 0)
	w.write([]byte(h))
	w.write([]byte(name))
	w.write([]byte{0})
	w.pad()
	if w.err != nil {
		return fmt.Errorf("write the cpio archive: %w", w.err)
	}
	return nil
}

func (w *Writer) write(b []byte) {
	if w.err != nil {
		return
	}
	n, err := w.w.Write(b)
	w.off += int64(n)
	w.err = err
}

// pad pads to a multiple of four bytes.
func (w *Writer) pad() {
	if n := w.off % 4; n != 0 {
		w.write(make([]byte, 4-n))
	}
}

// WriteInit writes, at path, the smallest root a guest's init needs: the
// directories /dev, /proc and /sys, /dev/console, and init (an
// executable) as /init.
func WriteInit(path string, init []byte) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write the initramfs: %w", err)
	}
	w := NewWriter(f)
	for _, err := range []error{
		w.Dir("dev", 0o755), w.CharDevice("dev/console", 0o600, 5, 1), w.Dir("proc", 0o755), w.Dir("sys", 0o755),
		w.File("init", 0o755, init), w.Close(),
	} {
		if err != nil {
			f.Close()
			return fmt.Errorf("write the initramfs %s: %w", path, err)
		}
	}
	return f.Close()
}
