package vfsproto

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/mounts"
	"github.com/airlock-sandbox/airlock/vfs"
)

// Server defaults.
const (
	// DefaultTimeout bounds one request unless ServerOptions.Timeout says
	// otherwise.
	DefaultTimeout = 30 * time.Second
	// DefaultInflightBytes bounds the bytes that the requests executing on
	// one connection hold unless ServerOptions.MaxInflightBytes says
	// otherwise.
	DefaultInflightBytes = 32 << 20
)

// ServerOptions tunes a Server; the zero value is fine.
type ServerOptions struct {
	// Timeout bounds each request: past it the client gets ETIMEDOUT and
	// the request's context is cancelled. 0 means DefaultTimeout.
	Timeout time.Duration
	// WriteTimeout bounds the writing of responses: a client that stops
	// reading them for that long is disconnected. 0 means Timeout.
	WriteTimeout time.Duration
	// MaxInflightBytes bounds what executing requests hold: their write
	// data, read buffers and directory pages. The server stops reading
	// requests while they hold that much. 0 means DefaultInflightBytes;
	// it is never less than 2*MaxFrame.
	MaxInflightBytes int
	// Logger gets what goes wrong; nil means slog.Default().
	Logger *slog.Logger
}

// Server serves one provider to any number of connections.
type Server struct {
	p     vfs.Provider
	opts  ServerOptions
	log   *slog.Logger
	codec codec
	pool  bufPool
}

// NewServer returns a server of p.
func NewServer(p vfs.Provider, opts ServerOptions) *Server {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = opts.Timeout
	}
	if opts.MaxInflightBytes <= 0 {
		opts.MaxInflightBytes = DefaultInflightBytes
	}
	opts.MaxInflightBytes = max(opts.MaxInflightBytes, 2*MaxFrame)
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Server{p: p, opts: opts, log: log, codec: newCodec()}
}

// errProtocol marks a client that broke the protocol.
var errProtocol = errors.New("vfsproto: protocol violation")

// Serve serves requests from conn until the client disconnects, breaks
// the protocol, or ctx is done; then it closes conn and every handle the
// client left open. It returns nil when the client closed the connection
// between frames or ctx is done.
func (s *Server) Serve(ctx context.Context, conn io.ReadWriteCloser) error {
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	ss := &session{
		s:       s,
		ctx:     ctx,
		cancel:  cancel,
		handles: make(map[uint64]*serverHandle),
		running: make(map[uint64]*runningReq),
		jobs:    make(chan job),
	}
	ss.cond.L = &ss.bmu
	ss.w = newFrameWriter(conn, &s.pool, s.opts.WriteTimeout)
	stopClose := context.AfterFunc(ctx, func() {
		conn.Close()
		ss.bmu.Lock()
		ss.stopped = true
		ss.cond.Broadcast()
		ss.bmu.Unlock()
	})
	defer stopClose()
	// A writer that fails (a client that stopped reading) ends the session.
	go func() {
		select {
		case <-ss.w.done:
			cancel()
		case <-ctx.Done():
		}
	}()

	// Changes are watched before the greeting, so that a client that has
	// been greeted misses none.
	if w, ok := s.p.(vfs.Watcher); ok {
		stop := ss.watch(w)
		defer stop()
	}
	hello := response{Kind: kindHello, Version: Version, Readonly: s.p.Readonly()}
	if r, ok := s.p.(reporter); ok {
		if rep := r.Reporting(); len(rep) <= MaxReporting {
			hello.Reporting = rep
		}
	}
	ss.reply(hello)

	err := ss.readLoop(bufio.NewReaderSize(conn, 64<<10))
	cancel()
	var werr error
	select {
	case <-ss.w.done:
		werr = ss.w.err
	default:
	}
	ss.shutdown()
	switch {
	case err == nil, parent.Err() != nil:
		return nil
	case werr != nil && !errors.Is(werr, errWriterClosed):
		return fmt.Errorf("vfsproto: write response: %w", werr)
	}
	return err
}

