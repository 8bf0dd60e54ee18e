package vfsfuse_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/mounts"
	"github.com/airlock-sandbox/airlock/internal/vfsfuse"
	"github.com/airlock-sandbox/airlock/internal/vfsproto"
	"github.com/airlock-sandbox/airlock/vfs"
)

// mount serves p at a new directory through a real FUSE mount.
func mount(t *testing.T, p vfs.Provider) string {
	return mountWith(t, p, vfsfuse.Options{})
}

func mountWith(t *testing.T, p vfs.Provider, opts vfsfuse.Options) string {
	t.Helper()
	dir, _ := mountServer(t, p, opts)
	return dir
}

func mountServer(t *testing.T, p vfs.Provider, opts vfsfuse.Options) (string, *vfsfuse.Server) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("mounting FUSE needs root")
	}
	dir := t.TempDir()
	dev, err := vfsfuse.OpenDevice(nil)
	if err != nil {
		t.Skip(err)
	}
	if err := vfsfuse.Mount(dev, dir); err != nil {
		dev.Close()
		t.Fatal(err)
	}
	srv, err := vfsfuse.Serve(dev, p, opts)
	if err != nil {
		_ = vfsfuse.Unmount(dir)
		t.Fatal(err)
	}
	// This process serves the mount and opens its files.
	if err := vfsfuse.PollOnce(dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = vfsfuse.Unmount(dir)
		srv.Close()
		select {
		case <-srv.Done():
		case <-time.After(5 * time.Second):
			t.Error("the server did not stop after the unmount")
		}
	})
	return dir, srv
}

func TestFilesThroughMount(t *testing.T) {
	mem := vfs.NewMemory(vfs.MemoryOptions{})
	dir := mount(t, mem)
	p := filepath.Join(dir, "a", "b.txt")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("hello"), 0o640); err != nil {
		t.Fatal(err)
	}
	// The provider holds what was written through the mount.
	h, err := mem.Open(context.Background(), "/a/b.txt", os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	n, _ := h.ReadAt(context.Background(), buf, 0)
	h.Close()
	if string(buf[:n]) != "hello" {
		t.Fatalf("provider holds %q", buf[:n])
	}
	fi, err := os.Stat(p)
	if err != nil || fi.Mode().Perm() != 0o640 || fi.Size() != 5 {
		t.Fatalf("stat: %v %v", fi, err)
	}
	if err := os.Symlink("b.txt", filepath.Join(dir, "a", "l")); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "a", "l")); err != nil || string(got) != "hello" {
		t.Fatalf("read through symlink: %q %v", got, err)
	}
	if err := os.Link(p, filepath.Join(dir, "hard")); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "hard")); fi.Sys().(*syscall.Stat_t).Nlink != 2 {
		t.Errorf("nlink %d, want 2", fi.Sys().(*syscall.Stat_t).Nlink)
	}
	if err := os.Rename(p, filepath.Join(dir, "moved")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "a")); !errors.Is(err, syscall.ENOTEMPTY) {
		t.Errorf("rmdir of a non-empty directory: %v", err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, ",") != "a,hard,moved" {
		t.Errorf("listing %v", names)
	}
	// An unlinked file stays readable through an open descriptor.
	f, err := os.Open(filepath.Join(dir, "moved"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := os.Remove(filepath.Join(dir, "moved")); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile("/proc/self/fd/" + itoa(f.Fd())); err != nil || string(got) != "hello" {
		t.Errorf("read of an unlinked open file: %q %v", got, err)
	}
	if fi, err := f.Stat(); err != nil || fi.Size() != 5 {
		t.Errorf("fstat of an unlinked open file: %v %v", fi, err)
	}
}

// A change made on the host side shows in the mount at once, though the
// kernel caches attributes and pages.
func TestHostChangesInvalidate(t *testing.T) {
	mem := vfs.NewMemory(vfs.MemoryOptions{})
	dir := mount(t, mem)
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, []byte("one"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(p); string(got) != "one" {
		t.Fatalf("read %q", got)
	}
	h, err := mem.Create(context.Background(), "/f", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.WriteAt(context.Background(), []byte("second"), 0); err != nil {
		t.Fatal(err)
	}
	h.Close()
	deadline := time.Now().Add(2 * time.Second)
	for {
		got, _ := os.ReadFile(p)
		if string(got) == "second" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a host write the mount still reads %q", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := mem.Remove(context.Background(), "/f"); err != nil {
		t.Fatal(err)
	}
	for deadline = time.Now().Add(2 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a file the host removed is still there")
		}
	}
}

// Real programs work on a mount: a shell's redirections, append, and a
// copy of a tree with cp -a.
func TestProgramsOnMount(t *testing.T) {
	dir := mount(t, vfs.NewMemory(vfs.MemoryOptions{}))
	sh := exec.Command("sh", "-c", `set -e
echo one > f; echo two >> f
mkdir -p d/e && cp -a f d/e/g && ln -s ../f d/l
test "$(cat d/e/g)" = "one
two"
dd if=/dev/zero of=big bs=1M count=8 2>/dev/null
truncate -s 5G sparse && echo x | dd of=sparse bs=1 seek=5368709118 conv=notrunc 2>/dev/null
tail -c 2 sparse
`)
	sh.Dir = dir
	out, err := sh.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !bytes.Equal(out, []byte("x\n")) {
		t.Errorf("output %q", out)
	}
	fi, err := os.Stat(filepath.Join(dir, "big"))
	if err != nil || fi.Size() != 8<<20 {
		t.Errorf("big: %v %v", fi, err)
	}
}

func itoa(u uintptr) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + u%10)
		u /= 10
		if u == 0 {
			return string(b[i:])
		}
	}
}

