package rpc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/lineio"
)

// Bounds on how long a session's end may take.
const (
	// closeTimeout bounds closing the session's sandboxes.
	closeTimeout = 30 * time.Second
	// drainTimeout bounds waiting for cancelled requests to answer.
	drainTimeout = 10 * time.Second
	// flushTimeout bounds writing the events still queued.
	flushTimeout = 2 * time.Second
)

// Server serves the JSON-RPC protocol. One Server may serve many
// sessions at once; they share nothing but its options.
type Server struct {
	opts Options
}

// NewServer returns a server with opts, defaults applied.
func NewServer(opts Options) *Server {
	return &Server{opts: opts.withDefaults()}
}

// Serve runs one session on r and w until r ends or ctx is done.
// At the end of r, the requests still in flight run to their end and
// are answered first, unless w is a file (a pipe, a terminal) whose
// reader has gone, or the session serves shared sandboxes only (a
// control connection), which ends at once. Sandboxes created in the session are closed when it
// ends. The shared
// sandboxes are available to the session (sandbox_id may be omitted when
// there is only one) and stay up when it ends; "close" on one stops it.
//
// Serve returns nil when r ends, ctx's error when ctx is done, and the
// error when writing to w failed. When it returns because ctx is done, a
// read from r or a write to w may still be blocked: close them to release
// them.
func (s *Server) Serve(ctx context.Context, r io.Reader, w io.Writer, shared ...*airlock.Sandbox) error {
	return s.ServeWith(ctx, r, w, ServeOptions{Shared: shared})
}

// ServeWith is Serve with a detached sandbox's main command and event
// source.
func (s *Server) ServeWith(ctx context.Context, r io.Reader, w io.Writer, so ServeOptions) error {
	return newSession(ctx, &s.opts, w, so).run(r)
}

// ServeControl serves a control connection of one sandbox: sb is shared
// (not closed when the session ends; "close" stops it) and main, when not
// nil, is the main command "attach" follows. Create it with Options
// whose AllowCreate is false.
func (s *Server) ServeControl(ctx context.Context, r io.Reader, w io.Writer, sb *airlock.Sandbox, main Main) error {
	return s.ServeWith(ctx, r, w, ServeOptions{Shared: []*airlock.Sandbox{sb}, Main: main})
}

// session is one client's connection.
type session struct {
	opts   *Options
	so     ServeOptions
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelCauseFunc
	out    *lineWriter
	// outFile is the output, when it is a file: a pipe whose reader
	// has gone says so without being written to.
	outFile *os.File
	events  *eventQueue
	unsub   func()

	// work bounds the requests in flight; reserve lets control requests
	// through when work is exhausted. lineBytes bounds the bytes of
	// request lines in flight (queued or handled), readBytes those of
	// files read for responses.
	work, reserve, lineBytes, readBytes *budget
	// pending holds requests waiting for a slot, in order.
	pending chan *job

	mu sync.Mutex
	// lastTurn is the turn of the last request read that is in the
	// session's order (see inOrder); only the reader touches it.
	lastTurn chan struct{}
	sbs      sandboxes
	ops      map[string]*opEntry // running execs and attaches, by idKey
	ending   bool
	// lastClosed is set once a "close" closed the last sandbox the
	// session created, under Options.EndWithLastSandbox.
	lastClosed atomic.Bool
	// pools are the session's pools, by id; closedPools remembers the
	// ids of those closed.
	pools       map[string]*poolEntry
	closedPools map[string]bool

	handlers sync.WaitGroup
}

func newSession(parent context.Context, opts *Options, w io.Writer, so ServeOptions) *session {
	ctx, cancel := context.WithCancelCause(parent)
	ss := &session{
		opts:      opts,
		so:        so,
		log:       opts.Logger,
		ctx:       ctx,
		cancel:    cancel,
		work:      newBudget(int64(opts.MaxInFlight)),
		reserve:   newBudget(controlReserve),
		lineBytes: newBudget(opts.MaxInFlightBytes),
		readBytes: newBudget(opts.MaxInFlightBytes),
		pending:   make(chan *job, opts.MaxInFlight),
		sbs:       newSandboxes(),
		ops:       map[string]*opEntry{},
	}
	ss.pools, ss.closedPools = map[string]*poolEntry{}, map[string]bool{}
	ss.out = &lineWriter{w: w, onFail: func(err error) { cancel(err) }}
	if f, ok := w.(*os.File); ok {
		ss.outFile = f
	}
	ss.events = newEventQueue(ss.out, ss.log)
	for _, sb := range so.Shared {
		ss.sbs.add(&sandboxEntry{sb: sb})
	}
	if so.Events != nil && len(so.Shared) > 0 {
		ss.unsub = so.Events.Subscribe(func(e airlock.Event) {
			for _, sb := range so.Shared {
				if sb.ID() == e.SandboxID {
					ss.events.publish(e)
					return
				}
			}
		})
	}
	return ss
}

