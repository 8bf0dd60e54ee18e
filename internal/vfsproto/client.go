package vfsproto

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/mounts"
	"github.com/airlock-sandbox/airlock/vfs"
)

// ClientOptions tunes a Client; the zero value is fine.
type ClientOptions struct {
	// Serial allows one request in flight at a time, as a protocol
	// without ids would: for comparison only.
	Serial bool
	// Logger gets what goes wrong; nil means slog.Default().
	Logger *slog.Logger
}

// Client is a vfs.Provider whose operations a Server executes at the
// other end of one connection. Any number of goroutines may use it at
// once; their requests share the connection and are in flight together.
//
// Each call's caller is vfs.CallerFrom(ctx) (root without one). A call
// whose ctx ends returns EINTR at once; the server is told to interrupt
// the request, and may still complete it (a write, say, may still land).
// Once the connection is gone every call fails with ENOTCONN.
type Client struct {
	conn  io.ReadWriteCloser
	log   *slog.Logger
	codec codec
	pool  bufPool
	w     *frameWriter
	slots chan struct{}

	mu      sync.Mutex
	pending map[uint64]*call
	lastID  uint64
	dead    bool

	gone      chan struct{} // closed once the connection is gone
	hello     chan struct{} // closed once the greeting came
	readonly  bool
	version   uint32
	reporting mounts.Flags

	onInvalidate atomic.Pointer[func(string)]
	inval        chan string
	invalAll     atomic.Bool
	readerDone   chan struct{}
	closeOnce    sync.Once
}

// call is a request in flight.
type call struct {
	done chan struct{}
	resp response
	// dst receives a read's data; n is how much came.
	dst []byte
	n   int
}

// NewClient starts a client on conn, which it owns from now on.
func NewClient(conn io.ReadWriteCloser, opts ClientOptions) *Client {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	inflight := MaxInflight
	if opts.Serial {
		inflight = 1
	}
	c := &Client{
		conn:       conn,
		log:        log,
		codec:      newCodec(),
		slots:      make(chan struct{}, inflight),
		pending:    make(map[uint64]*call),
		gone:       make(chan struct{}),
		hello:      make(chan struct{}),
		inval:      make(chan string, 256),
		readerDone: make(chan struct{}),
	}
	c.w = newFrameWriter(conn, &c.pool, 0)
	go c.readLoop()
	go c.invalidations()
	go func() {
		<-c.w.done
		c.conn.Close()
	}()
	return c
}

// Close closes the connection: calls in flight and to come fail with
// ENOTCONN.
func (c *Client) Close() error {
	var err error
	c.closeOnce.Do(func() {
		err = c.conn.Close()
		c.w.close()
		<-c.readerDone
	})
	return err
}

// OnInvalidate sets fn to be called with each path that the server says
// changed underneath: fn drops what is cached of that path and of
// everything below it ("/" is everything). Calls come one at a time from
// a goroutine of the client's own, never from within another call.
func (c *Client) OnInvalidate(fn func(path string)) {
	c.onInvalidate.Store(&fn)
}

// Done is closed once the connection is gone.
func (c *Client) Done() <-chan struct{} { return c.gone }

func (c *Client) readLoop() {
	defer close(c.readerDone)
	br := bufio.NewReaderSize(c.conn, 64<<10)
	var body []byte
	err := func() error {
		for {
			n, err := readFrameLen(br)
			if err != nil {
				return err
			}
			if cap(body) < n {
				body = make([]byte, n)
			}
			body = body[:n]
			if err := readFull(br, body); err != nil {
				return err
			}
			resp, payload, err := c.codec.decodeResponse(body)
			if err != nil {
				return err
			}
			switch resp.Kind {
			case kindResponse:
				c.deliver(&resp, payload)
			case kindHello:
				select {
				case <-c.hello:
				default:
					c.readonly, c.version = resp.Readonly, resp.Version
					c.reporting = checkReporting(resp.Reporting)
					close(c.hello)
				}
			case kindInvalidate:
				if checkPath(resp.Path) != nil {
					resp.Path = "/"
				}
				select {
				case c.inval <- resp.Path:
				default:
					c.invalAll.Store(true)
				}
			}
		}
	}()
	if !errors.Is(err, io.EOF) {
		c.log.Debug("vfsproto: connection ended", "err", err)
	}
	c.conn.Close()
	c.mu.Lock()
	c.dead = true
	pending := c.pending
	c.pending = nil
	c.mu.Unlock()
	close(c.gone)
	for _, cl := range pending {
		cl.resp = response{Errno: wireErrno(syscall.ENOTCONN)}
		close(cl.done)
	}
}