// session is one connection's state.
type session struct {
	s      *Server
	ctx    context.Context
	cancel context.CancelFunc
	w      *frameWriter
	jobs   chan job
	wg     sync.WaitGroup

	// bmu guards the budget of executing requests.
	bmu      sync.Mutex
	cond     sync.Cond
	inflight int
	bytes    int
	stopped  bool

	// mu guards handles, running and dirs.
	mu         sync.Mutex
	handles    map[uint64]*serverHandle
	lastHandle uint64
	closed     bool
	running    map[uint64]*runningReq
	dirs       []*dirListing
	// gen counts the changes to names that this connection made or the
	// provider reported; a cached listing of an older one is stale.
	gen atomic.Uint64
}

// serverHandle is an open handle with the requests that use it: the
// provider's handle is closed when it is closed and none do.
type serverHandle struct {
	h      vfs.Handle
	refs   int
	closed bool
}

// runningReq is an executing request that an interrupt can cancel.
type runningReq struct {
	cancel context.CancelFunc
}

// dirListing is a directory listing kept between the pages of a readdir.
type dirListing struct {
	path     string
	uid, gid uint32
	gen      uint64
	entries  []vfs.FileInfo
}

// maxDirListings bounds the listings a connection keeps.
const maxDirListings = 4

func (ss *session) readLoop(br *bufio.Reader) error {
	for {
		n, err := readFrameLen(br)
		if err != nil {
			if ss.ctx.Err() != nil {
				return ss.ctx.Err()
			}
			if err == io.EOF {
				// The client hung up between frames.
				return nil
			}
			return fmt.Errorf("%w: %w", errProtocol, err)
		}
		buf := ss.s.pool.get(n)
		if err := readFull(br, *buf); err != nil {
			ss.s.pool.put(buf)
			if ss.ctx.Err() != nil {
				return ss.ctx.Err()
			}
			return err
		}
		req, payload, err := ss.s.codec.decodeRequest(*buf)
		if err != nil {
			ss.s.pool.put(buf)
			return fmt.Errorf("%w: %w", errProtocol, err)
		}
		if req.ID == 0 {
			ss.s.pool.put(buf)
			return fmt.Errorf("%w: request without an id", errProtocol)
		}
		if req.Op == opInterrupt {
			ss.s.pool.put(buf)
			ss.interrupt(req.Interrupt)
			continue
		}
		if req.Op != opWrite {
			// Nothing decoded refers to buf: strings are copies.
			ss.s.pool.put(buf)
			buf, payload = nil, nil
		}
		weight := n + requestHolds(&req)
		if !ss.acquire(weight) {
			ss.s.pool.put(buf)
			return ss.ctx.Err()
		}
		ss.dispatch(job{req: req, payload: payload, buf: buf, weight: weight})
	}
}

// job is a request for a worker.
type job struct {
	req     request
	payload []byte
	buf     *[]byte
	weight  int
}

// workerIdle is how long a worker waits for another request before it
// ends.
const workerIdle = 5 * time.Second

// dispatch hands j to an idle worker, or to a new one: workers are
// reused, so that their stacks have grown already. There are never more
// than MaxInflight busy ones.
func (ss *session) dispatch(j job) {
	select {
	case ss.jobs <- j:
		return
	default:
	}
	ss.wg.Add(1)
	go func() {
		defer ss.wg.Done()
		idle := time.NewTimer(workerIdle)
		defer idle.Stop()
		for {
			ss.handle(j.req, j.payload, j.buf, j.weight)
			idle.Reset(workerIdle)
			select {
			case j = <-ss.jobs:
			case <-idle.C:
				return
			case <-ss.ctx.Done():
				return
			}
		}
	}()
}

// requestHolds is what a request holds beyond its frame while it
// executes: a read's buffer or a directory page.
func requestHolds(req *request) int {
	switch req.Op {
	case opRead:
		return readRoom + int(min(req.Len, MaxData))
	case opReaddir:
		return MaxPageBytes
	}
	return 0
}

