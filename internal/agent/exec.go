package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/creack/pty"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
)

// drainGrace is how long output may keep arriving after the command itself
// exits, from background processes that inherited its stdout. Past it the
// exec completes and those processes keep running detached from the stream.
// What the command wrote before it exited is not bound by it: that is sent
// whole, however long the host takes to read it.
const drainGrace = 250 * time.Millisecond

// stdinQueue bounds host stdin chunks waiting for the command to read them.
const stdinQueue = 16

func (s *server) exec(ctx context.Context, c *agentproto.Conn, st net.Conn, er *agentproto.ExecRequest) error {
	if er == nil || len(er.Argv) == 0 || er.Argv[0] == "" {
		return replyErr(c, agentproto.Errorf(agentproto.CodeInvalid, "exec needs a command"))
	}
	var cred *Cred
	env := s.env
	if er.User != "" {
		uc, err := s.credFor(er.User)
		if err != nil {
			return replyErr(c, agentproto.Errorf(agentproto.CodeStart, err.Error()))
		}
		cred = &uc
		// As login would set them; the command's own env still wins.
		user := []string{"HOME=" + uc.Home}
		if uc.Name != "" {
			user = append(user, "USER="+uc.Name, "LOGNAME="+uc.Name)
		}
		env = mergeEnv(env, user)
	}
	env = mergeEnv(env, er.Env)
	if er.TTY && lookupEnv(env, "TERM") == "" {
		env = append(env, "TERM=xterm-256color")
	}
	sp, err := s.spawnerFor(er.Container)
	if err != nil {
		return replyErr(c, err)
	}
	io_, err := newStdio(er, s.devnull, s.pipes)
	if err != nil {
		return replyErr(c, fmt.Errorf("set up command stdio: %w", err))
	}
	defer io_.close()

	// The limit events while the command runs, where this agent counts
	// them: the host would need a request of its own before and after.
	var before agentproto.LimitEvents
	counted := false
	if s.limits != nil {
		before, err = s.limits()
		counted = err == nil
	}
	start := time.Now()
	child, err := sp.Spawn(SpawnRequest{Argv: er.Argv, Env: env, Dir: er.Dir, TTY: er.TTY, Cred: cred}, io_.childFiles)
	io_.closeChildEnds()
	if err != nil {
		return c.Write(agentproto.Msg{K: agentproto.KErr, Err: startError(err)})
	}

	var wmu sync.Mutex
	send := func(m agentproto.Msg) error {
		wmu.Lock()
		defer wmu.Unlock()
		return c.Write(m)
	}
	if !er.NoStarted {
		if err := send(agentproto.Msg{K: agentproto.KStarted, Sig: child.Pid()}); err != nil {
			_ = child.KillTree()
			return err
		}
	}

	var pumps sync.WaitGroup
	exited := &exitClock{done: make(chan struct{})}
	for _, p := range io_.outputs() {
		pumps.Add(1)
		go func() {
			defer pumps.Done()
			pump(p.f, p.kind, send, exited)
		}()
	}

	var timedOut atomic.Bool
	if er.Timeout > 0 {
		t := time.AfterFunc(er.Timeout, func() {
			timedOut.Store(true)
			_ = child.KillTree()
		})
		defer t.Stop()
	}

	inDone := make(chan struct{})
	go func() {
		defer close(inDone)
		s.input(c, child, io_)
	}()

	select {
	case <-child.Done():
	case <-inDone:
		// The host went away or cancelled: kill the command and finish.
		_ = child.KillTree()
		<-child.Done()
		exited.abandoned = true
	case <-ctx.Done():
		_ = child.KillTree()
		<-child.Done()
		exited.abandoned = true
	}

	// The pumps send what the command left in its pipes, then what
	// arrives within drainGrace; the exit goes after it.
	exited.at = time.Now()
	close(exited.done)
	io_.stopOutputs()
	pumps.Wait()

	stt := child.Status()
	ex := &agentproto.Exit{
		CPUTime:  stt.CPUTime,
		PeakRSS:  stt.PeakRSS,
		Duration: time.Since(start),
		TimedOut: timedOut.Load(),
	}
	switch ws := stt.Status; {
	case ws.Exited():
		ex.Code = ws.ExitStatus()
	case ws.Signaled():
		ex.Signal = int(ws.Signal())
		ex.Code = 128 + ex.Signal
	}
	if counted {
		if after, err := s.limits(); err == nil {
			ex.Limits = &agentproto.LimitEvents{
				OOMKills:      after.OOMKills - min(before.OOMKills, after.OOMKills),
				PidsLimitHits: after.PidsLimitHits - min(before.PidsLimitHits, after.PidsLimitHits),
			}
		}
	}
	err = send(agentproto.Msg{K: agentproto.KExit, Exit: ex})
	go s.pipes.refill()
	return err
}

