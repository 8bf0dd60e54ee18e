package airlock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
	"github.com/airlock-sandbox/airlock/internal/boundary"
)

// Command describes one command to run in a sandbox.
type Command struct {
	// Argv runs a program directly; Argv[0] is looked up in PATH.
	Argv []string
	// Shell runs a command line with /bin/sh -c when Argv is empty.
	Shell string
	// Env is added to the sandbox's environment for this command.
	Env map[string]string
	// Dir is the working directory; default the image's WorkingDir, or
	// /workspace.
	Dir string
	// Stdin, when set, is copied to the command's standard input, which
	// is closed at EOF. Without it the command reads /dev/null, unless
	// OpenStdin is set and the caller writes with Process.WriteStdin.
	Stdin     io.Reader
	OpenStdin bool
	// Stdout and Stderr, when set, receive output as it arrives and the
	// result holds none. Otherwise output is buffered into the result, up
	// to the sandbox's MaxOutputBytes each.
	Stdout io.Writer
	Stderr io.Writer
	// DiscardOutput gives the command /dev/null as its stdout and stderr:
	// nothing is read or sent, and Stdout and Stderr are not used (a
	// command left running by itself, as `docker exec -d` leaves one).
	// Not with TTY.
	DiscardOutput bool
	// TTY runs the command on a pseudo-terminal of Rows x Cols; stderr is
	// merged into stdout.
	TTY        bool
	Rows, Cols uint16
	// Timeout kills the command and every process it started.
	Timeout time.Duration
	// User runs the command as USER, UID, USER:GROUP or UID:GID of the
	// sandbox's /etc/passwd and /etc/group, with the user's groups and
	// home. Default: the image's User, else root.
	User string
	// Container, when set, runs the command in that container of the
	// sandbox (AddContainer): on its root, where Dir defaults to /, and
	// with User a UID or UID:GID.
	Container string
}

// KilledBy says why a command was killed.
type KilledBy string

// Reasons.
const (
	KilledByTimeout KilledBy = "timeout"
	KilledByOOM     KilledBy = "oom"
	KilledBySignal  KilledBy = "signal"
)

// ExecResult is how a command ended.
type ExecResult struct {
	ExitCode        int           `json:"exit_code"`
	Stdout          []byte        `json:"-"`
	Stderr          []byte        `json:"-"`
	StdoutTruncated bool          `json:"stdout_truncated,omitempty"`
	StderrTruncated bool          `json:"stderr_truncated,omitempty"`
	Duration        time.Duration `json:"-"`
	CPUTime         time.Duration `json:"-"`
	PeakMemoryBytes int64         `json:"peak_memory_bytes"`
	// KilledBy is empty when the command exited by itself.
	KilledBy KilledBy `json:"killed_by"`
	// LimitsHit names the sandbox limits that refused something while
	// the command ran: "pids" (a fork failed), "memory" (the OOM killer
	// ran). Empty when cgroups are unavailable or nothing hit a limit.
	LimitsHit []string `json:"limits_hit,omitempty"`
	// Signal is the signal that ended the command, or 0.
	Signal int `json:"signal"`
}

// Exec runs a shell command line and buffers its output.
func (s *Sandbox) Exec(ctx context.Context, command string) (*ExecResult, error) {
	return s.Run(ctx, Command{Shell: command})
}

// Run runs cmd and waits for it.
func (s *Sandbox) Run(ctx context.Context, cmd Command) (*ExecResult, error) {
	p, err := s.start(ctx, cmd, false)
	if err != nil {
		return nil, err
	}
	// Collect on the caller's goroutine: one hand-off fewer per command.
	p.collect(ctx, cmd)
	return p.res, p.err
}

// Process is a running command.
type Process struct {
	s    *Sandbox
	st   *stream
	c    *agentproto.Conn
	wmu  sync.Mutex
	pid  int
	argv []string
	// before holds the limit counters at start, to attribute kills,
	// where the boundary counts them on the host (countsOK); where it
	// cannot, the agent counts them and reports them with the exit.
	before   boundary.Counters
	countsOK bool
	// killed is set when the caller killed the command (SIGKILL, Kill,
	// or a cancelled context), so the kill is not blamed on a limit.
	killed  atomic.Bool
	unwatch func() bool

	done chan struct{}
	res  *ExecResult
	err  error
	// lazy is set by Launch: Wait collects.
	lazy *lazyCollect
}

func (cmd *Command) argv() ([]string, error) {
	if len(cmd.Argv) > 0 {
		return cmd.Argv, nil
	}
	if cmd.Shell != "" {
		return []string{"/bin/sh", "-c", cmd.Shell}, nil
	}
	return nil, errors.New("command is empty: give Argv or Shell")
}