// slowStat delays Stat of one path, long enough for a signal to come.
type slowStat struct {
	vfs.Provider
	path string
}

func (s slowStat) Stat(ctx context.Context, p string) (vfs.FileInfo, error) {
	if p == s.path {
		select {
		case <-time.After(500 * time.Millisecond):
		case <-ctx.Done():
			return vfs.FileInfo{}, ctx.Err()
		}
	}
	return s.Provider.Stat(ctx, p)
}

// sigstat stats its argument with a SIGUSR1 handler that does not
// restart system calls, and prints what stat returned.
const sigstat = `#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
static void on(int s) { (void)s; }
int main(int argc, char **argv) {
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on;
	sigaction(SIGUSR1, &sa, 0);
	printf("ready\n");
	fflush(stdout);
	struct stat st;
	int r = stat(argv[1], &st);
	printf("%s\n", r == 0 ? "ok" : strerror(errno));
	return 0;
}
`

// A program that gets a signal while it waits on the mount does not see
// EINTR: the kernel's interrupt does not cancel the request, which ends
// as it would have. (Go programs get preemption signals all the time, and
// close, among others, is not retried on EINTR.)
func TestSignalsDoNotFailRequests(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler for the signalled program")
	}
	bin := filepath.Join(t.TempDir(), "sigstat")
	src := bin + ".c"
	if err := os.WriteFile(src, []byte(sigstat), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
	// As in a sandbox: the mount's provider is a protocol client, whose
	// calls end with EINTR when their context does.
	a, b := net.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mem := vfs.NewMemory(vfs.MemoryOptions{})
	if h, err := mem.Create(ctx, "/slow", 0o644); err != nil {
		t.Fatal(err)
	} else {
		h.Close()
	}
	go vfsproto.NewServer(slowStat{mem, "/slow"}, vfsproto.ServerOptions{}).Serve(ctx, b)
	client := vfsproto.NewClient(a, vfsproto.ClientOptions{})
	defer client.Close()
	dir := mount(t, client)
	cmd := exec.Command(bin, filepath.Join(dir, "slow"))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line := make([]byte, 6)
	if _, err := io.ReadFull(out, line); err != nil || string(line) != "ready\n" {
		t.Fatalf("sigstat: %q %v", line, err)
	}
	time.Sleep(150 * time.Millisecond)
	cmd.Process.Signal(syscall.SIGUSR1)
	rest, _ := io.ReadAll(out)
	cmd.Wait()
	if strings.TrimSpace(string(rest)) != "ok" {
		t.Errorf("stat interrupted by a signal: %q, want ok", rest)
	}
}

// countOpens counts the provider's opens.
type countOpens struct {
	vfs.Provider
	opens atomic.Int64
}

func (c *countOpens) Open(ctx context.Context, p string, flags int, mode fs.FileMode) (vfs.Handle, error) {
	c.opens.Add(1)
	return c.Provider.Open(ctx, p, flags, mode)
}