// run reads requests until the input ends, ctx is done or the output
// fails, then ends the session.
func (ss *session) run(r io.Reader) error {
	ss.log.Debug("session started")
	readDone := make(chan error, 1)
	go ss.dispatch()
	go func() {
		err := ss.readLoop(r)
		close(ss.pending)
		readDone <- err
	}()
	var err error
	select {
	case err = <-readDone:
		// A session of its own sandboxes (airlock rpc) does what its
		// input asked; a control connection of a detached sandbox ends
		// with its client, which may have gone without a word.
		if err == nil && len(ss.so.Shared) == 0 && !ss.finishInFlight() {
			err = context.Cause(ss.ctx)
		}
	case <-ss.ctx.Done():
		err = context.Cause(ss.ctx)
	}
	ss.shutdown()
	if errors.Is(err, errLastSandboxClosed) {
		ss.log.Debug("session ended: its sandbox was closed")
		return nil
	}
	if err != nil {
		ss.log.Info("session ended", "reason", err)
	} else {
		ss.log.Debug("session ended: end of input")
	}
	return err
}

// finishInFlight waits, once the input has ended, for the requests in
// flight to end and be answered, as a script piped in expects of its
// last requests. It stops waiting when the session is cancelled or when
// the output is a file whose reader has gone (a client that died).
//
// It reports false when the session was cancelled meanwhile.
func (ss *session) finishInFlight() bool {
	done := make(chan struct{})
	go func() {
		ss.handlers.Wait()
		close(done)
	}()
	var gone <-chan struct{}
	if ss.outFile != nil {
		gone = readerGone(ss.outFile, done)
	}
	select {
	case <-done:
	case <-ss.ctx.Done():
		return false
	case <-gone:
		ss.log.Info("the client stopped reading: the requests still running are cancelled")
	}
	return true
}

// readerGone returns a channel closed when f, the write end of a pipe or
// a terminal, reports that nobody reads it any more (POLLERR, POLLHUP);
// it stops looking once stop is closed.
func readerGone(f *os.File, stop <-chan struct{}) <-chan struct{} {
	gone := make(chan struct{})
	rc, err := f.SyscallConn()
	if err != nil {
		return gone
	}
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			var revents int16
			var perr error
			if err := rc.Control(func(fd uintptr) {
				fds := []unix.PollFd{{Fd: int32(fd)}}
				_, perr = unix.Poll(fds, 200)
				revents = fds[0].Revents
			}); err != nil {
				return
			}
			if perr != nil && !errors.Is(perr, unix.EINTR) {
				return
			}
			if revents&(unix.POLLERR|unix.POLLHUP) != 0 {
				close(gone)
				return
			}
		}
	}()
	return gone
}

// readLoop reads and dispatches lines until the input ends (nil) or
// fails.
func (ss *session) readLoop(r io.Reader) error {
	lr := lineio.NewReader(r, ss.opts.MaxMessage)
	for {
		line, n, own, err := lr.Next()
		switch {
		case errors.Is(err, lineio.ErrTooLong):
			ss.log.Warn("discarded a request line over the limit", "bytes", n, "limit", ss.opts.MaxMessage)
			_ = ss.out.replyError(nullID(), rpcError(api.CodeLimitExceeded,
				"a request line of %d bytes was discarded: the limit is %d bytes per message; send less per request (a large file in parts, joined with exec), or raise the limit (airlock rpc --max-message-mb)",
				n, ss.opts.MaxMessage))
			continue
		case errors.Is(err, io.EOF):
			return nil
		case err != nil:
			if ss.ctx.Err() != nil {
				return context.Cause(ss.ctx)
			}
			return fmt.Errorf("read requests: %w", err)
		}
		if !own {
			// Handled after the next read: take it out of the buffer.
			line = bytes.Clone(line)
		}
		if err := ss.accept(line); err != nil {
			return err
		}
	}
}

// accept parses one line and queues it for handling. It waits while the
// bytes of request lines in flight are over their budget, while the queue
// of requests waiting for a slot is full, or (for a control request)
// while the reserved slots are taken too. It fails only when the session
// is ending.
func (ss *session) accept(line []byte) error {
	req, bad := parseRequest(line)
	if bad != nil {
		_ = ss.out.replyError(bad.id, bad.err)
		return nil
	}
	if req == nil {
		return nil
	}
	spec, ok := lookupMethod(req.method)
	if !ok {
		_ = ss.out.replyError(req.id, rpcError(api.CodeMethodNotFound, "unknown method %s: the methods are %s", quote(req.method), methodList()))
		return nil
	}
	if err := ss.lineBytes.acquire(ss.ctx, req.size); err != nil {
		return context.Cause(ss.ctx)
	}
	var once sync.Once
	j := &job{req: req, spec: spec}
	j.releaseLine = func() { once.Do(func() { ss.lineBytes.release(req.size) }) }
	ss.prepare(j)
	if inOrder(req) {
		j.after, j.turn = ss.lastTurn, make(chan struct{})
		ss.lastTurn = j.turn
	}
	ss.mu.Lock()
	if ss.ending {
		j.endTurn()
		ss.mu.Unlock()
		j.releaseLine()
		return context.Cause(ss.ctx)
	}
	ss.handlers.Add(1)
	ss.mu.Unlock()
	if spec.control {
		// Control requests skip the queue: a cancel must reach a running
		// exec even when long execs hold every slot.
		slots := ss.work
		if !slots.tryAcquire(1) {
			slots = ss.reserve
			if err := slots.acquire(ss.ctx, 1); err != nil {
				go ss.handle(j, nil)
				return context.Cause(ss.ctx)
			}
		}
		go ss.handle(j, slots)
		return nil
	}
	select {
	case ss.pending <- j:
		return nil
	case <-ss.ctx.Done():
		go ss.handle(j, nil)
		return context.Cause(ss.ctx)
	}
}