// deliver completes the call that resp answers; one that gave up is
// gone, and resp is dropped.
func (c *Client) deliver(resp *response, payload []byte) {
	c.mu.Lock()
	cl := c.pending[resp.ID]
	delete(c.pending, resp.ID)
	c.mu.Unlock()
	if cl == nil {
		return
	}
	cl.resp = *resp
	if cl.dst != nil {
		cl.n = copy(cl.dst, payload)
	}
	close(cl.done)
}

func (c *Client) invalidations() {
	for {
		select {
		case <-c.gone:
			return
		case p := <-c.inval:
			if c.invalAll.Swap(false) {
				p = "/"
				for len(c.inval) > 0 {
					<-c.inval
				}
			}
			if fn := c.onInvalidate.Load(); fn != nil {
				(*fn)(p)
			}
		}
	}
}

// do sends req with payload and waits for its response; a read's data is
// copied into dst. It returns the response and the errno it carries.
func (c *Client) do(ctx context.Context, req *request, payload, dst []byte) (response, int, error) {
	if ctx.Err() != nil {
		return response{}, 0, syscall.EINTR
	}
	select {
	case c.slots <- struct{}{}:
	case <-ctx.Done():
		return response{}, 0, syscall.EINTR
	case <-c.gone:
		return response{}, 0, syscall.ENOTCONN
	}
	defer func() { <-c.slots }()

	caller, _ := vfs.CallerFrom(ctx)
	req.UID, req.GID, req.PID = caller.UID, caller.GID, caller.PID
	cl := &call{done: make(chan struct{}), dst: dst}
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return response{}, 0, syscall.ENOTCONN
	}
	c.lastID++
	req.ID = c.lastID
	c.pending[req.ID] = cl
	c.mu.Unlock()

	f, err := c.frame(req, payload)
	if err != nil {
		c.forget(req.ID)
		return response{}, 0, err
	}
	if err := c.w.send(ctx, f); err != nil {
		c.forget(req.ID)
		if ctx.Err() != nil {
			return response{}, 0, syscall.EINTR
		}
		return response{}, 0, syscall.ENOTCONN
	}

	select {
	case <-cl.done:
	case <-ctx.Done():
		if c.forget(req.ID) {
			c.interrupt(req.ID)
			return response{}, 0, syscall.EINTR
		}
		// The response is being delivered.
		<-cl.done
	}
	if cl.resp.Errno != 0 {
		return cl.resp, cl.n, localErrno(cl.resp.Errno)
	}
	return cl.resp, cl.n, nil
}

// forget drops the pending call id, reporting whether it was still
// pending.
func (c *Client) forget(id uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.pending[id]
	delete(c.pending, id)
	return ok
}

// interrupt asks the server to cancel request id, if the connection has
// room for that now.
func (c *Client) interrupt(id uint64) {
	c.mu.Lock()
	c.lastID++
	req := request{ID: c.lastID, Op: opInterrupt, Interrupt: id}
	c.mu.Unlock()
	if f, err := c.frame(&req, nil); err == nil {
		c.w.trySend(f)
	}
}

// frame encodes a request frame.
func (c *Client) frame(req *request, payload []byte) (outFrame, error) {
	hdr, err := c.codec.enc.Marshal(req)
	if err != nil {
		c.log.Error("vfsproto: encode request", "op", opName(req.Op), "err", err)
		return outFrame{}, syscall.EIO
	}
	n := len(hdr) + len(payload)
	if n > MaxFrame {
		return outFrame{}, syscall.EINVAL
	}
	buf := c.pool.get(4 + n)
	b := *buf
	putFrameLen(b, n)
	copy(b[4:], hdr)
	copy(b[4+len(hdr):], payload)
	return outFrame{b: b, buf: buf}, nil
}