// acquire waits for room for a request holding weight bytes; it fails
// once the session is over.
func (ss *session) acquire(weight int) bool {
	ss.bmu.Lock()
	defer ss.bmu.Unlock()
	for !ss.stopped && (ss.inflight >= MaxInflight ||
		ss.inflight > 0 && ss.bytes+weight > ss.s.opts.MaxInflightBytes) {
		ss.cond.Wait()
	}
	if ss.stopped {
		return false
	}
	ss.inflight++
	ss.bytes += weight
	return true
}

func (ss *session) release(weight int) {
	ss.bmu.Lock()
	ss.inflight--
	ss.bytes -= weight
	ss.cond.Broadcast()
	ss.bmu.Unlock()
}

func (ss *session) interrupt(id uint64) {
	ss.mu.Lock()
	r := ss.running[id]
	ss.mu.Unlock()
	if r != nil {
		r.cancel()
	}
}

// handle executes one request and sends its response, or ETIMEDOUT or
// EINTR if its context ends first.
func (ss *session) handle(req request, payload []byte, buf *[]byte, weight int) {
	// The budget is given back once the response is written, or when the
	// request is over if its response was dropped.
	var released atomic.Bool
	releaseOnce := func() {
		if released.CompareAndSwap(false, true) {
			ss.release(weight)
		}
	}
	handedOff := false
	defer func() {
		if !handedOff {
			releaseOnce()
		}
	}()
	defer ss.s.pool.put(buf)

	ctx, cancel := context.WithTimeout(ss.ctx, ss.s.opts.Timeout)
	defer cancel()
	ctx = vfs.WithCaller(vfs.WithOrigin(ctx, vfs.OriginSandbox), vfs.Caller{UID: req.UID, GID: req.GID, PID: req.PID})
	r := &runningReq{cancel: cancel}
	ss.mu.Lock()
	prev := ss.running[req.ID]
	ss.running[req.ID] = r
	ss.mu.Unlock()
	defer func() {
		ss.mu.Lock()
		if ss.running[req.ID] == r {
			if prev != nil {
				ss.running[req.ID] = prev
			} else {
				delete(ss.running, req.ID)
			}
		}
		ss.mu.Unlock()
	}()

	stop := context.AfterFunc(ctx, func() {
		if ss.ctx.Err() != nil {
			// The connection is going: the client fails every call.
			return
		}
		ss.reply(response{ID: req.ID, Errno: wireErrno(vfs.Errno(ctx.Err()))})
	})
	res := ss.run(ctx, &req, payload)
	if !stop() {
		// The client was told ETIMEDOUT or EINTR: undo what it cannot
		// know about.
		ss.s.pool.put(res.rbuf)
		if res.resp.Handle != 0 {
			ss.closeHandle(res.resp.Handle)
		}
		return
	}
	handedOff = true
	ss.send(&req, res, releaseOnce)
}

// result is what a request came to.
type result struct {
	resp response
	err  error
	// rbuf holds a read's data at [readRoom:readRoom+n].
	rbuf *[]byte
	n    int
}

// run executes req, recovering from a panic as a last resort.
func (ss *session) run(ctx context.Context, req *request, payload []byte) (res result) {
	defer func() {
		if v := recover(); v != nil {
			ss.s.log.Error("vfsproto: request panicked", "op", opName(req.Op), "panic", v, "stack", string(debug.Stack()))
			ss.s.pool.put(res.rbuf)
			res = result{err: syscall.EIO}
		}
	}()
	return ss.exec(ctx, req, payload)
}

// readRoom is the room left before a read's data for its frame's length
// and header, so that the data need not be copied.
const readRoom = 64

