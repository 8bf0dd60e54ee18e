//go:build linux

package vfs_test

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/vfs"
)

// escapeSetup makes outer/root (served) and outer/outside holding a
// file "f" that must never be read or changed through the provider.
func escapeSetup(t *testing.T) (p vfs.Provider, root, outside string) {
	t.Helper()
	outer := t.TempDir()
	root = filepath.Join(outer, "root")
	outside = filepath.Join(outer, "outside")
	for _, d := range []string{root, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"f", "only-outside"} {
		if err := os.WriteFile(filepath.Join(outside, name), []byte("OUTSIDE"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p, err := vfs.NewRealFS(root)
	if err != nil {
		t.Fatal(err)
	}
	return p, root, outside
}

func checkOutside(t *testing.T, outside string) {
	t.Helper()
	ents, err := os.ReadDir(outside)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 2 || ents[0].Name() != "f" || ents[1].Name() != "only-outside" {
		t.Fatalf("outside directory now holds %v", ents)
	}
	fi, err := os.Lstat(filepath.Join(outside, "f"))
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(filepath.Join(outside, "f"))
	if string(data) != "OUTSIDE" || fi.Mode() != 0o644 {
		t.Fatalf("outside file changed: %q %v", data, fi.Mode())
	}
}

// tryAll runs every operation on paths that lead outside if followed.
func tryAll(ctx context.Context, t *testing.T, p vfs.Provider, dir string) {
	t.Helper()
	f := dir + "/f"
	if h, err := p.Open(ctx, f, os.O_RDWR, 0); err == nil {
		buf := make([]byte, 16)
		n, _ := h.ReadAt(ctx, buf, 0)
		h.Close()
		if bytes.Contains(buf[:n], []byte("OUTSIDE")) {
			t.Fatalf("read the outside file through %s", f)
		}
	}
	if fi, err := p.Stat(ctx, f); err == nil && fi.Size == 7 {
		t.Fatalf("stat of %s reached outside: %+v", f, fi)
	}
	if list, err := p.Readdir(ctx, dir); err == nil {
		for _, e := range list {
			if e.Name == "only-outside" {
				t.Fatalf("listed the outside directory through %s", dir)
			}
		}
	}
	p.Chmod(ctx, f, 0o777)
	p.Chown(ctx, f, 1, 1)
	p.Truncate(ctx, f, 0)
	now := time.Unix(0, 0)
	p.Utimens(ctx, f, &now, &now)
	p.Remove(ctx, f)
	p.Rename(ctx, f, "/stolen")
	p.Link(ctx, f, "/stolen-link")
	p.Symlink(ctx, "x", dir+"/new-link")
	p.Mkdir(ctx, dir+"/new-dir", 0o755)
	if h, err := p.Create(ctx, dir+"/new-file", 0o644); err == nil {
		h.Close()
	}
	if h, err := p.Open(ctx, f, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644); err == nil {
		h.WriteAt(ctx, []byte("pwned"), 0)
		h.Close()
	}
}

func TestRealFSEscapeSymlinks(t *testing.T) {
	ctx := context.Background()
	p, root, outside := escapeSetup(t)
	for name, target := range map[string]string{
		"abs":    outside,
		"slash":  "/",
		"up":     "..",
		"upup":   "../..",
		"rel":    "../outside",
		"nested": "sub/../../outside",
	} {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
		tryAll(ctx, t, p, "/"+name)
		if name == "slash" {
			tryAll(ctx, t, p, "/slash"+outside)
		}
	}
	for _, bad := range []string{"/../outside", "/a/../../outside", "../outside", "outside", "/./x", "//x"} {
		if _, err := p.Stat(ctx, bad+"/f"); vfs.Errno(err) != 22 {
			t.Errorf("stat %q: %v, want EINVAL", bad, err)
		}
		tryAll(ctx, t, p, bad)
	}
	checkOutside(t, outside)
	// A hard link made on the host to the outside file is inside by
	// then; nothing else from outside appeared in the root.
	if _, err := os.Lstat(filepath.Join(root, "stolen")); err == nil {
		t.Fatal("a file from outside was moved in")
	}
}

func TestRealFSEscapeSymlinkSwap(t *testing.T) {
	ctx := context.Background()
	p, root, outside := escapeSetup(t)
	d := filepath.Join(root, "d")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "f"), []byte("inside"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop.Store(true)
	wg.Go(func() {
		// Swap d between the real directory and a symlink to outside.
		for !stop.Load() {
			os.Rename(d, d+".real")
			os.Symlink(outside, d)
			runtime.Gosched()
			os.Remove(d)
			os.Rename(d+".real", d)
		}
	})
	deadline := time.Now().Add(500 * time.Millisecond)
	for i := 0; time.Now().Before(deadline) || i < 50; i++ {
		tryAll(ctx, t, p, "/d")
		if h, err := p.Create(ctx, "/d/f", 0o644); err == nil {
			h.WriteAt(ctx, []byte("inside"), 0)
			h.Close()
		}
	}
	stop.Store(true)
	wg.Wait()
	checkOutside(t, outside)
}

func TestRealFSEscapeRenameRace(t *testing.T) {
	ctx := context.Background()
	p, root, outside := escapeSetup(t)
	// Inside: /a/b/c/d. One goroutine moves directories about through the
	// provider while another resolves deep paths; a symlink to outside
	// waits at each level.
	if err := os.MkdirAll(filepath.Join(root, "a/b/c/d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"", "a", "a/b", "a/b/c"} {
		os.Symlink("../../../../../"+outside, filepath.Join(root, dir, "out"))
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop.Store(true)
	wg.Go(func() {
		for !stop.Load() {
			p.Rename(ctx, "/a/b/c", "/c")
			p.Rename(ctx, "/c", "/a/b/c")
			p.Rename(ctx, "/a/b", "/a/b/c/d/x")
			p.Rename(ctx, "/a/out", "/a/b")
			p.Rename(ctx, "/a/b", "/a/out")
		}
	})
	deadline := time.Now().Add(500 * time.Millisecond)
	for time.Now().Before(deadline) {
		for _, dir := range []string{"/a/b/c/out", "/a/b/out", "/c/out", "/a/out", "/a/b/c/d/out", "/a/b"} {
			tryAll(ctx, t, p, dir)
		}
	}
	stop.Store(true)
	wg.Wait()
	checkOutside(t, outside)
}

func TestRealFSHandles(t *testing.T) {
	ctx := context.Background()
	p := newRealFS(t)
	h, err := p.Create(ctx, "/f", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if _, err := h.WriteAt(ctx, []byte("abc"), 0); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 10)
	if n, err := h.ReadAt(ctx, buf, 0); n != 3 || err != io.EOF {
		t.Fatalf("read %d %v", n, err)
	}
	if _, ok := h.(interface{ Fd() uintptr }); ok {
		t.Log("handle exposes its descriptor")
	}
}

// RealFS makes FIFOs and sockets on the host beneath its directory only,
// never through a symlink and never a device, even as root.
func TestRealFSMknod(t *testing.T) {
	ctx := context.Background()
	p, root, outside := escapeSetup(t)
	if err := os.Symlink(outside, filepath.Join(root, "out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "new"), filepath.Join(root, "dangling")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		mode fs.FileMode
		want syscall.Errno
	}{
		{"/out/p", fs.ModeNamedPipe | 0o644, syscall.ELOOP},
		{"/dangling", fs.ModeNamedPipe | 0o644, syscall.EEXIST},
		{"/null", fs.ModeDevice | fs.ModeCharDevice | 0o666, syscall.EPERM},
		{"/sda", fs.ModeDevice | 0o600, syscall.EPERM},
		{"/out/null", fs.ModeDevice | fs.ModeCharDevice | 0o666, syscall.EPERM},
	} {
		if err := p.Mknod(ctx, tc.path, tc.mode); vfs.Errno(err) != tc.want {
			t.Errorf("mknod %s %v: %v, want %v", tc.path, tc.mode, err, tc.want)
		}
	}
	for _, n := range []string{"null", "sda"} {
		if _, err := os.Lstat(filepath.Join(root, n)); !os.IsNotExist(err) {
			t.Errorf("%s exists on the host: %v", n, err)
		}
	}
	checkOutside(t, outside)

	if err := p.Mknod(ctx, "/p", fs.ModeNamedPipe|fs.ModeSetgid|0o751); err != nil {
		t.Fatal(err)
	}
	if err := p.Mknod(ctx, "/s", fs.ModeSocket|0o777); err != nil {
		t.Fatal(err)
	}
	for n, want := range map[string]fs.FileMode{"p": fs.ModeNamedPipe | fs.ModeSetgid | 0o751, "s": fs.ModeSocket | 0o777} {
		fi, err := os.Lstat(filepath.Join(root, n))
		if err != nil || fi.Mode() != want {
			t.Errorf("%s on the host: %v %v, want %v (the umask must not cut it)", n, fi.Mode(), err, want)
		}
	}
}

// Paths longer than one system call takes are resolved a part at a
// time, each beneath the last: a symlink in a later part is not
// followed either.
func TestRealFSEscapeDeepPath(t *testing.T) {
	ctx := context.Background()
	p, _, outside := escapeSetup(t)
	name := strings.Repeat("n", vfs.MaxName)
	dir := ""
	for len(dir) < 5000 {
		dir += "/" + name
		if err := p.Mkdir(ctx, dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A link out, planted past the first part.
	for link, target := range map[string]string{"/abs": outside, "/rel": strings.Repeat("../", 40) + outside[1:]} {
		if err := p.Symlink(ctx, target, dir+link); err != nil {
			t.Fatal(err)
		}
		for _, try := range []string{dir + link + "/f", dir + link + "/only-outside"} {
			if _, err := p.Stat(ctx, try); vfs.Errno(err) != syscall.ELOOP {
				t.Errorf("stat through %s: %v, want ELOOP", link, err)
			}
			if h, err := p.Open(ctx, try, os.O_RDWR, 0); err == nil {
				h.Close()
				t.Errorf("opened %s", try)
			}
			if err := p.Mknod(ctx, dir+link+"/p", fs.ModeNamedPipe|0o644); vfs.Errno(err) != syscall.ELOOP {
				t.Errorf("mknod through %s: %v, want ELOOP", link, err)
			}
		}
		if _, err := p.Readdir(ctx, dir+link); vfs.Errno(err) != syscall.ELOOP && vfs.Errno(err) != syscall.ENOTDIR {
			t.Errorf("readdir of %s: %v", link, err)
		}
	}
	checkOutside(t, outside)
}

// TestRealFSNoSetIDPrograms: whatever a sandbox asks, a real_fs
// directory never holds a set-id program because of it: new files and
// chmods lose the set-id bits, and a host's set-id file loses them once
// opened to be written or truncated, as it would for a writer without
// CAP_FSETID. Directories and FIFOs keep set-group-ID.
func TestRealFSNoSetIDPrograms(t *testing.T) {
	dir := t.TempDir()
	p, err := vfs.NewRealFS(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer p.(io.Closer).Close()
	ctx := vfs.WithCaller(context.Background(), vfs.Caller{UID: 0, GID: 0})
	hostMode := func(name string) os.FileMode {
		t.Helper()
		fi, err := os.Lstat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return fi.Mode()
	}
	const setID = fs.ModeSetuid | fs.ModeSetgid

	h, err := p.Open(ctx, "/new", os.O_RDWR|os.O_CREATE|os.O_EXCL, setID|0o755)
	if err != nil {
		t.Fatal(err)
	}
	h.Close()
	if m := hostMode("new"); m&setID != 0 || m.Perm() != 0o755 {
		t.Errorf("a file created set-id is %v on the host", m)
	}
	if err := p.Chmod(ctx, "/new", setID|0o755); err != nil {
		t.Fatal(err)
	}
	if m := hostMode("new"); m&setID != 0 || m.Perm() != 0o755 {
		t.Errorf("a file chmodded set-id is %v on the host", m)
	}
	if err := p.Mkdir(ctx, "/d", fs.ModeSetgid|0o775); err != nil {
		t.Fatal(err)
	}
	if err := p.Chmod(ctx, "/d", fs.ModeSetgid|0o775); err != nil {
		t.Fatal(err)
	}
	if m := hostMode("d"); m&fs.ModeSetgid == 0 {
		t.Errorf("a directory lost set-group-ID: %v", m)
	}
	if err := p.Mknod(ctx, "/fifo", fs.ModeNamedPipe|fs.ModeSetgid|0o640); err != nil {
		t.Fatal(err)
	}
	if m := hostMode("fifo"); m&fs.ModeSetgid == 0 {
		t.Errorf("a FIFO lost set-group-ID: %v", m)
	}

	// The host's own set-id files: read, they stay; written or
	// truncated, they do not.
	for _, name := range []string{"read", "write", "trunc"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(dir, name), setID|0o755); err != nil {
			t.Fatal(err)
		}
	}
	if h, err := p.Open(ctx, "/read", os.O_RDONLY, 0); err != nil {
		t.Fatal(err)
	} else {
		h.Close()
	}
	if m := hostMode("read"); m&setID != setID {
		t.Errorf("a set-id file opened to be read became %v", m)
	}
	if h, err := p.Open(ctx, "/write", os.O_WRONLY, 0); err != nil {
		t.Fatal(err)
	} else {
		h.Close()
	}
	if err := p.Truncate(ctx, "/trunc", 0); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"write", "trunc"} {
		if m := hostMode(name); m&setID != 0 || m.Perm() != 0o755 {
			t.Errorf("a set-id file %s through the provider is still %v", name, m)
		}
	}
}