// FIFOs and UNIX sockets are made through the mount, over the protocol,
// and work between processes: the kernel serves their opens, reads,
// writes and connects itself, never asking the provider. Devices are
// refused, whoever asks.
func TestSpecialFiles(t *testing.T) {
	a, b := net.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mem := vfs.NewMemory(vfs.MemoryOptions{})
	counted := &countOpens{Provider: mem}
	go vfsproto.NewServer(counted, vfsproto.ServerOptions{}).Serve(ctx, b)
	client := vfsproto.NewClient(a, vfsproto.ClientOptions{})
	defer client.Close()
	dir := mount(t, client)

	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o640); err != nil {
		t.Fatal(err)
	}
	if fi, err := mem.Stat(ctx, "/fifo"); err != nil || fi.Mode != fs.ModeNamedPipe|0o640 {
		t.Fatalf("the provider's FIFO: %+v %v", fi, err)
	}
	if fi, err := os.Lstat(fifo); err != nil || fi.Mode() != fs.ModeNamedPipe|0o640 {
		t.Fatalf("stat of the FIFO: %v %v", fi, err)
	}
	if err := syscall.Mkfifo(fifo, 0o640); !errors.Is(err, syscall.EEXIST) {
		t.Fatalf("mkfifo again: %v", err)
	}
	opens := counted.opens.Load()
	// Another process writes, this one reads.
	cmd := exec.Command("sh", "-c", `printf 'through the pipe' > "$1"`, "sh", fifo)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(fifo)
	if werr := cmd.Wait(); werr != nil || err != nil || string(got) != "through the pipe" {
		t.Fatalf("read from the FIFO: %q %v (writer: %v)", got, err, werr)
	}
	if n := counted.opens.Load() - opens; n != 0 {
		t.Errorf("the provider was asked to open %d times for the FIFO", n)
	}

	sock := filepath.Join(dir, "sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		c.Write([]byte("hello over the socket"))
		c.Close()
	}()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	got, err = io.ReadAll(c)
	c.Close()
	if err != nil || string(got) != "hello over the socket" {
		t.Fatalf("read from the socket: %q %v", got, err)
	}
	if fi, err := mem.Stat(ctx, "/sock"); err != nil || fi.Mode.Type() != fs.ModeSocket {
		t.Fatalf("the provider's socket: %+v %v", fi, err)
	}

	// mknod S_IFREG makes a regular file.
	if err := syscall.Mknod(filepath.Join(dir, "reg"), syscall.S_IFREG|0o600, 0); err != nil {
		t.Fatal(err)
	}
	if fi, err := mem.Stat(ctx, "/reg"); err != nil || fi.Mode != 0o600 {
		t.Fatalf("mknod S_IFREG: %+v %v", fi, err)
	}
	// This test runs as root on the host, with CAP_MKNOD: the mount
	// refuses devices all the same.
	for _, typ := range []uint32{syscall.S_IFCHR, syscall.S_IFBLK} {
		err := syscall.Mknod(filepath.Join(dir, "dev"), typ|0o666, int(unix.Mkdev(1, 3)))
		if !errors.Is(err, syscall.EPERM) {
			t.Errorf("mknod of a device (type %#o): %v, want EPERM", typ, err)
		}
	}
	if _, err := mem.Stat(ctx, "/dev"); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("a refused device exists: %v", err)
	}

	// The listing has each entry's type.
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, e := range ents {
		types = append(types, e.Name()+":"+e.Type().String())
	}
	if want := []string{"fifo:p---------", "reg:----------", "sock:S---------"}; !slices.Equal(types, want) {
		t.Errorf("listing %v, want %v", types, want)
	}
	for _, n := range []string{"fifo", "sock", "reg"} {
		if err := os.Remove(filepath.Join(dir, n)); err != nil {
			t.Error(err)
		}
	}
}