// input applies host frames (stdin, signals, resizes) until the stream ends.
func (s *server) input(c *agentproto.Conn, child Child, io_ *stdio) {
	q := make(chan []byte, stdinQueue)
	var writerDone sync.WaitGroup
	if w := io_.stdinW; w != nil {
		writerDone.Add(1)
		go func() {
			defer writerDone.Done()
			for b := range q {
				if b == nil {
					if io_.tty {
						_, _ = w.Write([]byte{4}) // ^D: end of input on a terminal
						continue
					}
					w.Close()
					continue
				}
				if _, err := w.Write(b); err != nil {
					// The command stopped reading; drop further input.
					continue
				}
			}
		}()
	}
	defer func() {
		close(q)
		writerDone.Wait()
	}()
	closed := false
	for {
		var m agentproto.Msg
		if err := c.Read(&m); err != nil {
			return
		}
		switch m.K {
		case agentproto.KStdin:
			if io_.stdinW != nil && !closed {
				q <- m.Data
			}
		case agentproto.KStdinClose:
			if io_.stdinW != nil && !closed {
				closed = true
				q <- nil
			}
		case agentproto.KSignal:
			if m.Sig > 0 && m.Sig < 65 {
				_ = child.Signal(syscall.Signal(m.Sig))
			}
		case agentproto.KResize:
			if io_.tty && m.Rows > 0 && m.Cols > 0 {
				_ = pty.Setsize(io_.master, &pty.Winsize{Rows: m.Rows, Cols: m.Cols})
			}
		case agentproto.KKill:
			_ = child.KillTree()
		}
	}
}

// pump sends what the command writes to f until f ends. Once the command
// has exited (its time comes on exited, and f's reads are interrupted),
// the pump sends all that f then holds, which the command wrote before it
// exited, however slowly the host takes it; then output that arrives
// within drainGrace of the exit, from processes the command left behind.
func pump(f *os.File, kind agentproto.Kind, send func(agentproto.Msg) error, exited *exitClock) {
	buf := make([]byte, 32<<10)
	forward := func(b []byte) bool { return send(agentproto.Msg{K: kind, Data: b}) == nil }
	draining := false
	for {
		n, err := f.Read(buf)
		if n > 0 && !forward(buf[:n]) {
			return
		}
		switch {
		case err == nil:
			continue
		case draining || !errors.Is(err, os.ErrDeadlineExceeded):
			return // EOF, EIO on a pty whose slave is closed, or past the grace
		}
		// The command has exited and no read is under way: what f holds
		// now was written before that, or just after.
		draining = true
		<-exited.done
		if exited.abandoned {
			return // nobody wants the rest
		}
		_ = f.SetReadDeadline(time.Time{})
		for left := pending(f); left > 0; {
			n, err := f.Read(buf[:min(left, len(buf))])
			if n > 0 && !forward(buf[:n]) {
				return
			}
			if err != nil {
				return
			}
			left -= n
		}
		_ = f.SetReadDeadline(exited.at.Add(drainGrace))
	}
}

// exitClock tells the pumps when the command exited, and whether the host
// still wants its output: the fields are set before done is closed.
type exitClock struct {
	done      chan struct{}
	at        time.Time
	abandoned bool
}

// startError turns a failure to start into a protocol error with a message
// that says what to do.
func startError(err error) *agentproto.Error {
	var pe *agentproto.Error
	if errors.As(err, &pe) {
		return pe
	}
	return agentproto.Errorf(agentproto.CodeStart, err.Error())
}

type output struct {
	f    *os.File
	kind agentproto.Kind
}