// Launch sends cmd to the sandbox and returns at once, without waiting for
// the agent to report it running, like Run; the caller then calls Wait,
// which collects the command on the caller's goroutine. Meanwhile the
// Process can be signalled, killed and given stdin. Pid is 0, and Done is
// closed only once Wait has collected the command. A command that cannot
// be started is reported by Wait as a *StartError.
func (s *Sandbox) Launch(ctx context.Context, cmd Command) (*Process, error) {
	p, err := s.start(ctx, cmd, false)
	if err != nil {
		return nil, err
	}
	p.lazy = &lazyCollect{ctx: ctx, cmd: cmd}
	return p, nil
}

// lazyCollect is the collection a launched command leaves to Wait.
type lazyCollect struct {
	once sync.Once
	ctx  context.Context
	cmd  Command
}

// Start starts cmd and returns without waiting for it.
func (s *Sandbox) Start(ctx context.Context, cmd Command) (*Process, error) {
	p, err := s.start(ctx, cmd, true)
	if err != nil {
		return nil, err
	}
	go p.collect(ctx, cmd)
	return p, nil
}

// start sends cmd to the agent; the caller then collects its output and
// exit. With started, it waits until the command runs and knows its pid;
// without, a failure to start is reported by collect.
func (s *Sandbox) start(ctx context.Context, cmd Command, started bool) (*Process, error) {
	argv, err := cmd.argv()
	if err != nil {
		return nil, err
	}
	if cmd.DiscardOutput && cmd.TTY {
		return nil, errors.New("a command with DiscardOutput cannot have a TTY: a terminal's output is read from it")
	}
	env := make([]string, 0, len(cmd.Env))
	for k, v := range cmd.Env {
		env = append(env, k+"="+v)
	}
	dir := cmd.Dir
	switch {
	case dir != "":
	case cmd.Container != "":
		dir = "/"
	default:
		dir = s.cfg.workingDir()
	}
	// A container's user is its own, not the sandbox image's.
	user := cmd.User
	if cmd.Container == "" {
		user = s.cfg.commandUser(cmd.User)
	}
	req := agentproto.Request{Op: agentproto.OpExec, Exec: &agentproto.ExecRequest{
		Argv: argv, Env: env, Dir: dir, TTY: cmd.TTY, Rows: cmd.Rows, Cols: cmd.Cols,
		Stdin: cmd.Stdin != nil || cmd.OpenStdin || cmd.TTY, Timeout: cmd.Timeout,
		NoStarted: !started, User: user, Container: cmd.Container, NoOutput: cmd.DiscardOutput,
	}}
	p := &Process{s: s, argv: argv, done: make(chan struct{})}
	p.before, err = s.b.Counters()
	p.countsOK = err == nil
	st, err := s.open(ctx, req)
	if err != nil {
		return nil, err
	}
	p.unwatch = context.AfterFunc(ctx, func() { p.killed.Store(true) })
	c := st.c
	p.st, p.c = st, c
	if started {
		var m agentproto.Msg
		if err := s.readReply(ctx, c, &m); err != nil {
			p.unwatch()
			st.Close()
			return nil, startErr(argv, err)
		}
		if m.K != agentproto.KStarted {
			p.unwatch()
			st.Close()
			return nil, fmt.Errorf("start %s: unexpected reply from agent", argv[0])
		}
		p.pid = m.Sig
	}
	if cmd.Stdin != nil {
		go p.copyStdin(cmd.Stdin)
	}
	return p, nil
}

// StartError is returned when a command could not be started.
type StartError struct {
	Argv []string
	// NotFound is set when the program does not exist (exit code 127 in
	// shells); otherwise it could not be executed (126).
	NotFound bool
	Err      error
}

func (e *StartError) Error() string { return "start command: " + e.Err.Error() }
func (e *StartError) Unwrap() error { return e.Err }

// ExitCode is the conventional shell exit code for the failure.
func (e *StartError) ExitCode() int {
	if e.NotFound {
		return 127
	}
	return 126
}

func startErr(argv []string, err error) error {
	var pe *agentproto.Error
	if errors.As(err, &pe) && (pe.Code == agentproto.CodeStart || pe.Code == agentproto.CodeNotFound) {
		return &StartError{Argv: argv, NotFound: pe.Code == agentproto.CodeNotFound, Err: pe}
	}
	return err
}

// Pid is the command's pid inside the sandbox.
func (p *Process) Pid() int { return p.pid }

func (p *Process) send(m agentproto.Msg) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	return p.c.Write(m)
}

func (p *Process) copyStdin(r io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if p.WriteStdin(buf[:n]) != nil {
				return
			}
		}
		if err != nil {
			_ = p.CloseStdin()
			return
		}
	}
}