// TestDirectoryListedWhenRead: a directory held open lists what it holds
// when it is read, and again when read from the start (rewinddir), not
// what it held when it was opened (gVisor's file server keeps
// directories open).
func TestDirectoryListedWhenRead(t *testing.T) {
	dir := mount(t, vfs.NewMemory(vfs.MemoryOptions{}))
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := os.WriteFile(filepath.Join(dir, "a"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if names, err := d.Readdirnames(-1); err != nil || !slices.Equal(names, []string{"a"}) {
		t.Errorf("first read after a file was made: %v %v", names, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "b"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	names, err := d.Readdirnames(-1)
	slices.Sort(names)
	if err != nil || !slices.Equal(names, []string{"a", "b"}) {
		t.Errorf("read again from the start: %v %v", names, err)
	}
}

// TestPathsBounded: a provider is never given a path longer than
// vfs.MaxPath, however deep names are made one at a time or a tree is
// moved: ENAMETOOLONG, and the mount goes on.
func TestPathsBounded(t *testing.T) {
	dir := mount(t, vfs.NewMemory(vfs.MemoryOptions{}))
	name := strings.Repeat("n", 255)
	at := func(depth int) string {
		return filepath.Join(append([]string{dir}, slices.Repeat([]string{name}, depth)...)...)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	depth := 0
	for ; depth < 100; depth++ {
		if err := unix.Mkdirat(fd, name, 0o755); err != nil {
			if err != unix.ENAMETOOLONG {
				t.Fatalf("mkdir at depth %d: %v", depth, err)
			}
			break
		}
		next, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd = next
	}
	unix.Close(fd)
	if want := vfs.MaxPath / 256; depth != want {
		t.Errorf("names made %d deep, want %d", depth, want)
	}
	// Moved beneath a second tree, the deepest directories are out of
	// reach.
	if err := os.Mkdir(filepath.Join(dir, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "x", name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(at(1), filepath.Join(dir, "x", name, name)); err != nil {
		t.Fatal(err)
	}
	deep := filepath.Join(append([]string{"x", name}, slices.Repeat([]string{name}, depth)...)...)
	fd, err = unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	// The kernel may still know the names (it resolves them without
	// asking); what reaches the provider there fails.
	var walkErr error
	for _, n := range strings.Split(deep, "/") {
		next, err := unix.Openat(fd, n, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			walkErr = err
			break
		}
		unix.Close(fd)
		fd = next
	}
	if walkErr == nil {
		f, err := unix.Openat(fd, "f", unix.O_CREAT|unix.O_WRONLY, 0o644)
		if err == nil {
			unix.Close(f)
		}
		walkErr = err
	}
	if walkErr != unix.ENAMETOOLONG {
		t.Errorf("a file in the moved tree's deepest directory: %v, want ENAMETOOLONG", walkErr)
	}
	if err := os.WriteFile(filepath.Join(dir, "still"), []byte("ok"), 0o644); err != nil {
		t.Errorf("the mount after: %v", err)
	}
}

// TestIDShift: with Options.IDs, the kernel sees the provider's ids
// moved into the shift's block, and the provider the kernel's moved
// back; ids outside either side are the overflow id.
func TestIDShift(t *testing.T) {
	mem := vfs.NewMemory(vfs.MemoryOptions{})
	ctx := context.Background()
	for _, f := range []string{"/in", "/out"} {
		h, err := mem.Create(ctx, f, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		h.Close()
	}
	if err := mem.Chown(ctx, "/in", 7, 8); err != nil {
		t.Fatal(err)
	}
	if err := mem.Chown(ctx, "/out", 70000, 70000); err != nil {
		t.Fatal(err)
	}
	dir := mountWith(t, mem, vfsfuse.Options{IDs: vfsfuse.IDShift{Base: 100000, Size: 65536}})
	for f, want := range map[string][2]uint32{"in": {100007, 100008}, "out": {65534, 65534}} {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(dir, f), &st); err != nil {
			t.Fatal(err)
		}
		if st.Uid != want[0] || st.Gid != want[1] {
			t.Errorf("%s: owner %d:%d through the mount, want %d:%d", f, st.Uid, st.Gid, want[0], want[1])
		}
	}
	if err := os.Lchown(filepath.Join(dir, "in"), 100009, 100010); err != nil {
		t.Fatal(err)
	}
	if fi, err := mem.Stat(ctx, "/in"); err != nil || fi.UID != 9 || fi.GID != 10 {
		t.Errorf("chown through the mount: the provider has %d:%d (%v), want 9:10", fi.UID, fi.GID, err)
	}
	// Root of the host is no id of the block.
	if err := os.WriteFile(filepath.Join(dir, "new"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if fi, err := mem.Stat(ctx, "/new"); err != nil || fi.UID != 65534 {
		t.Errorf("a file host root made: the provider has uid %d (%v), want 65534", fi.UID, err)
	}
}

// TestMountDetached: a mount made detached is served before it is
// attached anywhere, and works once attached.
func TestMountDetached(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("mounting FUSE needs root")
	}
	mem := vfs.NewMemory(vfs.MemoryOptions{})
	dev, err := vfsfuse.OpenDevice(nil)
	if err != nil {
		t.Skip(err)
	}
	mnt, err := vfsfuse.MountDetached(dev)
	if err != nil {
		dev.Close()
		t.Fatal(err)
	}
	defer mnt.Close()
	srv, err := vfsfuse.Serve(dev, mem, vfsfuse.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	dir := t.TempDir()
	if err := unix.MoveMount(int(mnt.Fd()), "", unix.AT_FDCWD, dir, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		t.Fatal(err)
	}
	defer vfsfuse.Unmount(dir)
	if err := vfsfuse.PollOnce(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("attached"), 0o644); err != nil {
		t.Fatal(err)
	}
	if fi, err := mem.Stat(context.Background(), "/f"); err != nil || fi.Size != 8 {
		t.Errorf("the provider's file: %+v %v", fi, err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil || st.Type != unix.FUSE_SUPER_MAGIC {
		t.Errorf("statfs of the attached mount: type %#x, %v", st.Type, err)
	}
}

// countReads counts the reads that reach its provider's files; with
// host, its handles pass on the host file behind them (vfs.HostFiler).
type countReads struct {
	vfs.Provider
	host  bool
	reads *atomic.Int64
}

func (c countReads) Open(ctx context.Context, p string, flags int, mode fs.FileMode) (vfs.Handle, error) {
	h, err := c.Provider.Open(ctx, p, flags, mode)
	if err != nil {
		return nil, err
	}
	if c.host {
		return hostCounted{counted{h, c.reads}}, nil
	}
	return counted{h, c.reads}, nil
}

type counted struct {
	vfs.Handle
	reads *atomic.Int64
}

func (c counted) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	c.reads.Add(1)
	return c.Handle.ReadAt(ctx, p, off)
}

type hostCounted struct{ counted }

func (h hostCounted) HostFile() *os.File { return vfs.HostFileOf(h.Handle) }

// A file of a read-only provider, whose handle has a host file behind it
// (a real_fs mount made read-only), is read by the kernel straight from
// that file (FUSE passthrough, Linux 6.9 and later, as root): no read
// reaches the provider, and what is read is the file's current
// contents. A writable real_fs file, or one whose handle has no host
// file, is read through the provider: the kernel would write a
// passthrough file's host file directly, past the provider.
func TestPassthrough(t *testing.T) {
	var u unix.Utsname
	_ = unix.Uname(&u)
	var major, minor int
	if _, err := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &major, &minor); err != nil || major < 6 || major == 6 && minor < 9 {
		t.Skipf("FUSE passthrough needs Linux 6.9 (this is %s)", unix.ByteSliceToString(u.Release[:]))
	}
	host := t.TempDir()
	want := bytes.Repeat([]byte("passthrough "), 100_000)
	if err := os.WriteFile(filepath.Join(host, "f"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	real, err := vfs.NewRealFS(host)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name       string
		p          vfs.Provider
		host, pass bool
	}{
		{"read-only real_fs", vfs.NewReadonly(real), true, true},
		{"read-only, no host file", vfs.NewReadonly(real), false, false},
		{"writable real_fs", real, true, false},
	} {
		var reads atomic.Int64
		dir := mountWith(t, countReads{Provider: c.p, host: c.host, reads: &reads}, vfsfuse.Options{Passthrough: true})
		got, err := os.ReadFile(filepath.Join(dir, "f"))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: read %d bytes (%v), want %d", c.name, len(got), err, len(want))
		}
		switch n := reads.Load(); {
		case c.pass && n != 0:
			t.Errorf("%s: %d reads reached the provider, want none", c.name, n)
		case !c.pass && n == 0:
			t.Errorf("%s: no read reached the provider", c.name)
		}
		if !c.pass {
			continue
		}
		// A change of the host file is what the next read gets.
		f, err := os.Open(filepath.Join(dir, "f"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(host, "f"), []byte("changed"), 0o644); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64)
		n, _ := f.ReadAt(buf, 0)
		if string(buf[:n]) != "changed" {
			t.Errorf("read after the host file changed: %q", buf[:n])
		}
		// Nothing opens it for writing meanwhile.
		if _, err := os.OpenFile(filepath.Join(dir, "f"), os.O_RDWR, 0); !errors.Is(err, syscall.EROFS) {
			t.Errorf("open for writing while a passthrough file is open: %v, want EROFS", err)
		}
		f.Close()
		if err := os.WriteFile(filepath.Join(host, "f"), want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// reportingMemory is a memory provider that says its files beneath
// /kept change only as the mount sees or is told, and counts Stat calls.
type reportingMemory struct {
	*vfs.Memory
	mu    sync.Mutex
	stats map[string]int
}

func (r *reportingMemory) Reporting() mounts.Flags {
	return mounts.Flags{"/kept": true}
}

func (r *reportingMemory) Stat(ctx context.Context, p string) (vfs.FileInfo, error) {
	r.mu.Lock()
	r.stats[p]++
	r.mu.Unlock()
	return r.Memory.Stat(ctx, p)
}

func (r *reportingMemory) statsOf(p string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats[p]
}

// TestReportedPathsKept: the kernel keeps the names and attributes of a
// path whose changes all reach the server well past the usual second,
// and still sees at once what the host changes there.
// Served here, and through the protocol as in a VM, where the guest
// learns of the kept paths from the host's greeting.
func TestReportedPathsKept(t *testing.T) {
	for _, remote := range []bool{false, true} {
		t.Run(map[bool]string{false: "local", true: "vfsproto"}[remote], func(t *testing.T) { testReportedPathsKept(t, remote) })
	}
}

func testReportedPathsKept(t *testing.T, remote bool) {
	ctx := context.Background()
	mem := &reportingMemory{Memory: vfs.NewMemory(vfs.MemoryOptions{}), stats: map[string]int{}}
	for _, d := range []string{"/kept", "/plain"} {
		if err := mem.Mkdir(ctx, d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := writeHost(mem, d+"/f", "one"); err != nil {
			t.Fatal(err)
		}
	}
	var served vfs.Provider = mem
	if remote {
		a, b := net.Pipe()
		sctx, cancel := context.WithCancel(ctx)
		t.Cleanup(cancel)
		go vfsproto.NewServer(mem, vfsproto.ServerOptions{}).Serve(sctx, b)
		client := vfsproto.NewClient(a, vfsproto.ClientOptions{})
		t.Cleanup(func() { client.Close() })
		served = client
	}
	dir, srv := mountServer(t, served, vfsfuse.Options{})
	if c, ok := served.(*vfsproto.Client); ok {
		c.OnInvalidate(srv.Invalidate)
	}
	for _, p := range []string{"kept/f", "plain/f"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Fatal(err)
		}
	}
	kept, plain := mem.statsOf("/kept/f"), mem.statsOf("/plain/f")
	time.Sleep(1500 * time.Millisecond) // past the usual timeouts of 1 s
	for _, p := range []string{"kept/f", "plain/f"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Fatal(err)
		}
	}
	if n := mem.statsOf("/kept/f"); n != kept {
		t.Errorf("a kept path was asked for again after 1.5 s: %d stats, %d before", n, kept)
	}
	if n := mem.statsOf("/plain/f"); n == plain {
		t.Errorf("a path that is not kept was not asked for again after 1.5 s (%d stats)", n)
	}

	// What the host changes beneath /kept shows at once all the same:
	// a new content and size, a new file, a removal.
	p := filepath.Join(dir, "kept/f")
	if got, _ := os.ReadFile(p); string(got) != "one" {
		t.Fatalf("read %q", got)
	}
	if err := writeHost(mem, "/kept/f", "second"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the host's write", func() bool {
		got, _ := os.ReadFile(p)
		fi, err := os.Stat(p)
		return string(got) == "second" && err == nil && fi.Size() == 6
	})
	if err := writeHost(mem, "/kept/g", "new"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the host's new file", func() bool {
		got, _ := os.ReadFile(filepath.Join(dir, "kept/g"))
		return string(got) == "new"
	})
	if err := mem.Remove(ctx, "/kept/f"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the host's removal", func() bool {
		_, err := os.Stat(p)
		return errors.Is(err, os.ErrNotExist)
	})
}

// writeHost writes p as host code would.
func writeHost(p vfs.Provider, name, data string) error {
	h, err := p.Open(context.Background(), name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := h.WriteAt(context.Background(), []byte(data), 0); err != nil {
		h.Close()
		return err
	}
	return h.Close()
}

// waitFor waits a little for what an invalidation brings: far less than
// the kernel would keep a kept path without one.
func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s is not seen through the mount after 10 s", what)
		}
	}
}