// send writes res as req's response; done is called once it is written.
func (ss *session) send(req *request, res result, done func()) {
	resp := res.resp
	resp.ID = req.ID
	if res.err != nil {
		if res.rbuf != nil {
			ss.s.pool.put(res.rbuf)
		}
		resp = response{ID: req.ID, Errno: wireErrno(vfs.Errno(res.err))}
		res.rbuf = nil
	}
	if res.rbuf != nil {
		hdr, err := ss.s.codec.enc.Marshal(&resp)
		if err != nil || len(hdr)+4 > readRoom {
			ss.s.pool.put(res.rbuf)
			ss.s.log.Error("vfsproto: encode response", "op", opName(req.Op), "err", err)
			ss.sendResp(&response{ID: req.ID, Errno: linuxEIO}, done)
			return
		}
		b := *res.rbuf
		start := readRoom - len(hdr) - 4
		putFrameLen(b[start:], len(hdr)+res.n)
		copy(b[start+4:], hdr)
		ss.w.send(ss.ctx, outFrame{b: b[start : readRoom+res.n], buf: res.rbuf, done: done})
		return
	}
	ss.sendResp(&resp, done)
}

// reply sends resp, a response without payload.
func (ss *session) reply(resp response) { ss.sendResp(&resp, nil) }

func (ss *session) sendResp(resp *response, done func()) {
	hdr, err := ss.s.codec.enc.Marshal(resp)
	if err == nil && len(hdr) > MaxFrame {
		err = fmt.Errorf("%d byte header", len(hdr))
	}
	if err != nil {
		ss.s.log.Error("vfsproto: encode response", "err", err)
		hdr, _ = ss.s.codec.enc.Marshal(&response{ID: resp.ID, Errno: linuxEIO})
	}
	buf := ss.s.pool.get(4 + len(hdr))
	putFrameLen(*buf, len(hdr))
	copy((*buf)[4:], hdr)
	ss.w.send(ss.ctx, outFrame{b: *buf, buf: buf, done: done})
}

func putFrameLen(b []byte, n int) {
	b[0], b[1], b[2], b[3] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
}

