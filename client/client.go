package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/jsonblob"
	"github.com/airlock-sandbox/airlock/internal/lineio"
)

// Defaults of Options.
const (
	DefaultEventBuffer       = 256
	DefaultMaxBufferedOutput = 64 << 20
	DefaultMaxLineBytes      = 256 << 20
	DefaultCloseTimeout      = 30 * time.Second
)

// maxStdinChunk is the largest piece of stdin sent in one request.
const maxStdinChunk = 1 << 20

// Options configures a Client. The zero value is ready to use.
type Options struct {
	// Binary is the airlock executable Start runs. Empty means
	// $AIRLOCK_BIN, then "airlock" on PATH.
	Binary string
	// Args are extra arguments after "rpc".
	Args []string
	// Env is the environment of the subprocess; nil means os.Environ().
	Env []string
	// Stderr receives the server's log output; nil discards it. The last
	// lines are kept regardless, to explain an unexpected exit.
	Stderr io.Writer

	// EventBuffer is the capacity of the Events channel (default 256).
	// Events that arrive while it is full are dropped and counted.
	EventBuffer int
	// MaxBufferedOutput bounds, per streaming process, the output
	// received but not yet read (default 64 MiB). Past it the command is
	// cancelled and reads fail with ErrOutputOverflow.
	MaxBufferedOutput int64
	// MaxLineBytes bounds one message from the server (default 256 MiB).
	// A longer line is a protocol error that fails the client.
	MaxLineBytes int
	// CloseTimeout bounds how long Close waits for the subprocess to tear
	// its sandboxes down and exit before killing it (default 30s).
	CloseTimeout time.Duration
}

func (o *Options) setDefaults() {
	if o.EventBuffer <= 0 {
		o.EventBuffer = DefaultEventBuffer
	}
	if o.MaxBufferedOutput <= 0 {
		o.MaxBufferedOutput = DefaultMaxBufferedOutput
	}
	if o.MaxLineBytes <= 0 {
		o.MaxLineBytes = DefaultMaxLineBytes
	}
	if o.CloseTimeout <= 0 {
		o.CloseTimeout = DefaultCloseTimeout
	}
}

// Client is a connection to an airlock JSON-RPC server: an `airlock rpc`
// subprocess (Start), a detached sandbox's control socket (Dial) or any
// transport (NewClient). It is safe for concurrent use; calls from many
// goroutines are in flight at once.
type Client struct {
	opts Options
	r    io.Reader
	w    io.Writer
	// closeTransport closes what Close closes first: the subprocess's
	// stdin, or the whole connection.
	closeTransport func() error
	// closeReader unblocks the reader loop when the server keeps its end
	// open; nil when closeTransport already does.
	closeReader func() error

	wlock      chan struct{} // held while a line is written
	nextID     atomic.Int64
	maxMessage atomic.Int64 // the server's max_message_bytes, once known

	mu      sync.Mutex
	pending map[int64]pendingCall
	err     error // set once the client has failed or closed
	closing bool

	events  chan Event
	dropped atomic.Uint64
	done    chan struct{} // closed when the reader loop has ended

	// The subprocess, for Start.
	cmd     *exec.Cmd
	exited  chan struct{} // closed when cmd.Wait has returned
	exitErr error
	tail    *tailBuffer

	// cancelling counts the cancel requests being sent (cancelExec):
	// Close lets them reach the server before it ends the input, on
	// which the server finishes what is still running. cancelIdle, when
	// not nil, is closed once none is.
	cancelMu   sync.Mutex
	cancelling int
	cancelIdle chan struct{}

	closeOnce sync.Once
	closeErr  error
}

// pendingCall receives the responses to one request id.
type pendingCall interface {
	// deliver hands over a response and reports whether it was the last
	// one for its id. It runs on the reader loop and must not block.
	deliver(m *message) bool
	// fail ends the call because the client is gone.
	fail(err error)
}

// message is any line from the server.
type message struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *wireError      `json:"error"`

	// cut is, for a large response whose call takes it that way, the
	// text of each of its result's strings that the call names
	// (simpleCall.cut), cut out of the line (Result holds "" there
	// instead). They have no escapes: their text is their value. line is
	// the line they are part of, which nothing else refers to: the call
	// may recycle it (jsonblob.Recycle) once done.
	cut  [][]byte
	line []byte
}