// dispatch starts the queued requests, in order, as slots free up; once
// the session is ending it answers them as cancelled. It returns when the
// queue is closed.
func (ss *session) dispatch() {
	for j := range ss.pending {
		if err := ss.work.acquire(ss.ctx, 1); err != nil {
			go ss.handle(j, nil)
			continue
		}
		go ss.handle(j, ss.work)
	}
}

// handle runs one request and answers it, then gives back its slot
// (none: the session is ending and it is answered as cancelled).
func (ss *session) handle(j *job, slots *budget) {
	defer ss.handlers.Done()
	defer j.releaseLine()
	defer j.endTurn()
	if slots != nil {
		defer slots.release(1)
	} else if j.early == nil {
		j.early = commonError(ss.ctx, nil, context.Canceled)
	}
	var (
		res any
		err error
	)
	func() {
		defer func() {
			if p := recover(); p != nil {
				ss.log.Error("request handler panicked", "method", j.req.method, "panic", p, "stack", string(debug.Stack()))
				err = rpcError(api.CodeInternal, "internal error handling %s: please report this bug; the session goes on", j.req.method)
			}
		}()
		if j.early != nil {
			err = j.early
			return
		}
		if j.after != nil {
			select {
			case <-j.after:
			case <-ss.ctx.Done():
				err = commonError(ss.ctx, nil, context.Canceled)
				return
			}
		}
		start := time.Now()
		res, err = j.spec.fn(ss, ss.ctx, j)
		ss.log.Debug("request", "method", j.req.method, "id", string(j.req.id), "ms", time.Since(start).Milliseconds(), "err", err)
	}()
	if j.stdin != nil {
		close(j.stdin.done)
	}
	if j.op != nil {
		ss.endOp(j.op, err)
	}
	if err != nil {
		var ae *api.Error
		if !errors.As(err, &ae) {
			ae = internalError(j.req.method, err)
		}
		_ = ss.out.replyError(j.req.id, ae)
		return
	}
	_ = ss.out.reply(j.req.id, res)
	if j.req.method == api.MethodClose && ss.lastClosed.Load() {
		ss.cancel(errLastSandboxClosed)
	}
}

// endOp forgets a running exec or attach once its request is over.
func (ss *session) endOp(op *opEntry, err error) {
	select {
	case <-op.ready:
	default:
		ae, _ := err.(*api.Error)
		if ae == nil {
			ae = rpcError(api.CodeNotFound, "the request with this id did not start: see its response")
		}
		op.failed(ae)
	}
	ss.mu.Lock()
	if ss.ops[op.key] == op {
		delete(ss.ops, op.key)
	}
	ss.mu.Unlock()
}

// shutdown cancels what is in flight and closes the session's own
// sandboxes, each within bounded time.
func (ss *session) shutdown() {
	ss.mu.Lock()
	ss.ending = true
	var owned []*sandboxEntry
	for _, e := range ss.sbs.list() {
		if e.owned {
			owned = append(owned, e)
		}
	}
	pools := ss.pools
	ss.pools = map[string]*poolEntry{}
	ss.mu.Unlock()
	ss.cancel(errSessionEnded)
	if ss.unsub != nil {
		ss.unsub()
	}
	// The pools first: no create takes a sandbox from them any more.
	ss.closePools(pools)
	ss.closeAll(owned)
	if !waitTimeout(&ss.handlers, drainTimeout) {
		ss.log.Warn("requests still running after the session ended: the client may not be reading responses")
	}
	ss.events.close(flushTimeout)
}

// closeAll closes sandboxes in parallel, waiting at most closeTimeout.
func (ss *session) closeAll(entries []*sandboxEntry) {
	var wg sync.WaitGroup
	for _, e := range entries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := e.close(); err != nil {
				ss.log.Warn("close sandbox", "sandbox", e.sb.ID(), "err", err)
			}
		}()
	}
	if !waitTimeout(&wg, closeTimeout) {
		ss.log.Error("sandboxes did not close in time", "timeout", closeTimeout)
	}
}

// waitTimeout waits for wg at most d and reports whether it finished.
func waitTimeout(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// resolve finds the sandbox a request names.
func (ss *session) resolve(id string) (*sandboxEntry, error) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	e, ae := ss.sbs.resolve(id)
	if ae != nil {
		return nil, ae
	}
	return e, nil
}
