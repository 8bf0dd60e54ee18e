//go:build linux

package ctrshim

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/containerd/api/types/task"
	"github.com/containerd/containerd/errdefs"

	"github.com/airlock-sandbox/airlock"
)

// proc is a process of a task: its init process or an exec.
type proc struct {
	c   *container
	id  string // the exec's id; "" for the init process
	cmd airlock.Command
	io  stdio

	mu       sync.Mutex
	state    task.Status
	p        *airlock.Process
	opened   *openedIO
	exitCode uint32
	exitedAt time.Time
	done     chan struct{}
}

func newProc(c *container, id string, cmd airlock.Command, io stdio) *proc {
	return &proc{c: c, id: id, cmd: cmd, io: io, state: task.Status_CREATED, done: make(chan struct{})}
}

func (p *proc) describe() string {
	if p.id == "" {
		return "task " + p.c.id
	}
	return "exec " + p.id + " of task " + p.c.id
}

// eventID is the process's id in containerd's events: the exec's id, or
// the container's for its init process.
func (p *proc) eventID() string {
	if p.id == "" {
		return p.c.id
	}
	return p.id
}

// start opens the process's streams, waiting for them at most as long as
// the request (ctx) lasts, and starts the process in the sandbox for as
// long as life lasts.
func (p *proc) start(ctx, life context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state != task.Status_CREATED {
		return fmt.Errorf("start %s: it has already started: %w", p.describe(), errdefs.ErrFailedPrecondition)
	}
	o, err := p.io.open(ctx)
	if err != nil {
		return fmt.Errorf("start %s: %w", p.describe(), err)
	}
	cmd := p.cmd
	if o.stdin != nil {
		cmd.Stdin = o.stdin
	}
	cmd.Stdout, cmd.Stderr = writer(o.stdout), writer(o.stderr)
	if cmd.TTY {
		cmd.Stderr = nil
	}
	proc, err := p.c.sb.Start(life, cmd)
	if err != nil {
		o.close()
		if se, ok := errors.AsType[*airlock.StartError](err); ok {
			// As runc does: the process could not be executed, and the
			// task ends here with the shell's code for it.
			p.finish(uint32(se.ExitCode()))
		}
		return fmt.Errorf("start %s: %w", p.describe(), err)
	}
	p.p, p.opened, p.state = proc, o, task.Status_RUNNING
	go p.wait()
	return nil
}

// wait collects the process's exit.
func (p *proc) wait() {
	res, err := p.p.Wait()
	code := uint32(255)
	switch {
	case err == nil && res.Signal != 0:
		code = 128 + uint32(res.Signal)
	case err == nil:
		code = uint32(res.ExitCode)
	default:
		// The sandbox ended under the process (it crashed, or was
		// closed): as a process killed with it.
		code = 128 + uint32(syscall.SIGKILL)
	}
	p.mu.Lock()
	p.opened.close()
	p.finish(code)
	p.mu.Unlock()
}

// finish records the exit; p.mu is held.
func (p *proc) finish(code uint32) {
	if p.state == task.Status_STOPPED {
		return
	}
	p.exitCode, p.exitedAt, p.state = code, time.Now(), task.Status_STOPPED
	close(p.done)
}

type procStatus struct {
	state    task.Status
	exitCode uint32
	exitedAt time.Time
}

func (p *proc) status() procStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	return procStatus{p.state, p.exitCode, p.exitedAt}
}

// pidForContainerd is the pid containerd shows: the process's pid in its
// sandbox, or, for a task whose process has not started, the host pid
// of the sandbox.
func (p *proc) pidForContainerd() uint32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.p != nil {
		return uint32(p.p.Pid())
	}
	return uint32(p.c.sb.PID())
}

func (p *proc) running() (*airlock.Process, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state != task.Status_RUNNING {
		return nil, fmt.Errorf("%s is not running: %w", p.describe(), errdefs.ErrNotFound)
	}
	return p.p, nil
}

// signal sends sig to the process; SIGKILL kills it and everything it
// started. A process that has not started is ended by SIGKILL and
// SIGTERM without running (ended says so).
func (p *proc) signal(sig syscall.Signal) (ended bool, err error) {
	p.mu.Lock()
	if p.state == task.Status_CREATED && (sig == syscall.SIGKILL || sig == syscall.SIGTERM) {
		p.finish(128 + uint32(sig))
		p.mu.Unlock()
		return true, nil
	}
	p.mu.Unlock()
	ap, err := p.running()
	if err != nil {
		return false, err
	}
	if sig == syscall.SIGKILL {
		return false, ap.Kill()
	}
	return false, ap.Signal(sig)
}

func (p *proc) resize(rows, cols uint16) error {
	ap, err := p.running()
	if err != nil {
		return err
	}
	return ap.Resize(rows, cols)
}

func (p *proc) closeStdin() {
	p.mu.Lock()
	o := p.opened
	p.mu.Unlock()
	if o != nil {
		o.closeStdin()
	}
}