// wireError is api.Error with its data kept raw.
type wireError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data"`
}

func (e *wireError) toError(method string) *Error {
	return &Error{Method: method, Code: e.Code, Message: e.Message, Data: e.Data}
}

// Start runs `<binary> rpc` and returns a client driving it. ctx bounds
// only the start (up to the first "info" answer); the subprocess lives
// until Close. Its sandboxes die with it: Close, or the exit of this
// program, ends them.
func Start(ctx context.Context, opts Options) (*Client, error) {
	bin, err := findBinary(opts.Binary)
	if err != nil {
		return nil, err
	}
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("airlock client: creating stdin pipe: %w", err)
	}
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		stdinR.Close()
		stdinW.Close()
		return nil, fmt.Errorf("airlock client: creating stdout pipe: %w", err)
	}
	tail := &tailBuffer{}
	cmd := exec.Command(bin, append([]string{"rpc"}, opts.Args...)...)
	cmd.Env = opts.Env
	cmd.Stdin = stdinR
	cmd.Stdout = stdoutW
	cmd.Stderr = &stderrWriter{tail: tail, w: opts.Stderr}
	// Processes the server leaves behind must not hold Wait up forever.
	cmd.WaitDelay = 2 * time.Second
	err = cmd.Start()
	stdinR.Close()
	stdoutW.Close()
	if err != nil {
		stdinW.Close()
		stdoutR.Close()
		return nil, fmt.Errorf("airlock client: starting %s rpc: %w", bin, err)
	}

	c := newClient(stdoutR, stdinW, opts)
	c.closeTransport = stdinW.Close
	c.closeReader = stdoutR.Close
	c.cmd = cmd
	c.exited = make(chan struct{})
	c.tail = tail
	go func() {
		c.exitErr = cmd.Wait()
		close(c.exited)
	}()
	go c.readLoop()

	info, err := c.Info(ctx)
	if err == nil && info.Protocol != api.Version {
		err = fmt.Errorf("the server speaks protocol %d and this client protocol %d: use a client and an airlock binary of the same release", info.Protocol, api.Version)
	}
	if err != nil {
		cmd.Process.Kill()
		c.Close()
		if ce, ok := err.(*closedError); ok && ce.cause != nil {
			// It exited: its status and stderr say why.
			return nil, fmt.Errorf("airlock client: %w", ce.cause)
		}
		return nil, fmt.Errorf("airlock client: starting %s rpc: %w", bin, err)
	}
	return c, nil
}

// findBinary resolves Options.Binary.
func findBinary(bin string) (string, error) {
	if bin == "" {
		bin = os.Getenv("AIRLOCK_BIN")
	}
	if bin != "" {
		return bin, nil
	}
	p, err := exec.LookPath("airlock")
	if err != nil {
		return "", fmt.Errorf("airlock client: no airlock executable: set Options.Binary or $AIRLOCK_BIN, or put airlock on PATH (%w)", err)
	}
	return p, nil
}

// NewClient returns a client speaking JSON-RPC lines over rw. Close closes
// rw. Options.Binary, Args, Env and Stderr do not apply.
func NewClient(rw io.ReadWriteCloser, opts Options) *Client {
	c := newClient(rw, rw, opts)
	c.closeTransport = rw.Close
	go c.readLoop()
	return c
}

func newClient(r io.Reader, w io.Writer, opts Options) *Client {
	opts.setDefaults()
	return &Client{
		opts:    opts,
		r:       r,
		w:       w,
		wlock:   make(chan struct{}, 1),
		pending: make(map[int64]pendingCall),
		events:  make(chan Event, opts.EventBuffer),
		done:    make(chan struct{}),
	}
}

// Close ends the session. For a subprocess it closes the session's
// sandboxes when calls are still in flight (the server answers what is
// in flight before it ends), then its stdin, which makes the server tear
// all its sandboxes down, and waits for it to exit (at most
// Options.CloseTimeout, then kills it). For a connection it
// closes the connection; a detached sandbox keeps running. Calls still in
// flight fail with ErrClosed, and the Events channel is closed. Close
// reports an unclean exit of the subprocess.
func (c *Client) Close() error {
	c.closeOnce.Do(func() { c.closeErr = c.close() })
	return c.closeErr
}

