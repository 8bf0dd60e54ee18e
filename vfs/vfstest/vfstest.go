// Package vfstest is a conformance suite of the POSIX semantics that
// every writable vfs.Provider must have.
package vfstest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/vfs"
)

// Run runs the suite. newProvider returns a fresh, writable provider
// whose root is an empty directory or holds no name that starts with
// "vt-" (the suite makes only such names). The suite changes owners to
// other ids, so providers backed by host files need the test to run as
// root; those subtests skip on EPERM.
func Run(t *testing.T, newProvider func(t *testing.T) vfs.Provider) {
	RunWith(t, Options{}, newProvider)
}

// Options are what a provider does differently from the suite's
// default, on purpose.
type Options struct {
	// NoSetIDFiles: the provider never makes a regular file
	// set-user-ID or set-group-ID (one that serves host files to a
	// sandbox, which must not leave a set-id program on the host); the
	// suite checks that it does not.
	NoSetIDFiles bool
}

// RunWith runs the suite as Run does, for a provider that differs as o
// says.
func RunWith(t *testing.T, o Options, newProvider func(t *testing.T) vfs.Provider) {
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, p vfs.Provider)
	}{
		{"CreateReadWrite", testCreateReadWrite},
		{"OpenFlags", testOpenFlags},
		{"Append", testAppend},
		{"Sparse", testSparse},
		{"Truncate", testTruncate},
		{"MkdirReaddir", testMkdirReaddir},
		{"Remove", testRemove},
		{"RemoveOpen", testRemoveOpen},
		{"Rename", testRename},
		{"RenameDir", testRenameDir},
		{"Symlink", testSymlink},
		{"Link", testLink},
		{"Mknod", testMknod},
		{"MknodOwner", testMknodOwner},
		{"Chmod", func(t *testing.T, p vfs.Provider) { testChmod(t, p, o) }},
		{"Owner", testOwner},
		{"Utimens", testUtimens},
		{"Inodes", testInodes},
		{"NotDir", testNotDir},
		{"DeepPath", testDeepPath},
		{"DirHandle", testDirHandle},
		{"ManyEntries", testManyEntries},
		{"Concurrent", testConcurrent},
		{"Statfs", testStatfs},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, newProvider(t))
		})
	}
}

var ctx = context.Background()

func wantErrno(t *testing.T, what string, err error, want ...syscall.Errno) {
	t.Helper()
	got := vfs.Errno(err)
	if slices.Contains(want, got) {
		return
	}
	t.Fatalf("%s: got %v (%d), want %v", what, err, got, want)
}

func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func writeFile(t *testing.T, p vfs.Provider, path string, data []byte) {
	t.Helper()
	h, err := p.Create(ctx, path, 0o644)
	must(t, "create "+path, err)
	if len(data) > 0 {
		n, err := h.WriteAt(ctx, data, 0)
		must(t, "write "+path, err)
		if n != len(data) {
			t.Fatalf("write %s: %d of %d bytes", path, n, len(data))
		}
	}
	must(t, "close "+path, h.Close())
}

func readFile(t *testing.T, p vfs.Provider, path string) []byte {
	t.Helper()
	h, err := p.Open(ctx, path, os.O_RDONLY, 0)
	must(t, "open "+path, err)
	defer h.Close()
	var out []byte
	buf := make([]byte, 4096)
	for off := int64(0); ; {
		n, err := h.ReadAt(ctx, buf, off)
		out = append(out, buf[:n]...)
		off += int64(n)
		if err == io.EOF {
			return out
		}
		must(t, "read "+path, err)
		if n == 0 {
			t.Fatalf("read %s: no progress without EOF", path)
		}
	}
}

func stat(t *testing.T, p vfs.Provider, path string) vfs.FileInfo {
	t.Helper()
	fi, err := p.Stat(ctx, path)
	must(t, "stat "+path, err)
	return fi
}

func nlink(fi vfs.FileInfo) uint32 {
	if fi.Nlink == 0 {
		if fi.IsDir() {
			return 2
		}
		return 1
	}
	return fi.Nlink
}

func names(t *testing.T, p vfs.Provider, path string) []string {
	t.Helper()
	list, err := p.Readdir(ctx, path)
	must(t, "readdir "+path, err)
	var out []string
	for _, fi := range list {
		out = append(out, fi.Name)
	}
	return out
}

func testCreateReadWrite(t *testing.T, p vfs.Provider) {
	data := []byte("hello, world\n")
	writeFile(t, p, "/vt-f", data)
	if got := readFile(t, p, "/vt-f"); !bytes.Equal(got, data) {
		t.Fatalf("read back %q, want %q", got, data)
	}
	fi := stat(t, p, "/vt-f")
	if fi.Size != int64(len(data)) || !fi.Mode.IsRegular() || fi.Mode.Perm() != 0o644 || fi.Name != "vt-f" {
		t.Fatalf("stat: %+v", fi)
	}
	h, err := p.Open(ctx, "/vt-f", os.O_RDWR, 0)
	must(t, "open", err)
	defer h.Close()
	n, err := h.WriteAt(ctx, []byte("HELLO"), 0)
	must(t, "write", err)
	if n != 5 {
		t.Fatalf("wrote %d", n)
	}
	buf := make([]byte, 100)
	n, err = h.ReadAt(ctx, buf, 7)
	if n != len(data)-7 || err != io.EOF {
		t.Fatalf("short read at 7: %d %v", n, err)
	}
	n, err = h.ReadAt(ctx, buf, 1000)
	if n != 0 || err != io.EOF {
		t.Fatalf("read past end: %d %v", n, err)
	}
	n, err = h.ReadAt(ctx, buf[:5], 0)
	if n != 5 || err != nil || string(buf[:5]) != "HELLO" {
		t.Fatalf("read: %d %v %q", n, err, buf[:5])
	}
	hs, err := h.Stat(ctx)
	must(t, "handle stat", err)
	if hs.Size != int64(len(data)) {
		t.Fatalf("handle stat size %d", hs.Size)
	}
	must(t, "sync", h.Sync(ctx))
	must(t, "close", h.Close())
	h = nil
	big := bytes.Repeat([]byte("0123456789abcdef"), 40000)
	writeFile(t, p, "/vt-big", big)
	if got := readFile(t, p, "/vt-big"); !bytes.Equal(got, big) {
		t.Fatalf("big file differs")
	}
}