// exec executes req; every value in it is checked first.
func (ss *session) exec(ctx context.Context, req *request, payload []byte) result {
	p := ss.s.p
	fail := func(err error) result { return result{err: err} }
	done := fail
	switch req.Op {
	case opStat:
		if err := checkPath(req.Path); err != nil {
			return fail(err)
		}
		fi, err := p.Stat(ctx, req.Path)
		if err != nil {
			return fail(err)
		}
		return infoResult(fi)
	case opReaddir:
		return ss.readdirPage(ctx, req)
	case opOpen, opCreate:
		if err := checkPath(req.Path); err != nil {
			return fail(err)
		}
		perm := fs.FileMode(req.Mode & 0o777)
		var h vfs.Handle
		var err error
		if req.Op == opCreate {
			defer ss.changed()
			h, err = p.Create(ctx, req.Path, perm)
		} else {
			flags, ferr := osFlags(req.Flags)
			if ferr != nil {
				return fail(ferr)
			}
			if req.Flags&lCREAT != 0 {
				defer ss.changed()
			}
			h, err = p.Open(ctx, req.Path, flags, perm)
		}
		if err != nil {
			return fail(err)
		}
		if h == nil {
			return fail(syscall.EIO)
		}
		id, err := ss.addHandle(h)
		if err != nil {
			return fail(err)
		}
		return result{resp: response{Handle: id}}
	case opMkdir:
		if err := checkPath(req.Path); err != nil {
			return fail(err)
		}
		defer ss.changed()
		return done(p.Mkdir(ctx, req.Path, fileMode(req.Mode&0o7777)))
	case opRemove:
		if err := checkPath(req.Path); err != nil {
			return fail(err)
		}
		defer ss.changed()
		return done(p.Remove(ctx, req.Path))
	case opRename, opLink:
		if err := checkPath(req.Path); err != nil {
			return fail(err)
		}
		if err := checkPath(req.Path2); err != nil {
			return fail(err)
		}
		defer ss.changed()
		if req.Op == opRename {
			return done(p.Rename(ctx, req.Path, req.Path2))
		}
		return done(p.Link(ctx, req.Path, req.Path2))
	case opSymlink:
		if err := checkTarget(req.Target); err != nil {
			return fail(err)
		}
		if err := checkPath(req.Path); err != nil {
			return fail(err)
		}
		defer ss.changed()
		return done(p.Symlink(ctx, req.Target, req.Path))
	case opMknod:
		if err := checkPath(req.Path); err != nil {
			return fail(err)
		}
		mode, err := mknodMode(req.Mode)
		if err != nil {
			return fail(err)
		}
		defer ss.changed()
		return done(p.Mknod(ctx, req.Path, mode))
	case opReadlink:
		if err := checkPath(req.Path); err != nil {
			return fail(err)
		}
		t, err := p.Readlink(ctx, req.Path)
		if err != nil {
			return fail(err)
		}
		if len(t) > MaxTarget {
			return fail(syscall.ENAMETOOLONG)
		}
		return result{resp: response{Target: t}}
	case opChmod:
		if err := checkPath(req.Path); err != nil {
			return fail(err)
		}
		return done(p.Chmod(ctx, req.Path, fileMode(req.Mode&0o7777)))
	case opChown:
		if err := checkPath(req.Path); err != nil {
			return fail(err)
		}
		uid, err := ownerID(req.Owner)
		if err != nil {
			return fail(err)
		}
		gid, err := ownerID(req.Group)
		if err != nil {
			return fail(err)
		}
		return done(p.Chown(ctx, req.Path, uid, gid))
	case opTruncate:
		if err := checkPath(req.Path); err != nil {
			return fail(err)
		}
		if req.Size < 0 {
			return fail(syscall.EINVAL)
		}
		return done(p.Truncate(ctx, req.Path, req.Size))
	case opUtimens:
		if err := checkPath(req.Path); err != nil {
			return fail(err)
		}
		at, err := fromWireTime(req.ATime)
		if err != nil {
			return fail(err)
		}
		mt, err := fromWireTime(req.MTime)
		if err != nil {
			return fail(err)
		}
		var atp, mtp *time.Time
		if req.ATime != nil {
			atp = &at
		}
		if req.MTime != nil {
			mtp = &mt
		}
		return done(p.Utimens(ctx, req.Path, atp, mtp))
	case opStatfs:
		if err := checkPath(req.Path); err != nil {
			return fail(err)
		}
		st, err := p.Statfs(ctx, req.Path)
		if err != nil {
			return fail(err)
		}
		return result{resp: response{StatFS: &wireStatFS{
			TotalBytes: st.TotalBytes, FreeBytes: st.FreeBytes,
			TotalFiles: st.TotalFiles, FreeFiles: st.FreeFiles,
			NameMax: st.NameMax, Reserved: st.ReservedBytes,
		}}}
	case opRead, opWrite, opFstat, opFtruncate, opFsync:
		return ss.execHandle(ctx, req, payload)
	case opClose:
		return done(ss.closeHandle(req.Handle))
	}
	return fail(syscall.ENOSYS)
}

// execHandle executes a request on an open handle.
func (ss *session) execHandle(ctx context.Context, req *request, payload []byte) result {
	sh, err := ss.useHandle(req.Handle)
	if err != nil {
		return result{err: err}
	}
	defer ss.unuseHandle(sh)
	h := sh.h
	switch req.Op {
	case opRead:
		if req.Len > MaxData {
			return result{err: syscall.EINVAL}
		}
		if req.Off < 0 || req.Off > maxOffset-int64(req.Len) {
			return result{err: syscall.EINVAL}
		}
		rbuf := ss.s.pool.get(readRoom + int(req.Len))
		n, err := h.ReadAt(ctx, (*rbuf)[readRoom:], req.Off)
		n = min(max(n, 0), int(req.Len))
		eof := errors.Is(err, io.EOF)
		if err != nil && !eof && n == 0 {
			ss.s.pool.put(rbuf)
			return result{err: err}
		}
		return result{resp: response{EOF: eof}, rbuf: rbuf, n: n}
	case opWrite:
		if len(payload) > MaxData {
			return result{err: syscall.EINVAL}
		}
		if req.Off < 0 || req.Off > maxOffset-int64(len(payload)) {
			return result{err: syscall.EINVAL}
		}
		n, err := h.WriteAt(ctx, payload, req.Off)
		n = min(max(n, 0), len(payload))
		if err != nil && n == 0 {
			return result{err: err}
		}
		return result{resp: response{N: int64(n)}}
	case opFstat:
		fi, err := h.Stat(ctx)
		if err != nil {
			return result{err: err}
		}
		return infoResult(fi)
	case opFtruncate:
		if req.Size < 0 {
			return result{err: syscall.EINVAL}
		}
		return result{err: h.Truncate(ctx, req.Size)}
	default: // opFsync
		return result{err: h.Sync(ctx)}
	}
}

