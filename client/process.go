package client

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"

	"github.com/airlock-sandbox/airlock/api"
)

// Stream indexes.
const (
	stdoutStream = 0
	stderrStream = 1
)

func streamName(i int) string {
	if i == stderrStream {
		return "stderr"
	}
	return "stdout"
}

// Process is a command started with Sandbox.Start or Sandbox.StartWith,
// or the main command of a detached sandbox reached with Sandbox.Attach.
//
// Its output arrives through the client's single reader, which never
// waits for a Process: each Process buffers what it received and was not
// read yet, up to Options.MaxBufferedOutput (64 MiB by default) for both
// streams together. Read Stdout and Stderr while the command runs (or let
// StartWith copy them). If the bound is exceeded the command is cancelled,
// what was buffered is dropped, and reads and Wait fail with an error
// matching ErrOutputOverflow.
//
// The methods of a Process are safe for concurrent use.
type Process struct {
	c         *Client
	id        int64
	method    string
	sandboxID string
	ctx       context.Context

	stdout, stderr io.Reader
	stdin          *stdinWriter
	copiers        sync.WaitGroup

	mu       sync.Mutex
	cond     *sync.Cond
	bufs     [2]chunkQueue
	discard  [2]bool // output of this stream is not kept
	buffered int64
	limit    int64
	stopCtx  func() bool
	ended    bool
	dropped  bool // the buffers were dropped: reads fail at once
	res      *Result
	err      error // why the command ended abnormally
	readErr  error // what reads return once drained; nil means io.EOF
	copyErr  error
	done     chan struct{}
}

func (c *Client) newProcess(ctx context.Context, method, sandboxID string) *Process {
	p := &Process{
		c:         c,
		id:        c.nextID.Add(1),
		method:    method,
		sandboxID: sandboxID,
		ctx:       ctx,
		limit:     c.opts.MaxBufferedOutput,
		done:      make(chan struct{}),
	}
	p.cond = sync.NewCond(&p.mu)
	return p
}

// Start runs a command with streaming output ("exec_stream") and returns
// at once; read its output from Stdout and Stderr, and its outcome from
// Wait. With params.OpenStdin or params.TTY, Stdin is its input.
//
// ctx bounds the command's life: if ctx ends before the command, the
// command is killed, and reads and Wait return ctx.Err(). A command that
// cannot be started is reported by Wait (an *Error matching
// ErrCommandFailed).
func (s *Sandbox) Start(ctx context.Context, params api.ExecParams) (*Process, error) {
	return s.start(ctx, params, nil, nil, nil, false)
}

// StartWith is Start with the output copied to stdout and stderr (nil
// discards a stream) and, when stdin is not nil, the input copied from
// stdin (then closed) by goroutines of the Process. The same bound on
// buffered output applies when a writer is slow. Wait returns once the
// output is copied; it reports a failing writer (after cancelling the
// command), but not a failing stdin, whose copy it does not wait for.
// Stdout and Stderr return nil for such a Process, and Stdin too when
// stdin is not nil.
func (s *Sandbox) StartWith(ctx context.Context, params api.ExecParams, stdin io.Reader, stdout, stderr io.Writer) (*Process, error) {
	return s.start(ctx, params, stdin, stdout, stderr, true)
}

func (s *Sandbox) start(ctx context.Context, params api.ExecParams, stdin io.Reader, stdout, stderr io.Writer, with bool) (*Process, error) {
	s.setID(&params.SandboxID)
	params.Mode = api.ModeResponses
	if stdin != nil {
		params.OpenStdin = true
	}
	p := s.c.newProcess(ctx, api.MethodExecStream, params.SandboxID)
	if params.OpenStdin || params.TTY {
		p.stdin = &stdinWriter{p: p}
	}
	writers := [2]io.Writer{stdout, stderr}
	if with {
		p.discard = [2]bool{stdout == nil, stderr == nil}
	} else {
		p.stdout = &pipeReader{p: p, i: stdoutStream}
		p.stderr = &pipeReader{p: p, i: stderrStream}
	}
	if err := p.launch(params); err != nil {
		return nil, err
	}
	if with {
		for i, w := range writers {
			if w != nil {
				p.copiers.Add(1)
				go p.copyOut(i, w)
			}
		}
		if stdin != nil {
			in := p.stdin
			p.stdin = nil
			go copyIn(in, stdin)
		}
	}
	return p, nil
}