func testOpenFlags(t *testing.T, p vfs.Provider) {
	_, err := p.Open(ctx, "/vt-missing", os.O_RDONLY, 0)
	wantErrno(t, "open missing", err, syscall.ENOENT)
	writeFile(t, p, "/vt-f", []byte("abc"))
	_, err = p.Open(ctx, "/vt-f", os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	wantErrno(t, "O_EXCL on existing", err, syscall.EEXIST)
	h, err := p.Open(ctx, "/vt-new", os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	must(t, "O_EXCL create", err)
	must(t, "close", h.Close())
	if fi := stat(t, p, "/vt-new"); fi.Mode.Perm() != 0o600 || fi.Size != 0 {
		t.Fatalf("new file: %+v", fi)
	}
	h, err = p.Open(ctx, "/vt-f", os.O_WRONLY|os.O_CREATE, 0o600)
	must(t, "O_CREATE on existing", err)
	must(t, "close", h.Close())
	if fi := stat(t, p, "/vt-f"); fi.Size != 3 || fi.Mode.Perm() != 0o644 {
		t.Fatalf("O_CREATE changed an existing file: %+v", fi)
	}
	h, err = p.Open(ctx, "/vt-f", os.O_WRONLY|os.O_TRUNC, 0)
	must(t, "O_TRUNC", err)
	must(t, "close", h.Close())
	if fi := stat(t, p, "/vt-f"); fi.Size != 0 {
		t.Fatalf("O_TRUNC left %d bytes", fi.Size)
	}
	h, err = p.Open(ctx, "/vt-f", os.O_RDONLY, 0)
	must(t, "open read-only", err)
	_, err = h.WriteAt(ctx, []byte("x"), 0)
	wantErrno(t, "write on a read-only handle", err, syscall.EBADF)
	must(t, "close", h.Close())
	h, err = p.Open(ctx, "/vt-f", os.O_WRONLY, 0)
	must(t, "open write-only", err)
	_, err = h.ReadAt(ctx, make([]byte, 1), 0)
	wantErrno(t, "read on a write-only handle", err, syscall.EBADF)
	must(t, "close", h.Close())
	_, err = p.Open(ctx, "/vt-nodir/f", os.O_RDWR|os.O_CREATE, 0o644)
	wantErrno(t, "create in a missing directory", err, syscall.ENOENT)
}

func testAppend(t *testing.T, p vfs.Provider) {
	writeFile(t, p, "/vt-f", []byte("abc"))
	h, err := p.Open(ctx, "/vt-f", os.O_WRONLY|os.O_APPEND, 0)
	must(t, "open O_APPEND", err)
	for _, s := range []string{"de", "fgh"} {
		n, err := h.WriteAt(ctx, []byte(s), 0)
		must(t, "append", err)
		if n != len(s) {
			t.Fatalf("appended %d", n)
		}
	}
	must(t, "close", h.Close())
	if got := string(readFile(t, p, "/vt-f")); got != "abcdefgh" {
		t.Fatalf("after appends: %q", got)
	}
}

func testSparse(t *testing.T, p vfs.Provider) {
	const off = 5 << 30
	h, err := p.Create(ctx, "/vt-sparse", 0o644)
	must(t, "create", err)
	defer h.Close()
	if _, err := h.WriteAt(ctx, []byte("end"), off); err != nil {
		t.Fatalf("write at 5 GiB: %v", err)
	}
	fi := stat(t, p, "/vt-sparse")
	if fi.Size != off+3 {
		t.Fatalf("size %d", fi.Size)
	}
	if fi.Blocks != 0 && fi.Blocks > 4096 {
		t.Fatalf("a sparse file takes %d blocks", fi.Blocks)
	}
	buf := make([]byte, 8)
	n, err := h.ReadAt(ctx, buf, 1<<30)
	if n != 8 || err != nil || !bytes.Equal(buf, make([]byte, 8)) {
		t.Fatalf("read in a hole: %d %v %q", n, err, buf)
	}
	n, err = h.ReadAt(ctx, buf, off-2)
	if n != 5 || err != io.EOF || string(buf[:5]) != "\x00\x00end" {
		t.Fatalf("read at the end: %d %v %q", n, err, buf[:n])
	}
}

func testTruncate(t *testing.T, p vfs.Provider) {
	writeFile(t, p, "/vt-f", bytes.Repeat([]byte("x"), 10000))
	must(t, "shrink", p.Truncate(ctx, "/vt-f", 5000))
	must(t, "grow", p.Truncate(ctx, "/vt-f", 12000))
	got := readFile(t, p, "/vt-f")
	want := append(bytes.Repeat([]byte("x"), 5000), make([]byte, 7000)...)
	if !bytes.Equal(got, want) {
		t.Fatalf("after shrink and grow: %d bytes, differs", len(got))
	}
	h, err := p.Open(ctx, "/vt-f", os.O_RDWR, 0)
	must(t, "open", err)
	must(t, "handle truncate", h.Truncate(ctx, 3))
	fi, err := h.Stat(ctx)
	must(t, "handle stat", err)
	if fi.Size != 3 {
		t.Fatalf("size %d after truncate", fi.Size)
	}
	must(t, "close", h.Close())
	wantErrno(t, "truncate missing", p.Truncate(ctx, "/vt-missing", 0), syscall.ENOENT)
	must(t, "mkdir", p.Mkdir(ctx, "/vt-d", 0o755))
	wantErrno(t, "truncate a directory", p.Truncate(ctx, "/vt-d", 0), syscall.EISDIR)
	wantErrno(t, "truncate negative", p.Truncate(ctx, "/vt-f", -1), syscall.EINVAL)
}

func testMkdirReaddir(t *testing.T, p vfs.Provider) {
	must(t, "mkdir", p.Mkdir(ctx, "/vt-d", 0o750))
	fi := stat(t, p, "/vt-d")
	if !fi.IsDir() || fi.Mode.Perm() != 0o750 {
		t.Fatalf("mkdir: %+v", fi)
	}
	wantErrno(t, "mkdir existing", p.Mkdir(ctx, "/vt-d", 0o755), syscall.EEXIST)
	wantErrno(t, "mkdir in missing", p.Mkdir(ctx, "/vt-x/y", 0o755), syscall.ENOENT)
	want := []string{"a", "b", "c", "sub", "z"}
	for _, n := range want {
		if n == "sub" {
			must(t, "mkdir", p.Mkdir(ctx, "/vt-d/"+n, 0o755))
		} else {
			writeFile(t, p, "/vt-d/"+n, nil)
		}
	}
	got := names(t, p, "/vt-d")
	sorted := slices.Sorted(slices.Values(got))
	if !slices.Equal(sorted, want) {
		t.Fatalf("readdir: %v, want %v", got, want)
	}
	if again := names(t, p, "/vt-d"); !slices.Equal(again, got) {
		t.Fatalf("readdir order changed: %v then %v", got, again)
	}
	list, err := p.Readdir(ctx, "/vt-d")
	must(t, "readdir", err)
	for _, fi := range list {
		if fi.IsDir() != (fi.Name == "sub") {
			t.Fatalf("readdir entry %+v", fi)
		}
	}
	if n := nlink(stat(t, p, "/vt-d")); n != 3 {
		t.Fatalf("directory with one subdirectory has %d links, want 3", n)
	}
	_, err = p.Readdir(ctx, "/vt-d/a")
	wantErrno(t, "readdir a file", err, syscall.ENOTDIR)
	_, err = p.Readdir(ctx, "/vt-missing")
	wantErrno(t, "readdir missing", err, syscall.ENOENT)
	if !slices.Contains(names(t, p, "/"), "vt-d") {
		t.Fatalf("root does not list vt-d")
	}
}

func testRemove(t *testing.T, p vfs.Provider) {
	must(t, "mkdir", p.Mkdir(ctx, "/vt-d", 0o755))
	writeFile(t, p, "/vt-d/f", []byte("x"))
	wantErrno(t, "remove non-empty", p.Remove(ctx, "/vt-d"), syscall.ENOTEMPTY, syscall.EEXIST)
	must(t, "remove file", p.Remove(ctx, "/vt-d/f"))
	_, err := p.Stat(ctx, "/vt-d/f")
	wantErrno(t, "stat removed", err, syscall.ENOENT)
	must(t, "remove dir", p.Remove(ctx, "/vt-d"))
	wantErrno(t, "remove missing", p.Remove(ctx, "/vt-d"), syscall.ENOENT)
	must(t, "symlink", p.Symlink(ctx, "/nowhere", "/vt-l"))
	must(t, "remove symlink", p.Remove(ctx, "/vt-l"))
}

func testRemoveOpen(t *testing.T, p vfs.Provider) {
	writeFile(t, p, "/vt-f", []byte("still here"))
	h, err := p.Open(ctx, "/vt-f", os.O_RDWR, 0)
	must(t, "open", err)
	defer h.Close()
	must(t, "remove", p.Remove(ctx, "/vt-f"))
	buf := make([]byte, 10)
	if n, err := h.ReadAt(ctx, buf, 0); n != 10 || (err != nil && err != io.EOF) || string(buf) != "still here" {
		t.Fatalf("read after remove: %d %v %q", n, err, buf)
	}
	if _, err := h.WriteAt(ctx, []byte("!"), 10); err != nil {
		t.Fatalf("write after remove: %v", err)
	}
	fi, err := h.Stat(ctx)
	must(t, "stat after remove", err)
	if fi.Size != 11 {
		t.Fatalf("size after remove %d", fi.Size)
	}
	if _, err := p.Stat(ctx, "/vt-f"); vfs.Errno(err) != syscall.ENOENT {
		t.Fatalf("stat of removed file: %v", err)
	}
	writeFile(t, p, "/vt-f", []byte("new"))
	if got := string(readFile(t, p, "/vt-f")); got != "new" {
		t.Fatalf("new file under old name: %q", got)
	}
}

func testRename(t *testing.T, p vfs.Provider) {
	writeFile(t, p, "/vt-a", []byte("A"))
	writeFile(t, p, "/vt-b", []byte("B"))
	ino := stat(t, p, "/vt-a").Ino
	must(t, "rename over file", p.Rename(ctx, "/vt-a", "/vt-b"))
	if got := string(readFile(t, p, "/vt-b")); got != "A" {
		t.Fatalf("after rename: %q", got)
	}
	if ino != 0 && stat(t, p, "/vt-b").Ino != ino {
		t.Fatalf("rename changed the inode number")
	}
	_, err := p.Stat(ctx, "/vt-a")
	wantErrno(t, "old name", err, syscall.ENOENT)
	wantErrno(t, "rename missing", p.Rename(ctx, "/vt-a", "/vt-c"), syscall.ENOENT)
	must(t, "mkdir", p.Mkdir(ctx, "/vt-d", 0o755))
	must(t, "rename into dir", p.Rename(ctx, "/vt-b", "/vt-d/b"))
	if got := string(readFile(t, p, "/vt-d/b")); got != "A" {
		t.Fatalf("after move: %q", got)
	}
	must(t, "rename onto itself", p.Rename(ctx, "/vt-d/b", "/vt-d/b"))
	wantErrno(t, "file over dir", p.Rename(ctx, "/vt-d/b", "/vt-d"), syscall.EISDIR, syscall.ENOTEMPTY)
	must(t, "mkdir", p.Mkdir(ctx, "/vt-e", 0o755))
	wantErrno(t, "file over empty dir", p.Rename(ctx, "/vt-d/b", "/vt-e"), syscall.EISDIR)
	wantErrno(t, "dir over file", p.Rename(ctx, "/vt-e", "/vt-d/b"), syscall.ENOTDIR)
	must(t, "link", p.Link(ctx, "/vt-d/b", "/vt-d/b2"))
	must(t, "rename between links of one file", p.Rename(ctx, "/vt-d/b", "/vt-d/b2"))
	stat(t, p, "/vt-d/b")
	stat(t, p, "/vt-d/b2")
}

func testRenameDir(t *testing.T, p vfs.Provider) {
	must(t, "mkdir", p.Mkdir(ctx, "/vt-d", 0o755))
	must(t, "mkdir", p.Mkdir(ctx, "/vt-d/sub", 0o755))
	writeFile(t, p, "/vt-d/sub/f", []byte("deep"))
	wantErrno(t, "dir into itself", p.Rename(ctx, "/vt-d", "/vt-d/sub/x"), syscall.EINVAL)
	wantErrno(t, "dir onto its child", p.Rename(ctx, "/vt-d", "/vt-d/sub"), syscall.EINVAL, syscall.ENOTEMPTY)
	must(t, "mkdir", p.Mkdir(ctx, "/vt-empty", 0o755))
	must(t, "mkdir", p.Mkdir(ctx, "/vt-full", 0o755))
	writeFile(t, p, "/vt-full/x", nil)
	wantErrno(t, "dir over non-empty dir", p.Rename(ctx, "/vt-d", "/vt-full"), syscall.ENOTEMPTY, syscall.EEXIST)
	must(t, "dir over empty dir", p.Rename(ctx, "/vt-d", "/vt-empty"))
	if got := string(readFile(t, p, "/vt-empty/sub/f")); got != "deep" {
		t.Fatalf("after dir rename: %q", got)
	}
	must(t, "dir to new name", p.Rename(ctx, "/vt-empty/sub", "/vt-full/sub"))
	if n := nlink(stat(t, p, "/vt-full")); n != 3 {
		t.Fatalf("nlink of new parent %d", n)
	}
	if n := nlink(stat(t, p, "/vt-empty")); n != 2 {
		t.Fatalf("nlink of old parent %d", n)
	}
	if got := string(readFile(t, p, "/vt-full/sub/f")); got != "deep" {
		t.Fatalf("after dir move: %q", got)
	}
}

func testSymlink(t *testing.T, p vfs.Provider) {
	for _, target := range []string{"/etc/passwd", "../../x", "rel/target", "a"} {
		must(t, "symlink", p.Symlink(ctx, target, "/vt-l"))
		got, err := p.Readlink(ctx, "/vt-l")
		must(t, "readlink", err)
		if got != target {
			t.Fatalf("readlink %q, want %q", got, target)
		}
		fi := stat(t, p, "/vt-l")
		if fi.Mode&fs.ModeSymlink == 0 || fi.Size != int64(len(target)) {
			t.Fatalf("stat symlink: %+v", fi)
		}
		must(t, "remove", p.Remove(ctx, "/vt-l"))
	}
	writeFile(t, p, "/vt-f", nil)
	wantErrno(t, "symlink over existing", p.Symlink(ctx, "x", "/vt-f"), syscall.EEXIST)
	_, err := p.Readlink(ctx, "/vt-f")
	wantErrno(t, "readlink of a file", err, syscall.EINVAL)
	must(t, "symlink", p.Symlink(ctx, "vt-f", "/vt-l"))
	_, err = p.Open(ctx, "/vt-l", os.O_RDONLY, 0)
	wantErrno(t, "open a symlink", err, syscall.ELOOP)
	must(t, "rename symlink", p.Rename(ctx, "/vt-l", "/vt-l2"))
	if got, _ := p.Readlink(ctx, "/vt-l2"); got != "vt-f" {
		t.Fatalf("renamed symlink reads %q", got)
	}
}

func testLink(t *testing.T, p vfs.Provider) {
	writeFile(t, p, "/vt-a", []byte("shared"))
	must(t, "link", p.Link(ctx, "/vt-a", "/vt-b"))
	a, b := stat(t, p, "/vt-a"), stat(t, p, "/vt-b")
	if nlink(a) != 2 || nlink(b) != 2 || (a.Ino != 0 && a.Ino != b.Ino) {
		t.Fatalf("after link: %+v %+v", a, b)
	}
	h, err := p.Open(ctx, "/vt-b", os.O_WRONLY, 0)
	must(t, "open", err)
	_, err = h.WriteAt(ctx, []byte("SH"), 0)
	must(t, "write", err)
	must(t, "close", h.Close())
	if got := string(readFile(t, p, "/vt-a")); got != "SHared" {
		t.Fatalf("through the other name: %q", got)
	}
	must(t, "chmod", p.Chmod(ctx, "/vt-b", 0o600))
	if m := stat(t, p, "/vt-a").Mode.Perm(); m != 0o600 {
		t.Fatalf("mode through the other name %v", m)
	}
	must(t, "remove", p.Remove(ctx, "/vt-a"))
	if n := nlink(stat(t, p, "/vt-b")); n != 1 {
		t.Fatalf("nlink after remove %d", n)
	}
	writeFile(t, p, "/vt-c", nil)
	wantErrno(t, "link onto existing", p.Link(ctx, "/vt-b", "/vt-c"), syscall.EEXIST)
	wantErrno(t, "link missing", p.Link(ctx, "/vt-x", "/vt-y"), syscall.ENOENT)
	must(t, "mkdir", p.Mkdir(ctx, "/vt-d", 0o755))
	wantErrno(t, "link a directory", p.Link(ctx, "/vt-d", "/vt-d2"), syscall.EPERM)
	must(t, "symlink", p.Symlink(ctx, "vt-b", "/vt-s"))
	must(t, "link a symlink", p.Link(ctx, "/vt-s", "/vt-s2"))
	if fi := stat(t, p, "/vt-s2"); fi.Mode&fs.ModeSymlink == 0 {
		t.Fatalf("link to a symlink followed it: %+v", fi)
	}
}

// testMknod: FIFOs and sockets are made, listed, linked, renamed and
// removed like files, hold no data and cannot be opened through the
// provider; devices and other types are refused and leave nothing.
func testMknod(t *testing.T, p vfs.Provider) {
	err := p.Mknod(ctx, "/vt-p", fs.ModeNamedPipe|0o640)
	if vfs.Errno(err) == syscall.EPERM && runtime.GOOS != "linux" {
		t.Skipf("no special files on %s: %v", runtime.GOOS, err)
	}
	must(t, "mknod a FIFO", err)
	must(t, "mknod a socket", p.Mknod(ctx, "/vt-s", fs.ModeSocket|0o755))
	for name, want := range map[string]fs.FileMode{"/vt-p": fs.ModeNamedPipe | 0o640, "/vt-s": fs.ModeSocket | 0o755} {
		fi := stat(t, p, name)
		if fi.Mode != want || fi.Size != 0 || nlink(fi) != 1 {
			t.Fatalf("stat %s: %v size %d nlink %d, want %v", name, fi.Mode, fi.Size, nlink(fi), want)
		}
		for _, flags := range []int{os.O_RDONLY, os.O_WRONLY, os.O_RDWR} {
			if h, err := p.Open(ctx, name, flags, 0); err == nil {
				h.Close()
				t.Fatalf("open %s (flags %#x) succeeded", name, flags)
			} else {
				wantErrno(t, "open "+name, err, syscall.ENXIO)
			}
		}
		wantErrno(t, "truncate "+name, p.Truncate(ctx, name, 0), syscall.EINVAL)
	}
	list, err := p.Readdir(ctx, "/")
	must(t, "readdir", err)
	var types []string
	for _, fi := range list {
		if fi.Name == "vt-p" || fi.Name == "vt-s" {
			types = append(types, fi.Name+":"+fi.Mode.Type().String())
		}
	}
	if want := []string{"vt-p:p---------", "vt-s:S---------"}; !slices.Equal(types, want) {
		t.Fatalf("listing %v, want %v", types, want)
	}

	wantErrno(t, "mknod over a FIFO", p.Mknod(ctx, "/vt-p", fs.ModeNamedPipe|0o600), syscall.EEXIST)
	writeFile(t, p, "/vt-f", nil)
	wantErrno(t, "mknod over a file", p.Mknod(ctx, "/vt-f", fs.ModeSocket|0o600), syscall.EEXIST)
	must(t, "symlink", p.Symlink(ctx, "vt-new", "/vt-l"))
	wantErrno(t, "mknod over a dangling symlink", p.Mknod(ctx, "/vt-l", fs.ModeNamedPipe|0o600), syscall.EEXIST)
	if _, err := p.Stat(ctx, "/vt-new"); vfs.Errno(err) != syscall.ENOENT {
		t.Fatalf("mknod followed a symlink: stat of its target: %v", err)
	}
	wantErrno(t, "mknod in a missing directory", p.Mknod(ctx, "/vt-x/p", fs.ModeNamedPipe|0o600), syscall.ENOENT)
	wantErrno(t, "mknod below a file", p.Mknod(ctx, "/vt-f/p", fs.ModeNamedPipe|0o600), syscall.ENOTDIR)
	for _, tc := range []struct {
		mode fs.FileMode
		want syscall.Errno
	}{
		{fs.ModeDevice | fs.ModeCharDevice | 0o666, syscall.EPERM},
		{fs.ModeDevice | 0o600, syscall.EPERM},
		{fs.ModeDir | 0o755, syscall.EINVAL},
		{fs.ModeSymlink | 0o777, syscall.EINVAL},
		{0o644, syscall.EINVAL},
	} {
		wantErrno(t, fmt.Sprintf("mknod %v", tc.mode), p.Mknod(ctx, "/vt-dev", tc.mode), tc.want)
		if _, err := p.Stat(ctx, "/vt-dev"); vfs.Errno(err) != syscall.ENOENT {
			t.Fatalf("a refused mknod %v left something: %v", tc.mode, err)
		}
	}

	must(t, "chmod a FIFO", p.Chmod(ctx, "/vt-p", fs.ModeSetgid|0o604))
	if fi := stat(t, p, "/vt-p"); fi.Mode != fs.ModeNamedPipe|fs.ModeSetgid|0o604 {
		t.Fatalf("FIFO after chmod: %v", fi.Mode)
	}
	must(t, "link a FIFO", p.Link(ctx, "/vt-p", "/vt-p2"))
	if a, b := stat(t, p, "/vt-p"), stat(t, p, "/vt-p2"); nlink(a) != 2 || (a.Ino != 0 && a.Ino != b.Ino) {
		t.Fatalf("after link: %+v %+v", a, b)
	}
	must(t, "rename a socket", p.Rename(ctx, "/vt-s", "/vt-s2"))
	if fi := stat(t, p, "/vt-s2"); fi.Mode.Type() != fs.ModeSocket {
		t.Fatalf("renamed socket: %v", fi.Mode)
	}
	must(t, "rename a FIFO over a file", p.Rename(ctx, "/vt-p2", "/vt-f"))
	if fi := stat(t, p, "/vt-f"); fi.Mode.Type() != fs.ModeNamedPipe {
		t.Fatalf("renamed FIFO: %v", fi.Mode)
	}
	must(t, "mkdir", p.Mkdir(ctx, "/vt-d", 0o755))
	must(t, "mknod in a directory", p.Mknod(ctx, "/vt-d/p", fs.ModeNamedPipe|0o600))
	wantErrno(t, "rmdir of a directory with a FIFO", p.Remove(ctx, "/vt-d"), syscall.ENOTEMPTY)
	for _, n := range []string{"/vt-d/p", "/vt-d", "/vt-f", "/vt-p", "/vt-s2"} {
		must(t, "remove "+n, p.Remove(ctx, n))
	}
}

// testMknodOwner: a special file is the caller's.
func testMknodOwner(t *testing.T, p vfs.Provider) {
	cctx := vfs.WithCaller(ctx, vfs.Caller{UID: 1234, GID: 5678})
	err := p.Mknod(cctx, "/vt-p", fs.ModeNamedPipe|0o600)
	if vfs.Errno(err) == syscall.EPERM && runtime.GOOS != "linux" {
		t.Skipf("no special files on %s: %v", runtime.GOOS, err)
	}
	must(t, "mknod", err)
	fi := stat(t, p, "/vt-p")
	if fi.UID != 1234 || fi.GID != 5678 {
		if os.Geteuid() != 0 {
			t.Skipf("made with owner %d:%d, not the caller's (not root)", fi.UID, fi.GID)
		}
		t.Fatalf("owned by %d:%d, want 1234:5678", fi.UID, fi.GID)
	}
	if fi.Mode != fs.ModeNamedPipe|0o600 {
		t.Fatalf("mode %v", fi.Mode)
	}
}

// testDeepPath: paths longer than one system call takes (PATH_MAX) work,
// up to vfs.MaxPath; one longer is ENAMETOOLONG.
func testDeepPath(t *testing.T, p vfs.Provider) {
	name := strings.Repeat("d", vfs.MaxName)
	dir := "/vt-deep"
	must(t, "mkdir", p.Mkdir(ctx, dir, 0o755))
	for len(dir) < 6000 {
		dir += "/" + name
		must(t, "mkdir "+fmt.Sprint(len(dir)), p.Mkdir(ctx, dir, 0o755))
	}
	writeFile(t, p, dir+"/f", []byte("deep"))
	if got := string(readFile(t, p, dir+"/f")); got != "deep" {
		t.Fatalf("read %q", got)
	}
	if got := names(t, p, dir); !slices.Equal(got, []string{"f"}) {
		t.Fatalf("readdir %v", got)
	}
	must(t, "rename", p.Rename(ctx, dir+"/f", dir+"/g"))
	must(t, "symlink", p.Symlink(ctx, "g", dir+"/l"))
	must(t, "link", p.Link(ctx, dir+"/g", dir+"/h"))
	must(t, "chmod", p.Chmod(ctx, dir+"/g", 0o600))
	if fi := stat(t, p, dir+"/h"); fi.Mode != 0o600 || fi.Size != 4 {
		t.Fatalf("stat %v %d", fi.Mode, fi.Size)
	}
	must(t, "truncate", p.Truncate(ctx, dir+"/h", 1))
	if got := string(readFile(t, p, dir+"/g")); got != "d" {
		t.Fatalf("read after truncate %q", got)
	}
	too := dir
	for len(too) <= vfs.MaxPath {
		too += "/" + name
	}
	wantErrno(t, "mkdir past MaxPath", p.Mkdir(ctx, too, 0o755), syscall.ENAMETOOLONG, syscall.ENOENT)
	for _, n := range []string{"l", "h", "g"} {
		must(t, "remove "+n, p.Remove(ctx, dir+"/"+n))
	}
	for dir != "/vt-deep" {
		must(t, "rmdir", p.Remove(ctx, dir))
		dir = dir[:strings.LastIndexByte(dir, '/')]
	}
}

func testChmod(t *testing.T, p vfs.Provider, o Options) {
	writeFile(t, p, "/vt-f", nil)
	before := stat(t, p, "/vt-f")
	time.Sleep(20 * time.Millisecond)
	must(t, "chmod", p.Chmod(ctx, "/vt-f", fs.ModeSetuid|fs.ModeSetgid|0o751))
	fi := stat(t, p, "/vt-f")
	want := fs.ModeSetuid | fs.ModeSetgid | 0o751
	if o.NoSetIDFiles {
		want = 0o751
	}
	if fi.Mode != want {
		t.Fatalf("after chmod: %v, want %v", fi.Mode, want)
	}
	if !fi.CTime.IsZero() && !fi.CTime.After(before.CTime) {
		t.Fatalf("chmod left ctime %v (was %v)", fi.CTime, before.CTime)
	}
	must(t, "mkdir", p.Mkdir(ctx, "/vt-d", 0o755))
	must(t, "chmod dir", p.Chmod(ctx, "/vt-d", fs.ModeSticky|0o777))
	if fi := stat(t, p, "/vt-d"); fi.Mode&fs.ModeSticky == 0 || fi.Mode.Perm() != 0o777 || !fi.IsDir() {
		t.Fatalf("dir after chmod: %v", fi.Mode)
	}
	wantErrno(t, "chmod missing", p.Chmod(ctx, "/vt-x", 0o644), syscall.ENOENT)
}

func testOwner(t *testing.T, p vfs.Provider) {
	cctx := vfs.WithCaller(ctx, vfs.Caller{UID: 1234, GID: 5678})
	h, err := p.Create(cctx, "/vt-f", 0o644)
	must(t, "create", err)
	must(t, "close", h.Close())
	must(t, "mkdir", p.Mkdir(cctx, "/vt-d", 0o755))
	must(t, "symlink", p.Symlink(cctx, "x", "/vt-l"))
	for _, n := range []string{"/vt-f", "/vt-d", "/vt-l"} {
		fi := stat(t, p, n)
		if fi.UID != 1234 || fi.GID != 5678 {
			if os.Geteuid() != 0 {
				t.Skipf("%s made with owner %d:%d, not the caller's (not root)", n, fi.UID, fi.GID)
			}
			t.Fatalf("%s owned by %d:%d, want 1234:5678", n, fi.UID, fi.GID)
		}
	}
	err = p.Chown(ctx, "/vt-f", 42, -1)
	if vfs.Errno(err) == syscall.EPERM {
		t.Skip("chown refused")
	}
	must(t, "chown uid", err)
	if fi := stat(t, p, "/vt-f"); fi.UID != 42 || fi.GID != 5678 {
		t.Fatalf("after chown uid: %d:%d", fi.UID, fi.GID)
	}
	must(t, "chown gid", p.Chown(ctx, "/vt-f", -1, 43))
	if fi := stat(t, p, "/vt-f"); fi.UID != 42 || fi.GID != 43 {
		t.Fatalf("after chown gid: %d:%d", fi.UID, fi.GID)
	}
	must(t, "chown symlink", p.Chown(ctx, "/vt-l", 7, 8))
	if fi := stat(t, p, "/vt-l"); fi.UID != 7 || fi.GID != 8 || fi.Mode&fs.ModeSymlink == 0 {
		t.Fatalf("symlink after chown: %+v", fi)
	}
	wantErrno(t, "chown missing", p.Chown(ctx, "/vt-x", 1, 1), syscall.ENOENT)
}

func testUtimens(t *testing.T, p vfs.Provider) {
	writeFile(t, p, "/vt-f", nil)
	at := time.Date(2001, 2, 3, 4, 5, 6, 7000, time.UTC)
	mt := time.Date(2011, 12, 13, 14, 15, 16, 17000, time.UTC)
	before := stat(t, p, "/vt-f")
	time.Sleep(20 * time.Millisecond)
	must(t, "utimens", p.Utimens(ctx, "/vt-f", &at, &mt))
	fi := stat(t, p, "/vt-f")
	if !fi.ModTime.Equal(mt) || (!fi.ATime.IsZero() && !fi.ATime.Equal(at)) {
		t.Fatalf("times %v %v, want %v %v", fi.ATime, fi.ModTime, at, mt)
	}
	if !fi.CTime.IsZero() && !fi.CTime.After(before.CTime) {
		t.Fatalf("utimens left ctime %v", fi.CTime)
	}
	mt2 := mt.Add(time.Hour)
	must(t, "utimens mtime only", p.Utimens(ctx, "/vt-f", nil, &mt2))
	fi = stat(t, p, "/vt-f")
	if !fi.ModTime.Equal(mt2) || (!fi.ATime.IsZero() && !fi.ATime.Equal(at)) {
		t.Fatalf("after mtime only: %v %v", fi.ATime, fi.ModTime)
	}
	must(t, "symlink", p.Symlink(ctx, "vt-f", "/vt-l"))
	must(t, "utimens symlink", p.Utimens(ctx, "/vt-l", &at, &at))
	if fi := stat(t, p, "/vt-f"); !fi.ModTime.Equal(mt2) {
		t.Fatalf("utimens on a symlink followed it")
	}
	before = stat(t, p, "/vt-f")
	time.Sleep(20 * time.Millisecond)
	h, err := p.Open(ctx, "/vt-f", os.O_WRONLY, 0)
	must(t, "open", err)
	_, err = h.WriteAt(ctx, []byte("x"), 0)
	must(t, "write", err)
	must(t, "close", h.Close())
	if fi := stat(t, p, "/vt-f"); !fi.ModTime.After(before.ModTime) {
		t.Fatalf("write left mtime %v", fi.ModTime)
	}
}

func testInodes(t *testing.T, p vfs.Provider) {
	writeFile(t, p, "/vt-a", nil)
	writeFile(t, p, "/vt-b", nil)
	a, b := stat(t, p, "/vt-a"), stat(t, p, "/vt-b")
	if a.Ino == 0 {
		t.Skip("provider leaves inode numbers to the consumer")
	}
	if a.Ino == b.Ino {
		t.Fatalf("two files share inode %d", a.Ino)
	}
	if again := stat(t, p, "/vt-a"); again.Ino != a.Ino {
		t.Fatalf("inode changed from %d to %d", a.Ino, again.Ino)
	}
	list, err := p.Readdir(ctx, "/")
	must(t, "readdir", err)
	for _, fi := range list {
		if fi.Name == "vt-a" && fi.Ino != a.Ino {
			t.Fatalf("readdir inode %d, stat %d", fi.Ino, a.Ino)
		}
	}
}

func testNotDir(t *testing.T, p vfs.Provider) {
	writeFile(t, p, "/vt-f", nil)
	_, err := p.Stat(ctx, "/vt-f/x")
	wantErrno(t, "stat below a file", err, syscall.ENOTDIR)
	wantErrno(t, "mkdir below a file", p.Mkdir(ctx, "/vt-f/x", 0o755), syscall.ENOTDIR)
	_, err = p.Create(ctx, "/vt-f/x", 0o644)
	wantErrno(t, "create below a file", err, syscall.ENOTDIR)
}

func testDirHandle(t *testing.T, p vfs.Provider) {
	must(t, "mkdir", p.Mkdir(ctx, "/vt-d", 0o755))
	h, err := p.Open(ctx, "/vt-d", os.O_RDONLY, 0)
	must(t, "open dir", err)
	fi, err := h.Stat(ctx)
	must(t, "stat dir handle", err)
	if !fi.IsDir() {
		t.Fatalf("dir handle stat %+v", fi)
	}
	must(t, "close", h.Close())
	_, err = p.Open(ctx, "/vt-d", os.O_RDWR, 0)
	wantErrno(t, "open dir for writing", err, syscall.EISDIR)
	h, err = p.Open(ctx, "/", os.O_RDONLY, 0)
	must(t, "open root", err)
	must(t, "close", h.Close())
	if !stat(t, p, "/").IsDir() {
		t.Fatal("root is not a directory")
	}
}

func testManyEntries(t *testing.T, p vfs.Provider) {
	must(t, "mkdir", p.Mkdir(ctx, "/vt-d", 0o755))
	const n = 2000
	for i := range n {
		writeFile(t, p, fmt.Sprintf("/vt-d/f%05d", i), nil)
	}
	got := names(t, p, "/vt-d")
	if len(got) != n {
		t.Fatalf("%d entries, want %d", len(got), n)
	}
	for i := 0; i < n; i += 2 {
		must(t, "remove", p.Remove(ctx, fmt.Sprintf("/vt-d/f%05d", i)))
	}
	if got := names(t, p, "/vt-d"); len(got) != n/2 {
		t.Fatalf("%d entries after removes, want %d", len(got), n/2)
	}
}

func testConcurrent(t *testing.T, p vfs.Provider) {
	must(t, "mkdir", p.Mkdir(ctx, "/vt-d", 0o755))
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			name := fmt.Sprintf("/vt-d/g%d", g)
			data := bytes.Repeat([]byte{byte('a' + g)}, 10000)
			for range 20 {
				h, err := p.Create(ctx, name, 0o644)
				if err != nil {
					errs <- err
					return
				}
				_, err = h.WriteAt(ctx, data, 0)
				h.Close()
				if err != nil {
					errs <- err
					return
				}
				if err := p.Rename(ctx, name, name+"x"); err != nil {
					errs <- err
					return
				}
				if err := p.Remove(ctx, name+"x"); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := names(t, p, "/vt-d"); len(got) != 0 {
		t.Fatalf("left %v", got)
	}
}

func testStatfs(t *testing.T, p vfs.Provider) {
	st, err := p.Statfs(ctx, "/")
	must(t, "statfs", err)
	if st.FreeBytes > st.TotalBytes || st.ReservedBytes > st.FreeBytes {
		t.Fatalf("statfs %+v", st)
	}
	if p.Readonly() {
		t.Fatal("a writable provider reports Readonly")
	}
}

// ErrnoOf is vfs.Errno, for table tests that compare errors.
func ErrnoOf(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return vfs.Errno(err)
}