func (c *Client) close() error {
	// A command whose context ended is cancelled in the background; an
	// input that ends before the cancel is sent leaves the server
	// waiting for the command. Those whose context has ended are
	// cancelled now, in case the context's callback has not run yet.
	c.mu.Lock()
	var ended []*Process
	for _, pc := range c.pending {
		if p, ok := pc.(*Process); ok && p.ctx.Err() != nil {
			ended = append(ended, p)
		}
	}
	c.mu.Unlock()
	for _, p := range ended {
		p.abandon(p.ctx.Err())
	}
	c.cancelMu.Lock()
	idle := c.cancelIdle
	c.cancelMu.Unlock()
	if idle != nil {
		select {
		case <-idle:
		case <-time.After(cancelFlushTimeout):
		}
	}
	if c.cmd != nil {
		c.closeSandboxes()
	}
	c.mu.Lock()
	c.closing = true
	c.mu.Unlock()
	c.closeTransport()
	timeout := c.opts.CloseTimeout
	if c.cmd == nil {
		select {
		case <-c.done:
			return nil
		case <-time.After(timeout):
			c.failAll(&closedError{errClosedByCaller})
			return fmt.Errorf("airlock client: the transport's Read did not return within %v of Close", timeout)
		}
	}
	killed := false
	select {
	case <-c.exited:
	case <-time.After(timeout):
		c.cmd.Process.Kill()
		<-c.exited
		killed = true
	}
	// The server has exited: the reader drains what it wrote and sees EOF,
	// unless something it started still holds its stdout.
	select {
	case <-c.done:
	case <-time.After(2 * time.Second):
		c.closeReader()
		<-c.done
	}
	if killed {
		return fmt.Errorf("airlock client: %s rpc did not exit within %v of closing its stdin; killed it, and its sandboxes with it", c.cmd.Path, timeout)
	}
	if c.exitErr != nil {
		return fmt.Errorf("airlock client: %s rpc exited with %v%s", c.cmd.Path, c.exitErr, c.tail.report())
	}
	return nil
}

// Done is closed when the client has stopped: after Close, or when the
// server went away or broke the protocol. Err then says why.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err returns nil while the client works, and then an error matching
// ErrClosed that says why it stopped.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Events returns the channel of events sent by the server (after
// Subscribe). It is buffered (Options.EventBuffer) and never slows the
// client down: an event that arrives while it is full is dropped and
// counted in DroppedEvents. It is closed when the client stops.
func (c *Client) Events() <-chan Event { return c.events }

// DroppedEvents returns how many events were dropped because the Events
// channel was full.
func (c *Client) DroppedEvents() uint64 { return c.dropped.Load() }

// Subscribe asks the server for events of the given types (EventExec,
// EventFile, EventNetwork, EventLifecycle); none means all. Read them from
// Events.
func (c *Client) Subscribe(ctx context.Context, types ...string) error {
	return c.call(ctx, api.MethodSubscribe, api.SubscribeParams{Types: types}, nil)
}

// Unsubscribe stops events.
func (c *Client) Unsubscribe(ctx context.Context) error {
	return c.call(ctx, api.MethodUnsubscribe, struct{}{}, nil)
}

// Info describes the server and its sandboxes.
func (c *Client) Info(ctx context.Context) (*api.InfoResult, error) {
	var info api.InfoResult
	if err := c.call(ctx, api.MethodInfo, struct{}{}, &info); err != nil {
		return nil, err
	}
	if info.MaxMessageBytes > 0 {
		c.maxMessage.Store(info.MaxMessageBytes)
	}
	return &info, nil
}

// Create starts a sandbox. It lives until Sandbox.Close, or until the
// client closes.
func (c *Client) Create(ctx context.Context, params api.CreateParams) (*Sandbox, error) {
	var res api.CreateResult
	if err := c.call(ctx, api.MethodCreate, params, &res); err != nil {
		return nil, err
	}
	return &Sandbox{c: c, id: res.SandboxID, created: &res}, nil
}

// PoolCreate starts a pool of the session: params.Size sandboxes of the
// configuration params describe, kept ready. A Create whose params name
// only the pool (api.CreateParams{Pool: id}) takes one at once. The pool
// lives until PoolClose, or until the client closes.
func (c *Client) PoolCreate(ctx context.Context, params api.PoolCreateParams) (string, error) {
	var res api.PoolCreateResult
	if err := c.call(ctx, api.MethodPoolCreate, params, &res); err != nil {
		return "", err
	}
	return res.PoolID, nil
}