// maxOffset bounds a read's or write's end, as Linux's MAX_LFS_FILESIZE.
const maxOffset = 1<<63 - 1

func infoResult(fi vfs.FileInfo) result {
	w := toWireInfo(fi)
	w.Name = ""
	return result{resp: response{Info: &w}}
}

// ownerID checks one of chown's ids: -1 or a uid_t other than -1.
func ownerID(v int64) (int, error) {
	if v < -1 || v >= 1<<32-1 {
		return 0, syscall.EINVAL
	}
	return int(v), nil
}

// changed notes a change of names: cached listings are stale.
func (ss *session) changed() { ss.gen.Add(1) }

// readdirPage lists one page of a directory from req.Cursor, the index
// of its first entry. The listing is kept between the pages of a large
// directory while no names change.
func (ss *session) readdirPage(ctx context.Context, req *request) result {
	if err := checkPath(req.Path); err != nil {
		return result{err: err}
	}
	count := int(req.Count)
	if count <= 0 || count > MaxPageEntries {
		count = MaxPageEntries
	}
	limit := int(req.Bytes)
	if limit <= 0 || limit > MaxPageBytes {
		limit = MaxPageBytes
	}
	gen := ss.gen.Load()
	var entries []vfs.FileInfo
	if req.Cursor > 0 {
		entries = ss.cachedListing(req.Path, req.UID, req.GID, gen)
	}
	if entries == nil {
		var err error
		entries, err = ss.s.p.Readdir(ctx, req.Path)
		if err != nil {
			return result{err: err}
		}
	}
	start := uint64(len(entries))
	if req.Cursor < start {
		start = req.Cursor
	}
	page := make([]wireInfo, 0, min(count, len(entries)-int(start)))
	used := 0
	i := int(start)
	for ; i < len(entries) && len(page) < count; i++ {
		e := &entries[i]
		if checkName(e.Name) != nil {
			// A name the guest cannot hold is left out.
			continue
		}
		size := entrySize(e.Name)
		if used+size > limit && len(page) > 0 {
			break
		}
		used += size
		page = append(page, toWireInfo(*e))
	}
	eof := i >= len(entries)
	ss.keepListing(req.Path, req.UID, req.GID, gen, entries, eof)
	return result{resp: response{Entries: page, Next: uint64(i), EOF: eof}}
}

func (ss *session) cachedListing(path string, uid, gid uint32, gen uint64) []vfs.FileInfo {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for _, d := range ss.dirs {
		if d.path == path && d.uid == uid && d.gid == gid && d.gen == gen {
			return d.entries
		}
	}
	return nil
}

// keepListing keeps a listing for the pages to come, or drops it after
// the last page.
func (ss *session) keepListing(path string, uid, gid uint32, gen uint64, entries []vfs.FileInfo, eof bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	dirs := ss.dirs[:0]
	for _, d := range ss.dirs {
		if !(d.path == path && d.uid == uid && d.gid == gid) && d.gen == ss.gen.Load() {
			dirs = append(dirs, d)
		}
	}
	clear(ss.dirs[len(dirs):])
	ss.dirs = dirs
	if eof {
		return
	}
	if len(ss.dirs) >= maxDirListings {
		copy(ss.dirs, ss.dirs[1:])
		ss.dirs = ss.dirs[:len(ss.dirs)-1]
	}
	ss.dirs = append(ss.dirs, &dirListing{path: path, uid: uid, gid: gid, gen: gen, entries: entries})
}

