package vfsproto

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/mounts"
	"github.com/airlock-sandbox/airlock/vfs"
	"github.com/airlock-sandbox/airlock/vfs/vfstest"
)

// pair connects a client to a server of p over an in-memory connection.
func pair(t testing.TB, p vfs.Provider, sopts ServerOptions, copts ClientOptions) (*Client, <-chan error) {
	t.Helper()
	a, b := net.Pipe()
	errc := make(chan error, 1)
	srv := NewServer(p, sopts)
	go func() { errc <- srv.Serve(context.Background(), a) }()
	c := NewClient(b, copts)
	t.Cleanup(func() {
		c.Close()
		select {
		case <-errc:
		case <-time.After(10 * time.Second):
			t.Error("server did not stop after the client closed")
		}
	})
	return c, errc
}

func ctxAs(uid, gid uint32) context.Context {
	return vfs.WithCaller(context.Background(), vfs.Caller{UID: uid, GID: gid, PID: 42})
}

func wantErrno(t *testing.T, err error, want syscall.Errno) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("got %v, want %v", err, want)
	}
}

func TestOps(t *testing.T) {
	c, _ := pair(t, vfs.NewMemory(vfs.MemoryOptions{}), ServerOptions{}, ClientOptions{})
	ctx := ctxAs(1000, 1001)

	if c.Readonly() {
		t.Fatal("readonly")
	}
	if err := c.Mkdir(ctx, "/d", 0o750|fs.ModeSticky); err != nil {
		t.Fatal(err)
	}
	fi, err := c.Stat(ctx, "/d")
	if err != nil {
		t.Fatal(err)
	}
	if !fi.IsDir() || fi.Mode.Perm() != 0o750 || fi.Mode&fs.ModeSticky == 0 || fi.Name != "d" || fi.UID != 1000 || fi.GID != 1001 {
		t.Fatalf("stat /d: %+v", fi)
	}
	wantErrno(t, c.Mkdir(ctx, "/d", 0o755), syscall.EEXIST)
	_, err = c.Stat(ctx, "/nope")
	wantErrno(t, err, syscall.ENOENT)

	h, err := c.Create(ctx, "/d/f", 0o640)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := h.WriteAt(ctx, []byte("hello, world"), 0); n != 12 || err != nil {
		t.Fatalf("write: %d %v", n, err)
	}
	buf := make([]byte, 5)
	if n, err := h.ReadAt(ctx, buf, 7); n != 5 || err != nil || string(buf) != "world" {
		t.Fatalf("read: %d %v %q", n, err, buf)
	}
	buf = make([]byte, 10)
	if n, err := h.ReadAt(ctx, buf, 7); n != 5 || err != io.EOF {
		t.Fatalf("read at end: %d %v", n, err)
	}
	if n, err := h.ReadAt(ctx, buf, 100); n != 0 || err != io.EOF {
		t.Fatalf("read past end: %d %v", n, err)
	}
	if fi, err := h.Stat(ctx); err != nil || fi.Size != 12 || fi.Name != "f" || !fi.Mode.IsRegular() {
		t.Fatalf("fstat: %+v %v", fi, err)
	}
	if err := h.Truncate(ctx, 5); err != nil {
		t.Fatal(err)
	}
	if err := h.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, h.Close(), syscall.EBADF)
	if _, err := h.ReadAt(ctx, buf, 0); !errors.Is(err, syscall.EBADF) {
		t.Fatalf("read after close: %v", err)
	}

	h, err = c.Open(ctx, "/d/f", os.O_RDWR|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.WriteAt(ctx, []byte("!"), 0); err != nil {
		t.Fatal(err)
	}
	h.Close()
	_, err = c.Open(ctx, "/d/f", os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	wantErrno(t, err, syscall.EEXIST)
	_, err = c.Open(ctx, "/d/g", os.O_RDONLY, 0)
	wantErrno(t, err, syscall.ENOENT)

	if err := c.Truncate(ctx, "/d/f", 3); err != nil {
		t.Fatal(err)
	}
	if err := c.Chown(ctx, "/d/f", -1, 7); err != nil {
		t.Fatal(err)
	}
	if err := c.Chmod(ctx, "/d/f", 0o711|fs.ModeSetuid); err != nil {
		t.Fatal(err)
	}
	at, mt := time.Unix(100, 5), time.Unix(200, 999999999)
	if err := c.Utimens(ctx, "/d/f", &at, &mt); err != nil {
		t.Fatal(err)
	}
	if err := c.Utimens(ctx, "/d/f", nil, nil); err != nil {
		t.Fatal(err)
	}
	fi, err = c.Stat(ctx, "/d/f")
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size != 3 || fi.Mode != 0o711|fs.ModeSetuid || fi.UID != 1000 || fi.GID != 7 || !fi.ModTime.Equal(mt) || !fi.ATime.Equal(at) {
		t.Fatalf("stat /d/f: %+v", fi)
	}

	if err := c.Symlink(ctx, "../x/y", "/d/l"); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Readlink(ctx, "/d/l"); got != "../x/y" || err != nil {
		t.Fatalf("readlink: %q %v", got, err)
	}
	if fi, err := c.Stat(ctx, "/d/l"); err != nil || fi.Mode&fs.ModeSymlink == 0 {
		t.Fatalf("stat link: %+v %v", fi, err)
	}
	if err := c.Link(ctx, "/d/f", "/d/f2"); err != nil {
		t.Fatal(err)
	}
	if err := c.Rename(ctx, "/d/f2", "/f3"); err != nil {
		t.Fatal(err)
	}
	if fi, err := c.Stat(ctx, "/f3"); err != nil || fi.Nlink != 2 {
		t.Fatalf("stat /f3: %+v %v", fi, err)
	}
	wantErrno(t, c.Remove(ctx, "/d"), syscall.ENOTEMPTY)
	ents, err := c.Readdir(ctx, "/d")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name)
	}
	if strings.Join(names, ",") != "f,l" {
		t.Fatalf("readdir: %v", names)
	}
	for _, p := range []string{"/d/f", "/d/l", "/d", "/f3"} {
		if err := c.Remove(ctx, p); err != nil {
			t.Fatalf("remove %s: %v", p, err)
		}
	}
	st, err := c.Statfs(ctx, "/")
	if err != nil || st.TotalBytes == 0 || st.FreeFiles == 0 || st.FreeFiles >= st.TotalFiles || st.NameMax != 255 {
		t.Fatalf("statfs: %+v %v", st, err)
	}
}

