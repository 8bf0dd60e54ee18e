package rpc

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/jsonblob"
)

// maxTimeoutSeconds bounds timeout_seconds to what a time.Duration holds.
const maxTimeoutSeconds = 1e9

// exec runs a command and answers with its buffered output.
func (ss *session) exec(ctx context.Context, j *job) (any, error) {
	return ss.runExec(ctx, j, false)
}

// execStream runs a command and streams its output: as responses with the
// request's id, or as "exec.output" notifications; the final response has
// done true.
func (ss *session) execStream(ctx context.Context, j *job) (any, error) {
	return ss.runExec(ctx, j, true)
}

func (ss *session) runExec(ctx context.Context, j *job, stream bool) (any, error) {
	method := j.req.method
	var p api.ExecParams
	if e := decodeParams(method, j.req.params, &p); e != nil {
		return nil, e
	}
	cmd, stdin, e := execCommand(method, &p, stream)
	if e != nil {
		return nil, e
	}
	sbe, err := ss.resolve(p.SandboxID)
	if err != nil {
		return nil, err
	}
	if stream {
		notify := p.Mode == api.ModeNotifications
		cmd.Stdout = &chunkWriter{out: ss.out, id: j.req.id, notify: notify}
		cmd.Stderr = &chunkWriter{out: ss.out, id: j.req.id, notify: notify, stderr: true}
	}
	j.releaseLine()
	if p.Detach {
		return ss.startDetached(ctx, sbe, cmd)
	}
	start := time.Now()
	if !stream && !p.OpenStdin && !p.TTY {
		return ss.runBuffered(ctx, j, sbe, cmd, start)
	}
	proc, err := sbe.sb.Start(ctx, cmd)
	if err != nil {
		return nil, execError(ctx, sbe, cmd.Argv, err)
	}
	t := &execTarget{p: proc, tty: p.TTY, openStdin: p.OpenStdin}
	if j.op != nil {
		j.op.started(sbe.sb.ID(), t)
	}
	// The request's own stdin goes first; "stdin" requests wait for it,
	// signals and cancels do not.
	switch {
	case p.OpenStdin && len(stdin) > 0:
		go func() {
			if err := proc.WriteStdin(stdin); err != nil {
				ss.log.Debug("write initial stdin", "err", err)
			}
			if j.op != nil {
				j.op.stdinWritten()
			}
		}()
	case j.op != nil:
		j.op.stdinWritten()
	}
	res, err := proc.Wait()
	return execOutcome(ctx, j, sbe, cmd.Argv, start, res, err, stream)
}

// startDetached starts a command that outlives its request and session:
// nothing reads its output, and only its end (the exec event), its
// timeout or the sandbox's end stops it.
func (ss *session) startDetached(ctx context.Context, sbe *sandboxEntry, cmd airlock.Command) (any, error) {
	cmd.DiscardOutput = true
	proc, err := sbe.sb.Start(context.WithoutCancel(ctx), cmd)
	if err != nil {
		return nil, execError(ctx, sbe, cmd.Argv, err)
	}
	return api.ExecDetachedResult{Pid: proc.Pid()}, nil
}