// PoolClose closes a pool: the sandboxes waiting in it are closed, those
// taken from it keep running.
func (c *Client) PoolClose(ctx context.Context, poolID string) error {
	return c.call(ctx, api.MethodPoolClose, api.PoolParams{PoolID: poolID}, nil)
}

// PoolList lists the session's pools, oldest first.
func (c *Client) PoolList(ctx context.Context) ([]api.PoolInfo, error) {
	var res api.PoolListResult
	if err := c.call(ctx, api.MethodPoolList, struct{}{}, &res); err != nil {
		return nil, err
	}
	return res.Pools, nil
}

// Sandbox returns a handle for an existing sandbox of the session. An
// empty id means the session's only sandbox (the usual case on a control
// socket).
func (c *Client) Sandbox(id string) *Sandbox { return &Sandbox{c: c, id: id} }

// Call sends one request and decodes its result into result (unless
// result is nil); params are encoded with encoding/json (nil sends null).
// Errors from the server are *Error. If ctx ends first, Call stops waiting
// and returns ctx.Err(); for "exec" it also cancels the command. Methods
// that answer with several responses (exec_stream, attach) need
// Sandbox.Start and Sandbox.Attach.
//
// A request longer than the server's max_message_bytes is refused before
// it is sent (with an error matching ErrLimitExceeded) once the limit is
// known: Start and Dial ask for it, and so does every Info. The server
// could only answer such a line without an id, so the call would wait
// until ctx ends.
func (c *Client) Call(ctx context.Context, method string, params, result any) error {
	if method == api.MethodExecStream || method == api.MethodAttach {
		return fmt.Errorf("airlock client: %s answers with several responses; use Sandbox.Start or Sandbox.Attach", method)
	}
	return c.call(ctx, method, params, result)
}

// simpleCall waits for the one response of a request. It takes a large
// response with its result's members named in cut cut out
// (message.cut).
type simpleCall struct {
	ch  chan callResult
	cut []string
}

type callResult struct {
	msg *message
	err error
}

func (s *simpleCall) deliver(m *message) bool { s.ch <- callResult{msg: m}; return true }
func (s *simpleCall) fail(err error)          { s.ch <- callResult{err: err} }

func (c *Client) call(ctx context.Context, method string, params, result any) error {
	raw, err := json.Marshal(params)
	if err != nil {
		return fmt.Errorf("airlock %s: encoding params: %w", method, err)
	}
	_, _, err = c.roundTrip(ctx, method, appendParams(requestHead(nil, method, len(raw)), raw), raw, result, nil)
	return err
}

// roundTrip sends a request line (see requestHead) and decodes the result
// of its response into result (unless nil). params are the encoded
// params when the request is an exec (nil otherwise), to cancel it. With
// cut, a large response may come with those members of its result cut
// out: it returns their strings' text, in the order of cut, and result
// then holds "" there; and the line they are part of, which the caller
// may recycle once done with it.
func (c *Client) roundTrip(ctx context.Context, method string, line []byte, params json.RawMessage, result any, cut []string) (texts [][]byte, buf []byte, err error) {
	sc := &simpleCall{ch: make(chan callResult, 1), cut: cut}
	id, err := c.sendLine(ctx, method, line, sc)
	if err != nil {
		return nil, nil, err
	}
	select {
	case r := <-sc.ch:
		if r.err != nil {
			return nil, nil, r.err
		}
		if r.msg.Error != nil {
			return nil, nil, r.msg.Error.toError(method)
		}
		if result != nil {
			if err := json.Unmarshal(r.msg.Result, result); err != nil {
				jsonblob.Recycle(r.msg.line)
				return nil, nil, fmt.Errorf("airlock %s: decoding the server's result: %w", method, err)
			}
		}
		return r.msg.cut, r.msg.line, nil
	case <-ctx.Done():
		c.forget(id)
		if method == api.MethodExec {
			c.cancelExec(id, sandboxIDOf(params))
		}
		return nil, nil, ctx.Err()
	}
}

// sandboxIDOf returns the sandbox_id of encoded params.
func sandboxIDOf(params json.RawMessage) string {
	var p api.SandboxParams
	json.Unmarshal(params, &p)
	return p.SandboxID
}

