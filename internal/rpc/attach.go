package rpc

import (
	"context"
	"sync"
	"syscall"

	"github.com/airlock-sandbox/airlock/api"
)

// attach streams the main command of a detached sandbox from now on, as
// exec_stream streams a command: chunks, then its result with done true.
// "stdin" requests with the attach request's id go to the main command;
// "cancel" detaches.
func (ss *session) attach(ctx context.Context, j *job) (any, error) {
	var p api.AttachParams
	if e := decodeParams(api.MethodAttach, j.req.params, &p); e != nil {
		return nil, e
	}
	if p.Mode != "" && p.Mode != api.ModeResponses && p.Mode != api.ModeNotifications {
		return nil, invalidParams("attach params: mode %s is not %q or %q", quote(p.Mode), api.ModeResponses, api.ModeNotifications)
	}
	main := ss.so.Main
	if main == nil {
		return nil, rpcError(api.CodeUnsupported, "attach works on the control socket of a detached sandbox, which has a main command; here, run commands with exec_stream")
	}
	sbe, err := ss.resolve(p.SandboxID)
	if err != nil {
		return nil, err
	}
	out, stop := main.Attach()
	t := &attachTarget{main: main, stop: stop, stopped: make(chan struct{})}
	defer t.cancel()
	if j.op != nil {
		j.op.started(sbe.sb.ID(), t)
		j.op.stdinWritten()
	}
	w := &chunkWriter{out: ss.out, id: j.req.id, notify: p.Mode == api.ModeNotifications}
	// chunk passes on one chunk, or, once out is closed, gives the
	// answer: the main command's result, or detached.
	chunk := func(c api.ExecChunk, ok bool) (done bool, res any, err error) {
		if !ok {
			if t.detached() {
				return true, nil, detached()
			}
			r, err := main.Wait()
			if err != nil {
				return true, nil, execError(ctx, sbe, nil, err)
			}
			return true, execResult(r, true), nil
		}
		c.ID = nil
		if err := w.send(c); err != nil {
			return true, nil, commonError(ctx, sbe, err)
		}
		return false, nil, nil
	}
	for {
		select {
		case c, ok := <-out:
			if done, res, err := chunk(c, ok); done {
				return res, err
			}
		case <-t.stopped:
			return nil, detached()
		case <-ctx.Done():
			// The session ends, as it does when a detached sandbox's
			// main command has ended: what that command wrote and its
			// result, when they are already here, are still the
			// answer.
			for {
				select {
				case c, ok := <-out:
					if done, res, err := chunk(c, ok); done {
						return res, err
					}
					continue
				default:
				}
				return nil, commonError(ctx, sbe, ctx.Err())
			}
		}
	}
}

func detached() error {
	return rpcError(api.CodeCancelled, "detached: the main command goes on; attach again to follow it")
}

// attachTarget is an attach, for "stdin" and "cancel".
type attachTarget struct {
	main    Main
	stop    func()
	once    sync.Once
	stopped chan struct{}
}

func (t *attachTarget) writeStdin(b []byte) error { return t.main.WriteStdin(b) }
func (t *attachTarget) closeStdin() error         { return t.main.CloseStdin() }

func (t *attachTarget) signal(sig syscall.Signal) error { return t.main.Signal(sig) }

func (t *attachTarget) resize(rows, cols uint16) error { return t.main.Resize(rows, cols) }

func (t *attachTarget) cancel() error {
	t.once.Do(func() {
		close(t.stopped)
		t.stop()
	})
	return nil
}

func (t *attachTarget) detached() bool {
	select {
	case <-t.stopped:
		return true
	default:
		return false
	}
}

func (t *attachTarget) ended() bool { return t.detached() }