// runBuffered runs a command whose output is buffered and whose stdin is
// given whole (or none), the common case, the way the embed API's Run
// does: the agent does not announce the start, and the command is
// collected on this goroutine. Launch keeps a handle for signals.
func (ss *session) runBuffered(ctx context.Context, j *job, sbe *sandboxEntry, cmd airlock.Command, start time.Time) (any, error) {
	if j.op == nil {
		// A notification: nothing can refer to it.
		res, err := sbe.sb.Run(ctx, cmd)
		return execOutcome(ctx, j, sbe, cmd.Argv, start, res, err, false)
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	proc, err := sbe.sb.Launch(runCtx, cmd)
	if err != nil {
		return nil, execError(ctx, sbe, cmd.Argv, err)
	}
	t := &runTarget{p: proc, cancelRun: cancel, cancelled: &j.op.cancelled, done: make(chan struct{})}
	j.op.started(sbe.sb.ID(), t)
	j.op.stdinWritten()
	res, err := proc.Wait()
	close(t.done)
	return execOutcome(ctx, j, sbe, cmd.Argv, start, res, err, false)
}

// execOutcome is the answer to an exec that ended with res or err.
func execOutcome(ctx context.Context, j *job, sbe *sandboxEntry, argv []string, start time.Time, res *airlock.ExecResult, err error, stream bool) (any, error) {
	if ctx.Err() != nil {
		// The session ended and killed the command: the request was
		// cancelled, whatever the agent managed to report.
		return nil, commonError(ctx, sbe, ctx.Err())
	}
	if err != nil {
		if j.op == nil || !j.op.cancelled.Load() {
			return nil, execError(ctx, sbe, argv, err)
		}
		// Cancelled: the whole tree was killed and the agent's stream
		// closed before it could report the exit.
		res = &airlock.ExecResult{ExitCode: 128 + int(syscall.SIGKILL), Signal: int(syscall.SIGKILL), KilledBy: airlock.KilledBySignal, Duration: time.Since(start)}
	}
	if stream {
		return execResult(res, true), nil
	}
	return bufferedResult(res), nil
}

// bufferedOutput is an exec result with its buffered output: the output
// members are always written (as "", for blobResult to fill) and come
// first; they shadow the embedded result's own.
type bufferedOutput struct {
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
	api.ExecResult
}

// bufferedResult is the answer to an exec whose output was buffered. The
// output goes into the response line as base64 without encoding/json
// going over it, so a large output costs its encoding once, not the
// several copies of a result marshaled whole.
func bufferedResult(res *airlock.ExecResult) *blobResult {
	return &blobResult{
		v:     bufferedOutput{ExecResult: execResult(res, false)},
		blobs: []jsonblob.Blob{{Key: "stdout", Data: res.Stdout}, {Key: "stderr", Data: res.Stderr}},
	}
}

// execCommand checks exec params and builds the command; stdin is the
// decoded input.
func execCommand(method string, p *api.ExecParams, stream bool) (airlock.Command, []byte, *api.Error) {
	var cmd airlock.Command
	switch {
	case p.Command != "" && len(p.Argv) > 0:
		return cmd, nil, invalidParams("%s params: give command (a shell line) or argv (a program and its arguments), not both", method)
	case len(p.Argv) > 0:
		cmd.Argv = p.Argv
	case p.Command != "":
		cmd.Argv = []string{"/bin/sh", "-c", p.Command}
	default:
		return cmd, nil, invalidParams(`%s params: give command (a shell line, e.g. "ls -l") or argv (e.g. ["ls","-l"])`, method)
	}
	if p.TimeoutSeconds < 0 || p.TimeoutSeconds > maxTimeoutSeconds || math.IsNaN(p.TimeoutSeconds) {
		return cmd, nil, invalidParams("%s params: timeout_seconds must be between 0 (none) and %g", method, float64(maxTimeoutSeconds))
	}
	switch {
	case p.Detach && stream:
		return cmd, nil, invalidParams("%s params: detach applies to exec only: a detached command's output is not streamed", method)
	case p.Detach && (p.OpenStdin || p.TTY):
		return cmd, nil, invalidParams("%s params: a detached command has nobody to write its stdin or read its terminal: leave out open_stdin and tty (stdin, given whole, works)", method)
	case !stream && p.Mode != "":
		return cmd, nil, invalidParams("%s params: mode applies to exec_stream only: leave it out", method)
	case p.Mode != "" && p.Mode != api.ModeResponses && p.Mode != api.ModeNotifications:
		return cmd, nil, invalidParams("%s params: mode %s is not %q or %q", method, quote(p.Mode), api.ModeResponses, api.ModeNotifications)
	}
	for k := range p.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return cmd, nil, invalidParams("%s params: environment variable name %s is invalid", method, quote(k))
		}
	}
	stdin, e := decodeBase64(method, "stdin", p.Stdin)
	if e != nil {
		return cmd, nil, e
	}
	cmd.Env = p.Env
	cmd.Dir = p.WorkingDir
	cmd.User = p.User
	cmd.OpenStdin = p.OpenStdin
	cmd.TTY, cmd.Rows, cmd.Cols = p.TTY, p.Rows, p.Cols
	cmd.Timeout = time.Duration(p.TimeoutSeconds * float64(time.Second))
	if !p.OpenStdin && len(stdin) > 0 {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	return cmd, stdin, nil
}