// A request line is written as
//
//	{"jsonrpc":"2.0","method":<method>,"params":<params>,"id":<id>}
//
// with the id last, so that the params can be written straight into the
// line before the request gets its id.

// requestHead starts a request line in buf (nil: a new one), with room
// for n bytes of params.
func requestHead(buf []byte, method string, n int) []byte {
	m, _ := json.Marshal(method)
	line := slices.Grow(buf[:0], len(m)+n+64)
	line = append(line, `{"jsonrpc":"2.0","method":`...)
	line = append(line, m...)
	return append(line, `,"params":`...)
}

// appendParams adds encoded params to a request line.
func appendParams(line []byte, params json.RawMessage) []byte {
	return append(line, params...)
}

// sendLine registers p for a new id and writes the request line (head
// and params), which it ends with the id.
func (c *Client) sendLine(ctx context.Context, method string, line []byte, p pendingCall) (int64, error) {
	id := c.nextID.Add(1)
	return id, c.sendLineAs(ctx, id, method, line, p)
}

// sendAs registers p for id and writes the request.
func (c *Client) sendAs(ctx context.Context, id int64, method string, params json.RawMessage, p pendingCall) error {
	return c.sendLineAs(ctx, id, method, appendParams(requestHead(nil, method, len(params)), params), p)
}

// sendLineAs registers p for id and writes the request line (head and
// params), which it ends with id.
func (c *Client) sendLineAs(ctx context.Context, id int64, method string, line []byte, p pendingCall) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	line = append(line, `,"id":`...)
	line = strconv.AppendInt(line, id, 10)
	line = append(line, "}\n"...)
	// The server answers a line over its limit with an error it cannot
	// give the request's id (it does not parse the line), so such a call
	// would never get an answer: refuse it here.
	if limit := c.maxMessage.Load(); limit > 0 && int64(len(line)-1) > limit {
		return fmt.Errorf("airlock %s: the request is %d bytes, more than the server accepts (max_message_bytes %d): send less per request (a large file in parts), or raise the server's limit: %w",
			method, len(line)-1, limit, ErrLimitExceeded)
	}

	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return err
	}
	c.pending[id] = p
	c.mu.Unlock()
	if err := c.writeLine(ctx, line); err != nil {
		c.forget(id)
		return err
	}
	return nil
}

// forget drops the pending call of id: later responses are ignored.
func (c *Client) forget(id int64) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
}

// writeLine writes one whole line; lines never interleave.
func (c *Client) writeLine(ctx context.Context, line []byte) error {
	select {
	case c.wlock <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-c.done:
		return c.Err()
	}
	_, err := c.w.Write(line)
	<-c.wlock
	if err == nil {
		return nil
	}
	c.mu.Lock()
	closing := c.closing
	c.mu.Unlock()
	if closing {
		return &closedError{errClosedByCaller}
	}
	// The reader usually knows better why the server went away (its exit
	// status and last words).
	select {
	case <-c.done:
		return c.Err()
	case <-time.After(2 * time.Second):
		return &closedError{fmt.Errorf("writing to the server: %w", err)}
	}
}

// closeSandboxes closes every sandbox of the session when calls are in
// flight: at the end of its input the server answers them before it
// ends, and a command that runs on would keep it from ending. It gives
// up after a few seconds (Close then waits, and kills the server).
func (c *Client) closeSandboxes() {
	c.mu.Lock()
	busy := len(c.pending) > 0
	c.mu.Unlock()
	if !busy {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := c.Info(ctx)
	if err != nil {
		return
	}
	var wg sync.WaitGroup
	for _, sb := range info.Sandboxes {
		wg.Go(func() {
			_ = c.call(ctx, api.MethodClose, api.SandboxParams{SandboxID: sb.SandboxID}, nil)
		})
	}
	wg.Wait()
}

// cancelExec asks the server, in the background, to kill the command
// started by request id.
func (c *Client) cancelExec(id int64, sandboxID string) {
	c.sendCancel(id, sandboxID, c.holdCancel())
}

// holdCancel counts a cancel request about to be sent, which Close waits
// for, until release is called.
func (c *Client) holdCancel() (release func()) {
	c.cancelMu.Lock()
	c.cancelling++
	if c.cancelIdle == nil {
		c.cancelIdle = make(chan struct{})
	}
	c.cancelMu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			c.cancelMu.Lock()
			if c.cancelling--; c.cancelling == 0 {
				close(c.cancelIdle)
				c.cancelIdle = nil
			}
			c.cancelMu.Unlock()
		})
	}
}