// greeted waits for the server's greeting: false if the connection went
// first.
func (c *Client) greeted() bool {
	select {
	case <-c.hello:
		return true
	case <-c.gone:
		select {
		case <-c.hello:
			return true
		default:
			return false
		}
	}
}

// Readonly reports whether the server's provider is read-only, waiting
// for its greeting if need be; false once the connection is gone.
func (c *Client) Readonly() bool { return c.greeted() && c.readonly }

// Reporting says beneath which paths the server reports every change
// the client does not make itself, waiting for its greeting if need be;
// none once the connection is gone.
func (c *Client) Reporting() mounts.Flags {
	if !c.greeted() {
		return nil
	}
	return c.reporting
}

// checkReporting is a greeting's Reporting, or none if it is not one.
func checkReporting(r map[string]bool) mounts.Flags {
	if len(r) > MaxReporting {
		return nil
	}
	for p := range r {
		if checkPath(p) != nil {
			return nil
		}
	}
	return r
}

// pathOp sends a request on one path after checking it.
func (c *Client) pathOp(ctx context.Context, req request) (response, error) {
	if err := checkPath(req.Path); err != nil {
		return response{}, err
	}
	resp, _, err := c.do(ctx, &req, nil, nil)
	return resp, err
}

// Stat implements vfs.Provider.
func (c *Client) Stat(ctx context.Context, path string) (vfs.FileInfo, error) {
	resp, err := c.pathOp(ctx, request{Op: opStat, Path: path})
	if err != nil {
		return vfs.FileInfo{}, err
	}
	return infoOf(resp, pathBase(path))
}

func infoOf(resp response, name string) (vfs.FileInfo, error) {
	if resp.Info == nil {
		return vfs.FileInfo{}, syscall.EIO
	}
	fi := fromWireInfo(resp.Info)
	fi.Name = name
	return fi, nil
}

func pathBase(p string) string {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			if i == len(p)-1 {
				return "/"
			}
			return p[i+1:]
		}
	}
	return p
}

// DirPage is one page of a directory's entries.
type DirPage struct {
	Entries []vfs.FileInfo
	// Next is the cursor of the page that follows.
	Next uint64
	// EOF reports that no page follows.
	EOF bool
}

// ReaddirPage lists at most max entries of the directory path (at most
// MaxPageEntries, and as many as fit in MaxPageBytes; max <= 0 means as
// many as may be) from cursor: 0 for the first page, then the Next of
// the page before. Cursors stay valid while the directory is unchanged.
func (c *Client) ReaddirPage(ctx context.Context, path string, cursor uint64, max int) (DirPage, error) {
	n := uint32(0)
	if max > 0 {
		n = uint32(min(max, MaxPageEntries))
	}
	resp, err := c.pathOp(ctx, request{Op: opReaddir, Path: path, Cursor: cursor, Count: n})
	if err != nil {
		return DirPage{}, err
	}
	if !resp.EOF && resp.Next <= cursor {
		return DirPage{}, fmt.Errorf("readdir page made no progress: %w", syscall.EIO)
	}
	page := DirPage{Entries: make([]vfs.FileInfo, 0, len(resp.Entries)), Next: resp.Next, EOF: resp.EOF}
	for i := range resp.Entries {
		e := &resp.Entries[i]
		if checkName(e.Name) != nil {
			continue
		}
		page.Entries = append(page.Entries, fromWireInfo(e))
	}
	return page, nil
}

// Readdir implements vfs.Provider, a page at a time.
func (c *Client) Readdir(ctx context.Context, path string) ([]vfs.FileInfo, error) {
	var all []vfs.FileInfo
	var cursor uint64
	for {
		page, err := c.ReaddirPage(ctx, path, cursor, 0)
		if err != nil {
			return nil, err
		}
		all = append(all, page.Entries...)
		if page.EOF {
			return all, nil
		}
		cursor = page.Next
	}
}

// Open implements vfs.Provider.
func (c *Client) Open(ctx context.Context, path string, flags int, mode fs.FileMode) (vfs.Handle, error) {
	return c.open(ctx, request{Op: opOpen, Path: path, Flags: linuxFlags(flags), Mode: uint32(mode.Perm())})
}