func TestBadArguments(t *testing.T) {
	c, _ := pair(t, vfs.NewMemory(vfs.MemoryOptions{}), ServerOptions{}, ClientOptions{})
	ctx := context.Background()
	long := "/" + strings.Repeat("a", 256)
	for _, tc := range []struct {
		path string
		want syscall.Errno
	}{
		{"", syscall.EINVAL}, {"a", syscall.EINVAL}, {"/a/", syscall.EINVAL},
		{"/a//b", syscall.EINVAL}, {"/a/../b", syscall.EINVAL}, {"/./a", syscall.EINVAL},
		{"/a\x00b", syscall.EINVAL}, {long, syscall.ENAMETOOLONG},
		{strings.Repeat("/a", MaxPath/2+1), syscall.ENAMETOOLONG},
	} {
		_, err := c.Stat(ctx, tc.path)
		if !errors.Is(err, tc.want) {
			t.Errorf("stat %q: %v, want %v", tc.path, err, tc.want)
		}
	}
	if _, err := c.Stat(ctx, "/"+strings.Repeat("a", 255)); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("a 255-byte name: %v", err)
	}
	wantErrno(t, c.Symlink(ctx, strings.Repeat("x", MaxTarget+1), "/l"), syscall.ENAMETOOLONG)
	wantErrno(t, c.Symlink(ctx, "", "/l"), syscall.EINVAL)
	wantErrno(t, c.Chown(ctx, "/", -2, 0), syscall.EINVAL)
	wantErrno(t, c.Truncate(ctx, "/", -1), syscall.EINVAL)
}

func TestReadonlyGreeting(t *testing.T) {
	tfs := newTestFS()
	tfs.ro = true
	c, _ := pair(t, tfs, ServerOptions{}, ClientOptions{})
	if !c.Readonly() {
		t.Fatal("not readonly")
	}
	wantErrno(t, c.Mkdir(context.Background(), "/x", 0o755), syscall.EROFS)
}