// sendCancel sends the cancel request that release holds, in the
// background.
func (c *Client) sendCancel(id int64, sandboxID string, release func()) {
	go func() {
		defer release()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c.call(ctx, api.MethodCancel, api.ExecRefParams{SandboxID: sandboxID, ID: idJSON(id)}, nil)
	}()
}

// cancelFlushTimeout bounds how long Close waits for the cancel requests
// being sent.
const cancelFlushTimeout = 5 * time.Second

func idJSON(id int64) json.RawMessage { return strconv.AppendInt(nil, id, 10) }

// readLoop decodes the server's lines until the connection ends.
func (c *Client) readLoop() {
	lr := lineio.NewReader(c.r, int64(c.opts.MaxLineBytes))
	var protoErr, readErr error
	for {
		line, _, own, err := lr.Next()
		if len(bytes.TrimSpace(line)) > 0 {
			var kept bool
			if kept, protoErr = c.handleLine(line); protoErr != nil {
				break
			}
			if own && !kept {
				// Nothing refers to it: keep its memory for the next one.
				jsonblob.Recycle(line)
			}
		}
		if err != nil {
			if errors.Is(err, lineio.ErrTooLong) {
				protoErr = fmt.Errorf("protocol error: the server sent a line longer than %d bytes (Options.MaxLineBytes)", c.opts.MaxLineBytes)
			} else if err != io.EOF {
				readErr = err
			}
			break
		}
	}
	if protoErr != nil {
		// Stop the server too: nothing it says can be trusted any more.
		c.closeTransport()
		if c.closeReader != nil {
			c.closeReader()
		}
	}
	c.failAll(c.closedCause(protoErr, readErr))
	close(c.events)
	close(c.done)
}

// closedCause says why the reader loop ended.
func (c *Client) closedCause(protoErr, readErr error) error {
	c.mu.Lock()
	closing := c.closing
	c.mu.Unlock()
	switch {
	case protoErr != nil:
		return &closedError{protoErr}
	case closing:
		return &closedError{errClosedByCaller}
	case c.cmd != nil:
		// Its stdout closed: the server is exiting. Wait a little for its
		// status, which explains more than EOF.
		select {
		case <-c.exited:
			status := "exited with status 0"
			if c.exitErr != nil {
				status = "exited with " + c.exitErr.Error()
			}
			return &closedError{fmt.Errorf("%s rpc %s%s", c.cmd.Path, status, c.tail.report())}
		case <-time.After(5 * time.Second):
			return &closedError{fmt.Errorf("%s rpc closed its stdout%s", c.cmd.Path, c.tail.report())}
		}
	case readErr != nil:
		return &closedError{fmt.Errorf("reading from the server: %w", readErr)}
	default:
		return &closedError{errors.New("the server closed the connection")}
	}
}

// failAll stops the client with err: every pending call fails with it.
func (c *Client) failAll(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	pending := c.pending
	c.pending = map[int64]pendingCall{}
	c.mu.Unlock()
	for _, p := range pending {
		p.fail(err)
	}
}

// handleLine routes one line; an error is a protocol error. The line is
// not used once it returns, unless kept: a call took its content (see
// cutResponse).
func (c *Client) handleLine(line []byte) (kept bool, err error) {
	if len(line) >= contentCutMin && c.cutResponse(line) {
		return true, nil
	}
	return false, c.routeLine(line)
}