// WriteStdin sends data to the command's standard input.
func (p *Process) WriteStdin(b []byte) error {
	for len(b) > 0 {
		n := min(len(b), agentproto.ChunkSize)
		if err := p.send(agentproto.Msg{K: agentproto.KStdin, Data: b[:n]}); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// CloseStdin closes the command's standard input (on a TTY: sends ^D).
func (p *Process) CloseStdin() error { return p.send(agentproto.Msg{K: agentproto.KStdinClose}) }

// Signal sends sig to the command's process group.
func (p *Process) Signal(sig syscall.Signal) error {
	if sig == syscall.SIGKILL {
		p.killed.Store(true)
	}
	return p.send(agentproto.Msg{K: agentproto.KSignal, Sig: int(sig)})
}

// Resize changes the terminal size of a TTY command.
func (p *Process) Resize(rows, cols uint16) error {
	return p.send(agentproto.Msg{K: agentproto.KResize, Rows: rows, Cols: cols})
}

// Kill kills the command and every process it started. Wait then
// returns its result, killed by SIGKILL.
func (p *Process) Kill() error {
	p.killed.Store(true)
	err := p.send(agentproto.Msg{K: agentproto.KKill})
	select {
	case <-p.done:
		return nil // it had ended
	default:
		return err
	}
}

// Done is closed when the command has ended.
func (p *Process) Done() <-chan struct{} { return p.done }

// Wait waits for the command to end.
func (p *Process) Wait() (*ExecResult, error) {
	if l := p.lazy; l != nil {
		l.once.Do(func() { p.collect(l.ctx, l.cmd) })
	}
	<-p.done
	return p.res, p.err
}

// capped is a buffer that keeps at most max bytes.
type capped struct {
	buf       bytes.Buffer
	max       int64
	truncated bool
}

func (c *capped) Write(b []byte) (int, error) {
	room := c.max - int64(c.buf.Len())
	if int64(len(b)) > room {
		c.truncated = true
		if room > 0 {
			c.buf.Write(b[:room])
		}
		return len(b), nil
	}
	return c.buf.Write(b)
}

func (p *Process) collect(ctx context.Context, cmd Command) {
	defer func() {
		p.unwatch()
		if p.res != nil {
			// The command is over and the agent is closing its end: ours
			// need not hold up the result.
			go p.st.Close()
		} else {
			p.st.Close()
		}
		close(p.done)
		p.s.commandEnded()
	}()
	var outBuf, errBuf *capped
	stdout, stderr := cmd.Stdout, cmd.Stderr
	if stdout == nil {
		outBuf = &capped{max: p.s.cfg.MaxOutputBytes}
		stdout = outBuf
	}
	if stderr == nil {
		errBuf = &capped{max: p.s.cfg.MaxOutputBytes}
		stderr = errBuf
	}
	for {
		var m agentproto.Msg
		if err := p.s.readReply(ctx, p.c, &m); err != nil {
			var se *StartError
			if err := startErr(p.argv, err); errors.As(err, &se) {
				p.err = se
				return
			}
			p.err = fmt.Errorf("run %s: %w", p.argv[0], err)
			return
		}
		switch m.K {
		case agentproto.KStdout:
			if _, err := stdout.Write(m.Data); err != nil {
				p.err = fmt.Errorf("write command output: %w", err)
				return
			}
		case agentproto.KStderr:
			if _, err := stderr.Write(m.Data); err != nil {
				p.err = fmt.Errorf("write command output: %w", err)
				return
			}
		case agentproto.KExit:
			if m.Exit == nil {
				p.err = errors.New("agent sent an empty exit status")
				return
			}
			// The command is over: open the next request's stream while
			// the result is looked at, rather than when this one closes.
			p.s.spare.Kick()
			p.res = p.result(m.Exit, outBuf, errBuf)
			p.s.emit(Event{Type: EventExec, Exec: &ExecEvent{Command: p.argv, ExitCode: p.res.ExitCode, DurationMs: p.res.Duration.Milliseconds(), KilledBy: string(p.res.KilledBy)}})
			return
		}
	}
}

func (p *Process) result(x *agentproto.Exit, outBuf, errBuf *capped) *ExecResult {
	r := &ExecResult{
		ExitCode:        x.Code,
		Signal:          x.Signal,
		Duration:        x.Duration,
		CPUTime:         x.CPUTime,
		PeakMemoryBytes: x.PeakRSS,
	}
	if outBuf != nil {
		r.Stdout, r.StdoutTruncated = outBuf.buf.Bytes(), outBuf.truncated
	}
	if errBuf != nil {
		r.Stderr, r.StderrTruncated = errBuf.buf.Bytes(), errBuf.truncated
	}
	var pids, oom bool
	switch {
	case x.Limits != nil:
		pids, oom = x.Limits.PidsLimitHits > 0, x.Limits.OOMKills > 0
	case p.countsOK:
		if now, err := p.s.b.Counters(); err == nil {
			pids, oom = now.PidsLimitHits > p.before.PidsLimitHits, now.OOMKills > p.before.OOMKills
		}
	}
	if pids {
		r.LimitsHit = append(r.LimitsHit, "pids")
	}
	if oom {
		r.LimitsHit = append(r.LimitsHit, "memory")
	}
	switch {
	case x.TimedOut:
		r.KilledBy = KilledByTimeout
	case x.Signal == int(syscall.SIGKILL) && oom && !p.killed.Load():
		r.KilledBy = KilledByOOM
	case x.Signal != 0:
		r.KilledBy = KilledBySignal
	}
	return r
}
