package lifecycle

import (
	"encoding/base64"
	"errors"
	"io"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/outlog"
)

// attachBuffer bounds the chunks waiting for one attached client. A client
// that reads slower than the command writes misses chunks rather than
// holding memory; the log keeps them.
const attachBuffer = 256

// MainCommand is the main command of a detached sandbox. Its output goes
// to the sandbox's log file and to every attached client. It implements
// rpc.Main.
type MainCommand struct {
	mu      sync.Mutex
	log     *outlog.Writer
	subs    map[int]chan api.ExecChunk
	nextSub int
	proc    *airlock.Process
	ended   bool

	done chan struct{}
	res  *airlock.ExecResult
	err  error
}

// NewMainCommand returns a main command that is not started yet.
func NewMainCommand() *MainCommand {
	return &MainCommand{subs: map[int]chan api.ExecChunk{}, done: make(chan struct{})}
}

// SetLog opens (creating, 0600) the log the output is appended to, with
// its index of times and streams (see outlog). Past outlog.MaxLogBytes,
// output still reaches attached clients but is no longer logged.
func (m *MainCommand) SetLog(path string) error {
	f, err := outlog.Create(path)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.log != nil {
		m.log.Close()
	}
	m.log = f
	return nil
}

// Stdout and Stderr are the writers to give the command.
func (m *MainCommand) Stdout() io.Writer { return outputWriter{m, false} }

// Stderr is the command's standard error; see Stdout.
func (m *MainCommand) Stderr() io.Writer { return outputWriter{m, true} }

type outputWriter struct {
	m      *MainCommand
	stderr bool
}

func (w outputWriter) Write(b []byte) (int, error) {
	w.m.output(b, w.stderr)
	return len(b), nil
}

func (m *MainCommand) output(b []byte, stderr bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.log != nil {
		stream := outlog.Stdout
		if stderr {
			stream = outlog.Stderr
		}
		m.log.Write(stream, b, time.Now())
	}
	if len(m.subs) == 0 {
		return
	}
	var c api.ExecChunk
	enc := base64.StdEncoding.EncodeToString(b)
	if stderr {
		c.Stderr = enc
	} else {
		c.Stdout = enc
	}
	for _, ch := range m.subs {
		select {
		case ch <- c:
		default: // a slow client misses this chunk
		}
	}
}

// Started hands over the running command and waits for it in the
// background.
func (m *MainCommand) Started(p *airlock.Process) {
	m.mu.Lock()
	m.proc = p
	m.mu.Unlock()
	go func() {
		res, err := p.Wait()
		m.finish(res, err)
	}()
}

// Failed records that the command could not be started.
func (m *MainCommand) Failed(err error) { m.finish(nil, err) }

func (m *MainCommand) finish(res *airlock.ExecResult, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ended {
		return
	}
	m.ended = true
	m.res, m.err = res, err
	for id, ch := range m.subs {
		close(ch)
		delete(m.subs, id)
	}
	if m.log != nil {
		m.log.Close()
	}
	close(m.done)
}

// Done is closed when the command has ended.
func (m *MainCommand) Done() <-chan struct{} { return m.done }

// Attach streams the command's output from now on; the channel closes
// when the command ends or stop is called.
func (m *MainCommand) Attach() (<-chan api.ExecChunk, func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ch := make(chan api.ExecChunk, attachBuffer)
	if m.ended {
		close(ch)
		return ch, func() {}
	}
	id := m.nextSub
	m.nextSub++
	m.subs[id] = ch
	return ch, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if c, ok := m.subs[id]; ok {
			close(c)
			delete(m.subs, id)
		}
	}
}

var errNotStarted = errors.New("the main command has not started")

// WriteStdin writes to the command's standard input.
func (m *MainCommand) WriteStdin(b []byte) error {
	m.mu.Lock()
	p := m.proc
	m.mu.Unlock()
	if p == nil {
		return errNotStarted
	}
	return p.WriteStdin(b)
}

// CloseStdin closes the command's standard input.
func (m *MainCommand) CloseStdin() error {
	m.mu.Lock()
	p := m.proc
	m.mu.Unlock()
	if p == nil {
		return errNotStarted
	}
	return p.CloseStdin()
}

// Signal sends sig to the command.
func (m *MainCommand) Signal(sig syscall.Signal) error {
	m.mu.Lock()
	p := m.proc
	m.mu.Unlock()
	if p == nil {
		return errNotStarted
	}
	return p.Signal(sig)
}

// Resize changes the size of the command's terminal; a command started
// without one refuses.
func (m *MainCommand) Resize(rows, cols uint16) error {
	m.mu.Lock()
	p := m.proc
	m.mu.Unlock()
	if p == nil {
		return errNotStarted
	}
	return p.Resize(rows, cols)
}

// Wait blocks until the command has ended and returns its result.
func (m *MainCommand) Wait() (*airlock.ExecResult, error) {
	<-m.done
	return m.res, m.err
}