// copyIn sends what r yields to a command's stdin as soon as it comes,
// up to 256 KiB a request, then closes it.
func copyIn(w *stdinWriter, r io.Reader) {
	defer w.Close()
	buf := make([]byte, 256<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Attach follows the main command of a detached sandbox (the "attach"
// method, on its control socket): its output from now on, its result when
// it ends. Stdin writes to the command. Ending ctx or calling Cancel
// detaches (Wait then returns ctx.Err(), or an *Error matching
// ErrCancelled) and the command goes on. A command that outputs faster
// than it is read detaches the same way, with ErrOutputOverflow.
func (s *Sandbox) Attach(ctx context.Context) (*Process, error) {
	p := s.c.newProcess(ctx, api.MethodAttach, s.id)
	p.stdout = &pipeReader{p: p, i: stdoutStream}
	p.stderr = &pipeReader{p: p, i: stderrStream}
	p.stdin = &stdinWriter{p: p}
	if err := p.launch(api.AttachParams{SandboxID: s.id, Mode: api.ModeResponses}); err != nil {
		return nil, err
	}
	return p, nil
}

// launch sends the request and ties the command to p.ctx.
func (p *Process) launch(params any) error {
	raw, err := json.Marshal(params)
	if err != nil {
		return fmt.Errorf("airlock %s: encoding params: %w", p.method, err)
	}
	if err := p.c.sendAs(p.ctx, p.id, p.method, raw, p); err != nil {
		return err
	}
	if p.ctx.Done() != nil {
		stop := context.AfterFunc(p.ctx, func() { p.abandon(p.ctx.Err()) })
		p.mu.Lock()
		ended := p.ended
		p.stopCtx = stop
		p.mu.Unlock()
		if ended {
			stop()
		}
	}
	return nil
}

// abandon stops listening because ctx ended, and cancels the request:
// that kills a command, and ends an attach.
func (p *Process) abandon(err error) {
	// Counted before the call is forgotten and Wait returns, so that a
	// Close meanwhile waits for the cancel to be sent.
	release := p.c.holdCancel()
	p.c.forget(p.id)
	if p.finish(nil, err, err, false) {
		p.c.sendCancel(p.id, p.sandboxID, release)
	} else {
		release()
	}
}

// finish ends the process once; it reports whether this call ended it.
func (p *Process) finish(res *Result, err, readErr error, drop bool) bool {
	p.mu.Lock()
	if p.ended {
		p.mu.Unlock()
		return false
	}
	p.ended = true
	p.res, p.err, p.readErr = res, err, readErr
	if drop {
		p.bufs = [2]chunkQueue{}
		p.buffered = 0
		p.dropped = true
	}
	stop := p.stopCtx
	close(p.done)
	p.cond.Broadcast()
	p.mu.Unlock()
	if stop != nil {
		stop()
	}
	return true
}

// fail implements pendingCall: the client is gone.
func (p *Process) fail(err error) { p.finish(nil, err, err, false) }

// deliver implements pendingCall: one chunk, the final result or an error.
func (p *Process) deliver(m *message) bool {
	if m.Error != nil {
		p.finish(nil, m.Error.toError(p.method), nil, false)
		return true
	}
	var r api.ExecResult
	err := json.Unmarshal(m.Result, &r)
	var out [2][]byte
	if err == nil {
		out[stdoutStream], err = decodeBase64("stdout", r.Stdout)
	}
	if err == nil {
		out[stderrStream], err = decodeBase64("stderr", r.Stderr)
	}
	if err != nil {
		err = fmt.Errorf("airlock %s: protocol error in a response: %w", p.method, err)
		if p.finish(nil, err, err, false) {
			p.c.cancelExec(p.id, p.sandboxID)
		}
		return true
	}

	if !p.deliverOutput(stdoutStream, out[stdoutStream]) || !p.deliverOutput(stderrStream, out[stderrStream]) {
		return true
	}
	if r.Done {
		r.Stdout, r.Stderr = "", ""
		res, _ := newResult(&r)
		p.finish(res, nil, nil, false)
		return true
	}
	return false
}

// deliverOutput buffers output of stream i. It reports false when the
// process has ended (or ends now, its buffer overflowing): the rest of
// what the server sends for it is to be ignored.
func (p *Process) deliverOutput(i int, b []byte) bool {
	p.mu.Lock()
	if p.ended {
		p.mu.Unlock()
		return false
	}
	if len(b) == 0 || p.discard[i] {
		p.mu.Unlock()
		return true
	}
	p.bufs[i].push(b)
	p.buffered += int64(len(b))
	overflow := p.buffered > p.limit
	p.cond.Broadcast()
	p.mu.Unlock()
	if overflow {
		err := fmt.Errorf("%w: more than %s buffered; read Stdout and Stderr while the command runs (or use StartWith), or raise Options.MaxBufferedOutput",
			ErrOutputOverflow, formatBytes(p.limit))
		if p.finish(nil, err, err, true) {
			p.c.cancelExec(p.id, p.sandboxID)
		}
		return false
	}
	return true
}

func formatBytes(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + " MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.FormatInt(n>>10, 10) + " KiB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}

// Stdout returns the command's standard output (with a TTY, all its
// output). Reads return io.EOF once the command has ended and the output
// is drained, or the error that cut the output short (ErrClosed,
// ErrOutputOverflow, ctx.Err()). It is nil for a StartWith process.
func (p *Process) Stdout() io.Reader { return p.stdout }

// Stderr returns the command's standard error, like Stdout.
func (p *Process) Stderr() io.Reader { return p.stderr }

// Stdin returns the command's standard input, or nil when it was started
// without params.OpenStdin or params.TTY (or StartWith copies it). Each
// Write is sent in "stdin" requests of at most 1 MiB and returns once the
// server has taken them; Close closes the command's stdin.
func (p *Process) Stdin() io.WriteCloser {
	if p.stdin == nil {
		return nil
	}
	return p.stdin
}

// Done is closed when the command has ended (its output may still be
// buffered).
func (p *Process) Done() <-chan struct{} { return p.done }

// Wait waits for the command to end (and, for StartWith, its output to
// be copied) and returns its result. The Result's Stdout and Stderr are
// empty: the output went through the streams. The Result is nil whenever
// the error is not.
func (p *Process) Wait() (*Result, error) {
	<-p.done
	p.copiers.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return nil, p.err
	}
	if p.copyErr != nil {
		return nil, p.copyErr
	}
	return p.res, nil
}

// Signal sends a signal to the command, by name ("TERM", "SIGINT") or
// number as the sandbox's kernel numbers them ("9").
func (p *Process) Signal(ctx context.Context, sig string) error {
	var raw json.RawMessage
	if n, err := strconv.Atoi(sig); err == nil {
		raw = strconv.AppendInt(nil, int64(n), 10)
	} else {
		raw, _ = json.Marshal(sig)
	}
	return p.c.call(ctx, api.MethodSignal, api.SignalParams{SandboxID: p.sandboxID, ID: idJSON(p.id), Signal: raw}, nil)
}

// Resize changes the window size of a command started with a TTY.
func (p *Process) Resize(ctx context.Context, rows, cols uint16) error {
	return p.c.call(ctx, api.MethodResize, api.ResizeParams{SandboxID: p.sandboxID, ID: idJSON(p.id), Rows: rows, Cols: cols}, nil)
}

// Cancel kills the command and every process it started; Wait then
// returns the result (KilledBy "signal") or the server's error. For an
// Attach, Cancel detaches and the command goes on.
func (p *Process) Cancel(ctx context.Context) error {
	return p.c.call(ctx, api.MethodCancel, api.ExecRefParams{SandboxID: p.sandboxID, ID: idJSON(p.id)}, nil)
}

// take removes up to len(b) bytes (or, with b nil, the whole first chunk)
// of stream i, waiting for some. At the end it returns the read error.
func (p *Process) take(i int, b []byte) ([]byte, int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		q := &p.bufs[i]
		if len(q.chunks) > 0 {
			if b == nil {
				c := q.pop()
				p.buffered -= int64(len(c))
				return c, len(c), nil
			}
			n := q.read(b)
			p.buffered -= int64(n)
			return nil, n, nil
		}
		if p.ended || p.dropped {
			if p.readErr != nil {
				return nil, 0, p.readErr
			}
			return nil, 0, io.EOF
		}
		if b != nil && len(b) == 0 {
			return nil, 0, nil
		}
		p.cond.Wait()
	}
}

// copyOut copies stream i to w until the command ends.
func (p *Process) copyOut(i int, w io.Writer) {
	defer p.copiers.Done()
	for {
		c, _, err := p.take(i, nil)
		if err != nil {
			return // Wait reports why
		}
		if _, err := w.Write(c); err != nil {
			p.mu.Lock()
			p.discard[i] = true
			p.buffered -= p.bufs[i].size()
			p.bufs[i] = chunkQueue{}
			if p.copyErr == nil {
				p.copyErr = fmt.Errorf("airlock %s: copying %s: %w", p.method, streamName(i), err)
			}
			ended := p.ended
			p.mu.Unlock()
			if !ended {
				p.c.cancelExec(p.id, p.sandboxID)
			}
			return
		}
	}
}

// pipeReader reads one output stream of a Process.
type pipeReader struct {
	p *Process
	i int
}

func (r *pipeReader) Read(b []byte) (int, error) {
	if b == nil {
		b = []byte{}
	}
	_, n, err := r.p.take(r.i, b)
	return n, err
}

// chunkQueue holds received output in the chunks it arrived in.
type chunkQueue struct{ chunks [][]byte }

func (q *chunkQueue) push(b []byte) { q.chunks = append(q.chunks, b) }

func (q *chunkQueue) pop() []byte {
	c := q.chunks[0]
	q.chunks[0] = nil
	q.chunks = q.chunks[1:]
	return c
}

func (q *chunkQueue) read(b []byte) int {
	n := copy(b, q.chunks[0])
	if n == len(q.chunks[0]) {
		q.pop()
	} else {
		q.chunks[0] = q.chunks[0][n:]
	}
	return n
}

func (q *chunkQueue) size() int64 {
	var n int64
	for _, c := range q.chunks {
		n += int64(len(c))
	}
	return n
}

// stdinWriter sends a Process's input in "stdin" requests.
type stdinWriter struct {
	p      *Process
	mu     sync.Mutex // keeps writes in order
	closed bool
}

func (w *stdinWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return 0, fmt.Errorf("airlock stdin: write after Close: %w", os.ErrClosed)
	}
	n := 0
	for len(b) > 0 {
		c := b[:min(len(b), maxStdinChunk)]
		if err := w.send(api.StdinParams{Data: base64.StdEncoding.EncodeToString(c)}); err != nil {
			return n, err
		}
		n += len(c)
		b = b[len(c):]
	}
	return n, nil
}

// Close closes the command's stdin. Closing twice is no error.
func (w *stdinWriter) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	return w.send(api.StdinParams{Close: true})
}

func (w *stdinWriter) send(params api.StdinParams) error {
	p := w.p
	select {
	case <-p.done:
		return fmt.Errorf("airlock stdin: %w", os.ErrProcessDone)
	default:
	}
	params.SandboxID = p.sandboxID
	params.ID = idJSON(p.id)
	err := p.c.call(p.ctx, api.MethodStdin, params, nil)
	if err != nil {
		select {
		case <-p.done:
			if !errors.Is(err, ErrClosed) {
				return fmt.Errorf("airlock stdin: %w", os.ErrProcessDone)
			}
		default:
		}
	}
	return err
}