// routeLine decodes and routes one line; an error is a protocol error.
func (c *Client) routeLine(line []byte) error {
	if id, stream, data, ok := parseChunk(line); ok {
		c.mu.Lock()
		pc := c.pending[id]
		c.mu.Unlock()
		switch p := pc.(type) {
		case nil:
			return nil // abandoned
		case *Process:
			if !p.deliverOutput(stream, data) {
				c.forgetCall(id, p)
			}
			return nil
		}
		// Not a stream: the generic path decides what to make of it.
	}
	var m message
	if err := json.Unmarshal(line, &m); err != nil {
		return fmt.Errorf("protocol error: the server sent a line that is not a JSON-RPC message (%v): %q", err, truncate(line, 200))
	}
	if m.Method != "" {
		if m.Method == api.NotifyEvent && isNull(m.ID) {
			c.event(m.Params)
		}
		// Other notifications (exec.output is for "notifications" mode,
		// which this client does not use) and requests from the server
		// are not part of what this client speaks.
		return nil
	}
	id, ok := parseID(m.ID)
	if !ok {
		// A response to no request of ours (for example an error about a
		// line the server could not parse): nothing waits for it.
		return nil
	}
	c.mu.Lock()
	p := c.pending[id]
	c.mu.Unlock()
	if p == nil {
		return nil // abandoned
	}
	if p.deliver(&m) {
		c.forgetCall(id, p)
	}
	return nil
}

// contentCutMin is the length of line from which a response may have
// its result's content cut out rather than be decoded whole.
const contentCutMin = 256 << 10

// cutResponse hands a large response to a call that takes members of its
// result cut out (read_file's content, exec's output), with those
// undecoded: most of the line is their base64, which encoding/json would
// go over several times. It reports false, having done nothing, for any
// other line; jsonblob.Cut cuts only when the outcome is certain to be
// the same.
func (c *Client) cutResponse(line []byte) bool {
	// Which call the line answers, from its id, found by cutting the
	// first member a call may take.
	for _, first := range []string{"content", "stdout"} {
		rest, raw, ok := jsonblob.Cut(line, "result", first)
		if !ok {
			continue
		}
		var m message
		if json.Unmarshal(rest, &m) != nil || m.Method != "" {
			return false
		}
		id, ok := parseID(m.ID)
		if !ok {
			return false
		}
		c.mu.Lock()
		p := c.pending[id]
		c.mu.Unlock()
		sc, ok := p.(*simpleCall)
		if !ok || len(sc.cut) == 0 || sc.cut[0] != first {
			return false
		}
		texts := [][]byte{raw}
		for _, key := range sc.cut[1:] {
			if rest, raw, ok = jsonblob.Cut(rest, "result", key); !ok {
				return false
			}
			texts = append(texts, raw)
		}
		if len(sc.cut) > 1 {
			m = message{}
			if json.Unmarshal(rest, &m) != nil {
				return false
			}
		}
		m.cut, m.line = texts, line
		if p.deliver(&m) {
			c.forgetCall(id, p)
		}
		return true
	}
	return false
}

// forgetCall drops the pending call of id if it is still p.
func (c *Client) forgetCall(id int64, p pendingCall) {
	c.mu.Lock()
	if c.pending[id] == p {
		delete(c.pending, id)
	}
	c.mu.Unlock()
}

// event hands an event to Events without ever blocking.
func (c *Client) event(params json.RawMessage) {
	ev, err := decodeEvent(params)
	if err != nil {
		return
	}
	select {
	case c.events <- ev:
	default:
		c.dropped.Add(1)
	}
}

func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || string(raw) == "null"
}

func parseID(raw json.RawMessage) (int64, bool) {
	s := string(bytes.TrimSpace(raw))
	if len(s) >= 2 && s[0] == '"' {
		s = s[1 : len(s)-1]
	}
	id, err := strconv.ParseInt(s, 10, 64)
	return id, err == nil
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

// tailBuffer keeps the end of the server's stderr.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

const tailBytes = 4 << 10

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*tailBytes {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-tailBytes:]...)
	}
	return len(p), nil
}

// report returns the last lines, prefixed for an error message, or "".
func (t *tailBuffer) report() string {
	if t == nil {
		return ""
	}
	t.mu.Lock()
	b := t.buf
	if len(b) > tailBytes {
		b = b[len(b)-tailBytes:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	s := string(bytes.TrimSpace(b))
	t.mu.Unlock()
	if s == "" {
		return ""
	}
	return "; its stderr ended with:\n" + s
}

// stderrWriter copies the server's stderr to the caller's writer and the
// tail.
type stderrWriter struct {
	tail *tailBuffer
	w    io.Writer
}

func (s *stderrWriter) Write(p []byte) (int, error) {
	s.tail.Write(p)
	if s.w != nil {
		s.w.Write(p) // a failing log writer must not stop the server
	}
	return len(p), nil
}