func TestLargeData(t *testing.T) {
	c, _ := pair(t, vfs.NewMemory(vfs.MemoryOptions{}), ServerOptions{}, ClientOptions{})
	ctx := context.Background()
	h, err := c.Create(ctx, "/big", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	data := make([]byte, 3*MaxData+12345)
	for i := range data {
		data[i] = byte(i * 7)
	}
	if n, err := h.WriteAt(ctx, data, 10); n != len(data) || err != nil {
		t.Fatalf("write: %d %v", n, err)
	}
	got := make([]byte, len(data)+100)
	n, err := h.ReadAt(ctx, got, 10)
	if n != len(data) || err != io.EOF || !bytes.Equal(got[:n], data) {
		t.Fatalf("read: %d %v, same %v", n, err, bytes.Equal(got[:n], data))
	}
}

func TestReaddirPages(t *testing.T) {
	m := vfs.NewMemory(vfs.MemoryOptions{})
	ctx := context.Background()
	const n = 3000
	for i := range n {
		// Long names, so that pages are bounded by bytes.
		h, err := m.Create(ctx, fmt.Sprintf("/%05d%s", i, strings.Repeat("n", 200)), 0o644)
		if err != nil {
			t.Fatal(err)
		}
		h.Close()
	}
	c, _ := pair(t, m, ServerOptions{}, ClientOptions{})

	page, err := c.ReaddirPage(ctx, "/", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Entries) != 10 || page.EOF || page.Next != 10 || !strings.HasPrefix(page.Entries[9].Name, "00009") {
		t.Fatalf("first page: %d entries, next %d, eof %v", len(page.Entries), page.Next, page.EOF)
	}
	var cursor uint64
	seen := 0
	pages := 0
	for {
		page, err := c.ReaddirPage(ctx, "/", cursor, 0)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if len(page.Entries)*entrySize(page.Entries[0].Name) > MaxPageBytes {
			t.Fatalf("page of %d entries", len(page.Entries))
		}
		for _, e := range page.Entries {
			if want := fmt.Sprintf("%05d", seen); !strings.HasPrefix(e.Name, want) {
				t.Fatalf("entry %d is %s", seen, e.Name[:5])
			}
			seen++
		}
		if page.EOF {
			break
		}
		cursor = page.Next
	}
	if seen != n || pages < n*entrySize(strings.Repeat("n", 205))/MaxPageBytes {
		t.Fatalf("%d entries in %d pages", seen, pages)
	}
	all, err := c.Readdir(ctx, "/")
	if err != nil || len(all) != n {
		t.Fatalf("readdir: %d entries, %v", len(all), err)
	}
	// A cursor past the end is an empty last page.
	page, err = c.ReaddirPage(ctx, "/", 1<<62, 0)
	if err != nil || !page.EOF || len(page.Entries) != 0 {
		t.Fatalf("page past the end: %+v %v", page, err)
	}
	_, err = c.Readdir(ctx, "/00001"+strings.Repeat("n", 200))
	wantErrno(t, err, syscall.ENOTDIR)
}

func TestConcurrent(t *testing.T) {
	c, _ := pair(t, vfs.NewMemory(vfs.MemoryOptions{}), ServerOptions{}, ClientOptions{})
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 32 {
		wg.Go(func() {
			ctx := ctxAs(uint32(g), uint32(g))
			p := fmt.Sprintf("/f%d", g)
			h, err := c.Create(ctx, p, 0o600)
			if err != nil {
				errs <- err
				return
			}
			defer h.Close()
			want := bytes.Repeat([]byte{byte(g)}, 4096)
			for i := range 20 {
				if _, err := h.WriteAt(ctx, want, int64(i*4096)); err != nil {
					errs <- err
					return
				}
			}
			got := make([]byte, 4096)
			for i := range 20 {
				if _, err := h.ReadAt(ctx, got, int64(i*4096)); err != nil && err != io.EOF {
					errs <- err
					return
				}
				if !bytes.Equal(got, want) {
					errs <- fmt.Errorf("%s: block %d differs", p, i)
					return
				}
			}
			fi, err := c.Stat(ctx, p)
			if err != nil || fi.UID != uint32(g) || fi.Size != 20*4096 {
				errs <- fmt.Errorf("stat %s: %+v %v", p, fi, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// gateFS blocks a stat of "/wait" until a stat of "/go" arrives: it can
// only finish if two requests are in flight at once.
type gateFS struct {
	*testFS
	gate chan struct{}
}

func (g *gateFS) Stat(ctx context.Context, p string) (vfs.FileInfo, error) {
	switch p {
	case "/wait":
		select {
		case <-g.gate:
			return vfs.FileInfo{Name: "wait", Mode: 0o644}, nil
		case <-ctx.Done():
			return vfs.FileInfo{}, ctx.Err()
		}
	case "/go":
		close(g.gate)
		return vfs.FileInfo{Name: "go", Mode: 0o644}, nil
	}
	return g.testFS.Stat(ctx, p)
}

func TestPipelining(t *testing.T) {
	for _, serial := range []bool{false, true} {
		t.Run(fmt.Sprintf("serial=%v", serial), func(t *testing.T) {
			g := &gateFS{testFS: newTestFS(), gate: make(chan struct{})}
			c, _ := pair(t, g, ServerOptions{}, ClientOptions{Serial: serial})
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			waited := make(chan error, 1)
			go func() {
				_, err := c.Stat(ctx, "/wait")
				waited <- err
			}()
			// Let the first request go out before the second.
			time.Sleep(50 * time.Millisecond)
			_, err := c.Stat(ctx, "/go")
			werr := <-waited
			if serial {
				if !errors.Is(werr, syscall.EINTR) && !errors.Is(werr, syscall.ETIMEDOUT) {
					t.Fatalf("serial: the first request ended with %v", werr)
				}
				return
			}
			if err != nil || werr != nil {
				t.Fatalf("pipelined: %v, %v", err, werr)
			}
		})
	}
}

// blockFS blocks every stat until release is closed, ignoring its
// context, and counts the stats executing at once.
type blockFS struct {
	*testFS
	release chan struct{}
	now     atomic.Int64
	most    atomic.Int64
	ctxDone atomic.Int64
}

func (b *blockFS) Stat(ctx context.Context, p string) (vfs.FileInfo, error) {
	n := b.now.Add(1)
	defer b.now.Add(-1)
	for {
		m := b.most.Load()
		if n <= m || b.most.CompareAndSwap(m, n) {
			break
		}
	}
	if p == "/honest" {
		<-ctx.Done()
		b.ctxDone.Add(1)
		return vfs.FileInfo{}, ctx.Err()
	}
	<-b.release
	return vfs.FileInfo{Name: "x"}, nil
}

func TestCancel(t *testing.T) {
	b := &blockFS{testFS: newTestFS(), release: make(chan struct{})}
	c, _ := pair(t, b, ServerOptions{}, ClientOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.Stat(ctx, "/honest")
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	cancel()
	wantErrno(t, <-done, syscall.EINTR)
	if d := time.Since(start); d > time.Second {
		t.Fatalf("cancel took %v", d)
	}
	// The interrupt reaches the provider's context.
	for deadline := time.Now().Add(5 * time.Second); b.ctxDone.Load() == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the provider's context was not cancelled")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The connection still works.
	close(b.release)
	if _, err := c.Stat(context.Background(), "/"); err != nil {
		t.Fatal(err)
	}
}

func TestTimeout(t *testing.T) {
	b := &blockFS{testFS: newTestFS(), release: make(chan struct{})}
	c, _ := pair(t, b, ServerOptions{Timeout: 100 * time.Millisecond}, ClientOptions{})
	start := time.Now()
	_, err := c.Stat(context.Background(), "/stuck")
	wantErrno(t, err, syscall.ETIMEDOUT)
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("timeout took %v", d)
	}
	_, err = c.Stat(context.Background(), "/honest")
	wantErrno(t, err, syscall.ETIMEDOUT)
	close(b.release)
}

// A handle that an open makes after its request timed out is closed.
type slowOpenFS struct {
	*testFS
	release chan struct{}
}

func (s *slowOpenFS) Open(ctx context.Context, p string, flags int, mode fs.FileMode) (vfs.Handle, error) {
	<-s.release
	return s.testFS.Open(context.Background(), p, flags, mode)
}

func TestTimedOutOpenIsClosed(t *testing.T) {
	s := &slowOpenFS{testFS: newTestFS(), release: make(chan struct{})}
	s.nodes["/f"] = &testNode{mode: 0o644}
	c, _ := pair(t, s, ServerOptions{Timeout: 50 * time.Millisecond}, ClientOptions{})
	_, err := c.Open(context.Background(), "/f", os.O_RDONLY, 0)
	wantErrno(t, err, syscall.ETIMEDOUT)
	close(s.release)
	waitFor(t, func() bool { return s.open.Load() == 0 })
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestConnectionLoss(t *testing.T) {
	b := &blockFS{testFS: newTestFS(), release: make(chan struct{})}
	defer close(b.release)
	a, bconn := net.Pipe()
	srv := NewServer(b, ServerOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, a) }()
	c := NewClient(bconn, ClientOptions{})
	defer c.Close()

	errs := make(chan error, 10)
	for range 10 {
		go func() {
			_, err := c.Stat(context.Background(), "/stuck")
			errs <- err
		}()
	}
	waitFor(t, func() bool { return b.now.Load() == 10 })
	cancel()
	for range 10 {
		select {
		case err := <-errs:
			wantErrno(t, err, syscall.ENOTCONN)
		case <-time.After(5 * time.Second):
			t.Fatal("a call outlived its connection")
		}
	}
	_, err := c.Stat(context.Background(), "/")
	wantErrno(t, err, syscall.ENOTCONN)
	select {
	case <-c.Done():
	default:
		t.Fatal("Done not closed")
	}
}

func TestHandlesClosedOnDisconnect(t *testing.T) {
	tfs := newTestFS()
	a, b := net.Pipe()
	served := make(chan error, 1)
	go func() { served <- NewServer(tfs, ServerOptions{}).Serve(context.Background(), a) }()
	c := NewClient(b, ClientOptions{})
	for i := range 20 {
		if _, err := c.Create(context.Background(), fmt.Sprintf("/f%d", i), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if n := tfs.open.Load(); n != 20 {
		t.Fatalf("%d open", n)
	}
	c.Close()
	if err := <-served; err != nil {
		t.Fatalf("serve: %v", err)
	}
	if n := tfs.open.Load(); n != 0 {
		t.Fatalf("%d handles left open after the disconnect", n)
	}
}

func TestHandleLimit(t *testing.T) {
	tfs := newTestFS()
	tfs.nodes["/f"] = &testNode{mode: 0o644}
	c, _ := pair(t, tfs, ServerOptions{}, ClientOptions{})
	ctx := context.Background()
	var hs []vfs.Handle
	for range MaxHandles {
		h, err := c.Open(ctx, "/f", os.O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	_, err := c.Open(ctx, "/f", os.O_RDONLY, 0)
	wantErrno(t, err, syscall.EMFILE)
	if n := tfs.open.Load(); n != MaxHandles {
		t.Fatalf("%d open", n)
	}
	hs[0].Close()
	h, err := c.Open(ctx, "/f", os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Ids are never reused.
	if h.(*Handle).ID() != MaxHandles+1 {
		t.Fatalf("id %d", h.(*Handle).ID())
	}
}

// watchFS reports changes through vfs.Watcher.
type watchFS struct {
	*testFS
	mu sync.Mutex
	fn func(string)
}

func (w *watchFS) Watch(fn func(string)) func() {
	w.mu.Lock()
	w.fn = fn
	w.mu.Unlock()
	return func() {
		w.mu.Lock()
		w.fn = nil
		w.mu.Unlock()
	}
}

func (w *watchFS) changed(p string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fn != nil {
		w.fn(p)
	}
}

func TestInvalidate(t *testing.T) {
	w := &watchFS{testFS: newTestFS()}
	c, _ := pair(t, w, ServerOptions{}, ClientOptions{})
	got := make(chan string, 10000)
	c.OnInvalidate(func(p string) { got <- p })
	c.Readonly() // the greeting has come, so Watch has been called
	waitFor(t, func() bool { w.mu.Lock(); defer w.mu.Unlock(); return w.fn != nil })
	w.changed("/a/b")
	if p := <-got; p != "/a/b" {
		t.Fatalf("invalidated %q", p)
	}
	w.changed("bad//path")
	if p := <-got; p != "/" {
		t.Fatalf("invalidated %q", p)
	}
	// A flood never blocks the provider; what is dropped becomes "/".
	for i := range 5000 {
		w.changed(fmt.Sprintf("/f%d", i))
	}
	seen := map[string]bool{}
	for {
		select {
		case p := <-got:
			seen[p] = true
			continue
		case <-time.After(300 * time.Millisecond):
		}
		break
	}
	if !seen["/f4999"] && !seen["/"] {
		t.Fatalf("the flood's last change never came (%d paths)", len(seen))
	}
}

func TestReaddirCacheSeesChanges(t *testing.T) {
	m := vfs.NewMemory(vfs.MemoryOptions{})
	ctx := context.Background()
	for i := range 30 {
		if err := m.Mkdir(ctx, fmt.Sprintf("/%02d", i), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	c, _ := pair(t, m, ServerOptions{}, ClientOptions{})
	page, err := c.ReaddirPage(ctx, "/", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Remove(ctx, "/05"); err != nil {
		t.Fatal(err)
	}
	// The listing is read again: "/10" moved to index 9.
	page, err = c.ReaddirPage(ctx, "/", page.Next, 10)
	if err != nil {
		t.Fatal(err)
	}
	if page.Entries[0].Name != "11" {
		t.Fatalf("second page starts at %s", page.Entries[0].Name)
	}
}

// The protocol passes the providers' conformance suite: a client over
// a server of Memory behaves as Memory does.
func TestConformance(t *testing.T) {
	vfstest.Run(t, func(t *testing.T) vfs.Provider {
		c, _ := pair(t, vfs.NewMemory(vfs.MemoryOptions{}), ServerOptions{}, ClientOptions{})
		return c
	})
}

func TestConformanceSerial(t *testing.T) {
	vfstest.Run(t, func(t *testing.T) vfs.Provider {
		c, _ := pair(t, vfs.NewMemory(vfs.MemoryOptions{}), ServerOptions{}, ClientOptions{Serial: true})
		return c
	})
}

// Changes made on the host reach the client as invalidations; the
// sandbox's own do not come back to it.
func TestMemoryInvalidation(t *testing.T) {
	m := vfs.NewMemory(vfs.MemoryOptions{})
	c, _ := pair(t, m, ServerOptions{}, ClientOptions{})
	got := make(chan string, 100)
	c.OnInvalidate(func(p string) { got <- p })
	ctx := context.Background()
	c.Readonly() // the server is past Watch once it has greeted
	if err := c.Mkdir(ctx, "/mine", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := m.Mkdir(ctx, "/host", 0o755); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-got:
		if p != "/host" && p != "/" {
			t.Fatalf("invalidated %q", p)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no invalidation of a host-side change")
	}
	// The listing the client sees has the host's change.
	names, err := c.Readdir(ctx, "/")
	if err != nil || len(names) != 2 {
		t.Fatalf("readdir: %v %v", names, err)
	}
}

// reportingFS says beneath which paths its changes all reach watchers.
type reportingFS struct {
	*testFS
	r mounts.Flags
}

func (r reportingFS) Reporting() mounts.Flags { return r.r }

// TestGreetingReporting: the client learns from the greeting beneath
// which paths the server reports every change; a provider that does not
// say, or says of too many roots, announces none.
func TestGreetingReporting(t *testing.T) {
	want := mounts.Flags{"/": true, "/host": false}
	c, _ := pair(t, reportingFS{newTestFS(), want}, ServerOptions{}, ClientOptions{})
	if got := c.Reporting(); !maps.Equal(got, want) {
		t.Errorf("Reporting() = %v, want %v", got, want)
	}
	c, _ = pair(t, newTestFS(), ServerOptions{}, ClientOptions{})
	if got := c.Reporting(); got.At("/") || len(got) != 0 {
		t.Errorf("a provider that says nothing: Reporting() = %v", got)
	}
	many := mounts.Flags{}
	for i := range MaxReporting + 1 {
		many[fmt.Sprintf("/m%d", i)] = true
	}
	c, _ = pair(t, reportingFS{newTestFS(), many}, ServerOptions{}, ClientOptions{})
	if got := c.Reporting(); len(got) != 0 {
		t.Errorf("%d roots: Reporting() = %v, want none", len(many), got)
	}
	if len(checkReporting(map[string]bool{"/a": true, "relative": true})) != 0 {
		t.Error("a greeting with a path that is not one was taken")
	}
}