// execResult is res on the wire without its output (bufferedResult adds
// buffered output), marked done when it ends a stream.
func execResult(res *airlock.ExecResult, stream bool) api.ExecResult {
	r := api.ExecResult{
		ExitCode:        res.ExitCode,
		StdoutTruncated: res.StdoutTruncated,
		StderrTruncated: res.StderrTruncated,
		DurationMs:      res.Duration.Milliseconds(),
		CPUTimeMs:       res.CPUTime.Milliseconds(),
		PeakMemoryBytes: res.PeakMemoryBytes,
		Signal:          res.Signal,
		LimitsHit:       res.LimitsHit,
		Done:            stream,
	}
	if res.KilledBy != "" {
		k := string(res.KilledBy)
		r.KilledBy = &k
	}
	return r
}

// chunkWriter sends a command's output as it arrives. A slow client slows
// the command down (the agent's streams have flow control) rather than
// filling memory.
type chunkWriter struct {
	out    *lineWriter
	id     json.RawMessage
	notify bool
	stderr bool
}

func (w *chunkWriter) Write(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	enc := base64.StdEncoding.EncodeToString(b)
	var c api.ExecChunk
	if w.stderr {
		c.Stderr = enc
	} else {
		c.Stdout = enc
	}
	if err := w.send(c); err != nil {
		return 0, err
	}
	return len(b), nil
}

// send sends one chunk.
func (w *chunkWriter) send(c api.ExecChunk) error {
	if w.notify {
		c.ID = w.id
		return w.out.notify(api.NotifyExecOutput, c)
	}
	return w.out.reply(w.id, c)
}

// execTarget is a running exec, for "stdin", "signal", "resize", "cancel".
type execTarget struct {
	p         *airlock.Process
	tty       bool
	openStdin bool

	mu          sync.Mutex
	stdinClosed bool
}

// errNoStdin answers "stdin" for an exec started without open_stdin.
func errNoStdin() error {
	return invalidParams("this exec was started without open_stdin: start it with open_stdin true to write to its stdin, or give all input in its stdin param")
}

// errNoTerminal answers "resize" for an exec started without tty.
func errNoTerminal() error {
	return invalidParams("this exec has no terminal: start it with tty true to resize it")
}

func (t *execTarget) checkStdin() error {
	if !t.openStdin && !t.tty {
		return errNoStdin()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stdinClosed {
		return invalidParams("the stdin of this exec is already closed")
	}
	return nil
}

func (t *execTarget) writeStdin(b []byte) error {
	if err := t.checkStdin(); err != nil {
		return err
	}
	return t.p.WriteStdin(b)
}

func (t *execTarget) closeStdin() error {
	if err := t.checkStdin(); err != nil {
		return err
	}
	t.mu.Lock()
	t.stdinClosed = true
	t.mu.Unlock()
	return t.p.CloseStdin()
}

func (t *execTarget) signal(sig syscall.Signal) error { return t.p.Signal(sig) }

func (t *execTarget) resize(rows, cols uint16) error {
	if !t.tty {
		return errNoTerminal()
	}
	return t.p.Resize(rows, cols)
}

func (t *execTarget) cancel() error { return t.p.Kill() }

func (t *execTarget) ended() bool {
	select {
	case <-t.p.Done():
		return true
	default:
		return false
	}
}

// runTarget is a running exec started by runBuffered: no stdin to write
// to, no terminal, and no handle on the process, only the context of its
// Run. Cancelling that kills the command and every process it started.
type runTarget struct {
	p         *airlock.Process
	cancelRun context.CancelFunc
	cancelled *atomic.Bool // the exec's, set when it is killed on request
	done      chan struct{}
}

func (t *runTarget) writeStdin([]byte) error        { return errNoStdin() }
func (t *runTarget) closeStdin() error              { return errNoStdin() }
func (t *runTarget) resize(rows, cols uint16) error { return errNoTerminal() }

// signal kills the command for KILL, as cancel does, and passes other
// signals to it.
func (t *runTarget) signal(sig syscall.Signal) error {
	if sig == syscall.SIGKILL {
		return t.cancel()
	}
	return t.p.Signal(sig)
}

func (t *runTarget) cancel() error {
	t.cancelled.Store(true)
	t.cancelRun()
	return nil
}

func (t *runTarget) ended() bool {
	select {
	case <-t.done:
		return true
	default:
		return false
	}
}