// addHandle gives h an id of the connection, never one used before.
func (ss *session) addHandle(h vfs.Handle) (uint64, error) {
	ss.mu.Lock()
	if ss.closed || len(ss.handles) >= MaxHandles {
		closed := ss.closed
		ss.mu.Unlock()
		h.Close()
		if closed {
			return 0, syscall.EIO
		}
		return 0, syscall.EMFILE
	}
	ss.lastHandle++
	id := ss.lastHandle
	ss.handles[id] = &serverHandle{h: h}
	ss.mu.Unlock()
	return id, nil
}

func (ss *session) useHandle(id uint64) (*serverHandle, error) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	sh := ss.handles[id]
	if sh == nil {
		return nil, syscall.EBADF
	}
	sh.refs++
	return sh, nil
}

func (ss *session) unuseHandle(sh *serverHandle) {
	ss.mu.Lock()
	sh.refs--
	last := sh.refs == 0 && sh.closed
	ss.mu.Unlock()
	if last {
		ss.closeProvider(sh)
	}
}

// closeHandle forgets handle id; the provider's handle is closed once no
// request uses it.
func (ss *session) closeHandle(id uint64) error {
	ss.mu.Lock()
	sh := ss.handles[id]
	if sh == nil {
		ss.mu.Unlock()
		return syscall.EBADF
	}
	delete(ss.handles, id)
	sh.closed = true
	last := sh.refs == 0
	ss.mu.Unlock()
	if last {
		return ss.closeProvider(sh)
	}
	return nil
}

func (ss *session) closeProvider(sh *serverHandle) (err error) {
	defer func() {
		if v := recover(); v != nil {
			ss.s.log.Error("vfsproto: handle close panicked", "panic", v)
			err = syscall.EIO
		}
	}()
	return sh.h.Close()
}

// shutdown waits for the requests still executing, a while, and closes
// every handle.
func (ss *session) shutdown() {
	finished := make(chan struct{})
	go func() {
		ss.wg.Wait()
		close(finished)
	}()
	timer := time.NewTimer(ss.s.opts.Timeout)
	select {
	case <-finished:
	case <-timer.C:
		ss.s.log.Warn("vfsproto: requests still executing after the connection ended")
	}
	timer.Stop()
	ss.w.close()

	ss.mu.Lock()
	ss.closed = true
	var last []*serverHandle
	for id, sh := range ss.handles {
		delete(ss.handles, id)
		sh.closed = true
		if sh.refs == 0 {
			last = append(last, sh)
		}
	}
	ss.dirs = nil
	ss.mu.Unlock()
	for _, sh := range last {
		if err := ss.closeProvider(sh); err != nil {
			ss.s.log.Debug("vfsproto: close handle at disconnect", "err", err)
		}
	}
}

// reporter is a provider that knows beneath which of its paths every
// change not made through the connection reaches its watchers.
type reporter interface{ Reporting() mounts.Flags }

// watch forwards the provider's changes to the client, coalescing them
// into one of "/" when they come faster than the client takes them.
func (ss *session) watch(w vfs.Watcher) (stop func()) {
	ch := make(chan string, 256)
	var overflow atomic.Bool
	stopWatch := w.Watch(func(path string) {
		ss.changed()
		select {
		case ch <- path:
		default:
			overflow.Store(true)
		}
	})
	go func() {
		for {
			select {
			case <-ss.ctx.Done():
				return
			case p := <-ch:
				if overflow.Swap(false) {
					p = "/"
					for len(ch) > 0 {
						<-ch
					}
				}
				if checkPath(p) != nil {
					p = "/"
				}
				hdr, err := ss.s.codec.enc.Marshal(&response{Kind: kindInvalidate, Path: p})
				if err != nil {
					continue
				}
				buf := ss.s.pool.get(4 + len(hdr))
				putFrameLen(*buf, len(hdr))
				copy((*buf)[4:], hdr)
				if ss.w.send(ss.ctx, outFrame{b: *buf, buf: buf}) != nil {
					return
				}
			}
		}
	}()
	return stopWatch
}