// Create implements vfs.Provider.
func (c *Client) Create(ctx context.Context, path string, mode fs.FileMode) (vfs.Handle, error) {
	return c.open(ctx, request{Op: opCreate, Path: path, Mode: uint32(mode.Perm())})
}

func (c *Client) open(ctx context.Context, req request) (vfs.Handle, error) {
	resp, err := c.pathOp(ctx, req)
	if err != nil {
		return nil, err
	}
	if resp.Handle == 0 {
		return nil, syscall.EIO
	}
	return &Handle{c: c, id: resp.Handle, name: pathBase(req.Path)}, nil
}

// Mkdir implements vfs.Provider.
func (c *Client) Mkdir(ctx context.Context, path string, mode fs.FileMode) error {
	_, err := c.pathOp(ctx, request{Op: opMkdir, Path: path, Mode: linuxMode(mode) & 0o7777})
	return err
}

// Remove implements vfs.Provider.
func (c *Client) Remove(ctx context.Context, path string) error {
	_, err := c.pathOp(ctx, request{Op: opRemove, Path: path})
	return err
}

// Rename implements vfs.Provider.
func (c *Client) Rename(ctx context.Context, oldPath, newPath string) error {
	if err := checkPath(newPath); err != nil {
		return err
	}
	_, err := c.pathOp(ctx, request{Op: opRename, Path: oldPath, Path2: newPath})
	return err
}

// Symlink implements vfs.Provider.
func (c *Client) Symlink(ctx context.Context, target, link string) error {
	if err := checkTarget(target); err != nil {
		return err
	}
	_, err := c.pathOp(ctx, request{Op: opSymlink, Path: link, Target: target})
	return err
}

// Mknod implements vfs.Provider. A device is refused here (EPERM), as
// the server would.
func (c *Client) Mknod(ctx context.Context, path string, mode fs.FileMode) error {
	if err := vfs.CheckMknod(mode); err != nil {
		return err
	}
	_, err := c.pathOp(ctx, request{Op: opMknod, Path: path, Mode: linuxMode(mode) & (sIFMT | 0o7777)})
	return err
}

// Readlink implements vfs.Provider.
func (c *Client) Readlink(ctx context.Context, path string) (string, error) {
	resp, err := c.pathOp(ctx, request{Op: opReadlink, Path: path})
	if err != nil {
		return "", err
	}
	return resp.Target, nil
}

// Link implements vfs.Provider.
func (c *Client) Link(ctx context.Context, oldPath, newPath string) error {
	if err := checkPath(newPath); err != nil {
		return err
	}
	_, err := c.pathOp(ctx, request{Op: opLink, Path: oldPath, Path2: newPath})
	return err
}

// Chmod implements vfs.Provider.
func (c *Client) Chmod(ctx context.Context, path string, mode fs.FileMode) error {
	_, err := c.pathOp(ctx, request{Op: opChmod, Path: path, Mode: linuxMode(mode) & 0o7777})
	return err
}

// Chown implements vfs.Provider.
func (c *Client) Chown(ctx context.Context, path string, uid, gid int) error {
	if _, err := ownerID(int64(uid)); err != nil {
		return err
	}
	if _, err := ownerID(int64(gid)); err != nil {
		return err
	}
	_, err := c.pathOp(ctx, request{Op: opChown, Path: path, Owner: int64(uid), Group: int64(gid)})
	return err
}

// Truncate implements vfs.Provider.
func (c *Client) Truncate(ctx context.Context, path string, size int64) error {
	if size < 0 {
		return syscall.EINVAL
	}
	_, err := c.pathOp(ctx, request{Op: opTruncate, Path: path, Size: size})
	return err
}

// Utimens implements vfs.Provider.
func (c *Client) Utimens(ctx context.Context, path string, atime, mtime *time.Time) error {
	req := request{Op: opUtimens, Path: path}
	if atime != nil {
		req.ATime = &wireTime{Sec: atime.Unix(), Nsec: int64(atime.Nanosecond())}
	}
	if mtime != nil {
		req.MTime = &wireTime{Sec: mtime.Unix(), Nsec: int64(mtime.Nanosecond())}
	}
	_, err := c.pathOp(ctx, req)
	return err
}