// stdio holds both ends of a command's standard streams.
type stdio struct {
	tty        bool
	master     *os.File // tty mode
	stdinW     io.WriteCloser
	stdoutR    *os.File
	stderrR    *os.File
	childFiles [3]*os.File
	owned      []*os.File // child ends, closed after spawn
}

// newStdio creates the command's standard streams. devnull (read and
// written), shared by all commands, is stdin when the host sends none,
// and stdout and stderr when it wants no output; output pipes come from
// pipes.
func newStdio(er *agentproto.ExecRequest, devnull *os.File, pipes *pipePool) (*stdio, error) {
	s := &stdio{tty: er.TTY}
	if er.TTY {
		m, sl, err := pty.Open()
		if err != nil {
			return nil, fmt.Errorf("open pty: %w", err)
		}
		rows, cols := er.Rows, er.Cols
		if rows == 0 || cols == 0 {
			rows, cols = 24, 80
		}
		_ = pty.Setsize(m, &pty.Winsize{Rows: rows, Cols: cols})
		pm, err := pollable(m)
		if err != nil {
			m.Close()
			sl.Close()
			return nil, err
		}
		s.master = pm
		s.stdinW = pm
		s.stdoutR = pm
		s.childFiles = [3]*os.File{sl, sl, sl}
		s.owned = []*os.File{sl}
		return s, nil
	}
	if er.Stdin {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		s.stdinW = w
		s.childFiles[0] = r
		s.owned = append(s.owned, r)
	} else {
		s.childFiles[0] = devnull
	}
	if er.NoOutput {
		// Nothing to read: the command writes to /dev/null itself.
		s.childFiles[1], s.childFiles[2] = devnull, devnull
		return s, nil
	}
	for i, dst := range []**os.File{&s.stdoutR, &s.stderrR} {
		r, w, err := pipes.get()
		if err != nil {
			s.close()
			return nil, err
		}
		*dst = r
		s.childFiles[i+1] = w
		s.owned = append(s.owned, w)
	}
	return s, nil
}

// pollable returns a non-blocking duplicate of f registered with the
// runtime poller, so reads can be interrupted by a deadline, and closes f.
func pollable(f *os.File) (*os.File, error) {
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	var nfd int
	var derr error
	if err := rc.Control(func(fd uintptr) {
		nfd, derr = syscall.Dup(int(fd))
	}); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, fmt.Errorf("dup pty: %w", derr)
	}
	syscall.CloseOnExec(nfd)
	if err := syscall.SetNonblock(nfd, true); err != nil {
		syscall.Close(nfd)
		return nil, err
	}
	return os.NewFile(uintptr(nfd), f.Name()), nil
}

func (s *stdio) outputs() []output {
	var out []output
	if s.stdoutR != nil {
		out = append(out, output{s.stdoutR, agentproto.KStdout})
	}
	if s.stderrR != nil {
		out = append(out, output{s.stderrR, agentproto.KStderr})
	}
	return out
}

func (s *stdio) closeChildEnds() {
	for _, f := range s.owned {
		f.Close()
	}
	s.owned = nil
}

// stopOutputs makes pending output reads return now.
func (s *stdio) stopOutputs() {
	for _, o := range s.outputs() {
		_ = o.f.SetReadDeadline(time.Now())
	}
}

func (s *stdio) close() {
	s.closeChildEnds()
	if s.tty {
		s.master.Close()
		return
	}
	if s.stdinW != nil {
		s.stdinW.Close()
	}
	for _, f := range []*os.File{s.stdoutR, s.stderrR} {
		if f != nil {
			f.Close()
		}
	}
}

// mergeEnv overlays extra on base; later entries win.
func mergeEnv(base, extra []string) []string {
	idx := map[string]int{}
	out := make([]string, 0, len(base)+len(extra))
	for _, kv := range append(append([]string{}, base...), extra...) {
		k := kv
		for i := 0; i < len(kv); i++ {
			if kv[i] == '=' {
				k = kv[:i]
				break
			}
		}
		if i, ok := idx[k]; ok {
			out[i] = kv
			continue
		}
		idx[k] = len(out)
		out = append(out, kv)
	}
	return out
}

func lookupEnv(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if len(env[i]) > len(key) && env[i][len(key)] == '=' && env[i][:len(key)] == key {
			return env[i][len(key)+1:]
		}
	}
	return ""
}