// Statfs implements vfs.Provider.
func (c *Client) Statfs(ctx context.Context, path string) (vfs.StatFS, error) {
	resp, err := c.pathOp(ctx, request{Op: opStatfs, Path: path})
	if err != nil {
		return vfs.StatFS{}, err
	}
	if resp.StatFS == nil {
		return vfs.StatFS{}, syscall.EIO
	}
	st := resp.StatFS
	return vfs.StatFS{
		TotalBytes: st.TotalBytes, FreeBytes: st.FreeBytes,
		TotalFiles: st.TotalFiles, FreeFiles: st.FreeFiles,
		NameMax: st.NameMax, ReservedBytes: st.Reserved,
	}, nil
}

// Handle is a vfs.Handle open at the server.
type Handle struct {
	c      *Client
	id     uint64
	name   string
	closed atomic.Bool
}

// ID is the handle's id on its connection.
func (h *Handle) ID() uint64 { return h.id }

// ReadAt implements vfs.Handle, MaxData bytes per request.
func (h *Handle) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	if h.closed.Load() {
		return 0, syscall.EBADF
	}
	if off < 0 {
		return 0, syscall.EINVAL
	}
	total := 0
	for total < len(p) {
		chunk := p[total:min(len(p), total+MaxData)]
		resp, n, err := h.c.do(ctx, &request{Op: opRead, Handle: h.id, Off: off + int64(total), Len: uint32(len(chunk))}, nil, chunk)
		total += n
		if err != nil {
			return total, err
		}
		if resp.EOF {
			return total, io.EOF
		}
		if n == 0 {
			break
		}
	}
	return total, nil
}

// WriteAt implements vfs.Handle, MaxData bytes per request.
func (h *Handle) WriteAt(ctx context.Context, p []byte, off int64) (int, error) {
	if h.closed.Load() {
		return 0, syscall.EBADF
	}
	if off < 0 {
		return 0, syscall.EINVAL
	}
	if len(p) == 0 {
		return 0, nil
	}
	total := 0
	for {
		chunk := p[total:min(len(p), total+MaxData)]
		resp, _, err := h.c.do(ctx, &request{Op: opWrite, Handle: h.id, Off: off + int64(total)}, chunk, nil)
		if err != nil {
			return total, err
		}
		n := int(min(max(resp.N, 0), int64(len(chunk))))
		total += n
		if total >= len(p) {
			return total, nil
		}
		if n == 0 {
			return total, syscall.EIO
		}
	}
}

// Stat implements vfs.Handle.
func (h *Handle) Stat(ctx context.Context) (vfs.FileInfo, error) {
	if h.closed.Load() {
		return vfs.FileInfo{}, syscall.EBADF
	}
	resp, _, err := h.c.do(ctx, &request{Op: opFstat, Handle: h.id}, nil, nil)
	if err != nil {
		return vfs.FileInfo{}, err
	}
	return infoOf(resp, h.name)
}

// Truncate implements vfs.Handle.
func (h *Handle) Truncate(ctx context.Context, size int64) error {
	if h.closed.Load() {
		return syscall.EBADF
	}
	if size < 0 {
		return syscall.EINVAL
	}
	_, _, err := h.c.do(ctx, &request{Op: opFtruncate, Handle: h.id, Size: size}, nil, nil)
	return err
}

// Sync implements vfs.Handle.
func (h *Handle) Sync(ctx context.Context) error {
	if h.closed.Load() {
		return syscall.EBADF
	}
	_, _, err := h.c.do(ctx, &request{Op: opFsync, Handle: h.id}, nil, nil)
	return err
}

// Close implements vfs.Handle. The handle is closed at the server even
// if this fails; a second Close is EBADF.
func (h *Handle) Close() error {
	if h.closed.Swap(true) {
		return syscall.EBADF
	}
	_, _, err := h.c.do(context.Background(), &request{Op: opClose, Handle: h.id}, nil, nil)
	if errors.Is(err, syscall.ENOTCONN) {
		// The server closed every handle when the connection went.
		return nil
	}
	return err
}

var (
	_ vfs.Provider = (*Client)(nil)
	_ vfs.Handle   = (*Handle)(nil)
)
