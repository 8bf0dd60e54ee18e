// Package lifecycle ties a running sandbox to the state directory: it
// records the sandbox as running under this supervisor, serves its control
// socket (the same JSON-RPC as `airlock rpc`, scoped to that sandbox) and
// records how it ended. Both kinds of supervisor use it: the process of
// `airlock run --detach` and an `airlock rpc` server.
package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/rpc"
	"github.com/airlock-sandbox/airlock/internal/state"
)

// Options describe the sandbox being supervised.
type Options struct {
	Store *state.Store
	// Kind says who supervises: state.KindDetached or state.KindRPC.
	Kind string
	// Command is the main command, if any, and TTY whether it runs on a
	// terminal.
	Command []string
	TTY     bool
	// Config is the sandbox configuration as the user gave it; secret
	// values are redacted before it is stored.
	Config json.RawMessage
	// Server serves control connections; default: a server that cannot
	// create sandboxes.
	Server *rpc.Server
	// Main is the main command of a detached sandbox, for `attach`.
	Main rpc.Main
	// Events delivers the sandbox's events to control sessions; the
	// sandbox's Config.OnEvent must feed it (an *rpc.Hub).
	Events rpc.EventSource
	// Logger receives diagnostics.
	Logger *slog.Logger
	// Name is the sandbox's name (run --name), if it has one: Begin
	// fails when another sandbox's record has it.
	Name string
}

// Supervision is a sandbox recorded as running under this process.
type Supervision struct {
	id    string
	store *state.Store
	// rec is the record as registered, to write anew if it is damaged.
	rec state.Record
	ln  net.Listener
	log *slog.Logger
	// cancel ends the control sessions; wg waits for them.
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// stopWatching stops recording the sandbox's published ports and
	// pauses.
	stopWatching func()

	endOnce sync.Once
}

// Begin records sb as running under this process and starts serving its
// control socket. Call End once the sandbox has stopped.
func Begin(ctx context.Context, sb *airlock.Sandbox, o Options) (*Supervision, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Server == nil {
		o.Server = rpc.NewServer(rpc.Options{Logger: o.Logger})
	}
	self := os.Getpid()
	start, err := state.ProcessStartTime(self)
	if err != nil {
		return nil, fmt.Errorf("record sandbox %s: %w", sb.ID(), err)
	}
	cfg := sb.Config()
	rec := state.Record{
		ID:         sb.ID(),
		Name:       o.Name,
		Status:     state.StatusRunning,
		Isolation:  string(cfg.Isolation),
		Image:      imageName(cfg),
		Command:    o.Command,
		TTY:        o.TTY,
		CreatedAt:  time.Now(),
		Supervisor: state.Supervisor{PID: self, StartTime: start},
		Kind:       o.Kind,
		Config:     o.Config, // redacted by the store
		Ports:      recordPorts(sb.Ports()),
	}
	if err := o.Store.Register(rec); err != nil {
		return nil, fmt.Errorf("record sandbox %s: %w", sb.ID(), err)
	}
	// Ports published or stopped while it runs (port_forward) are
	// recorded as they change, for airlock port and get.
	stopPorts := sb.WatchPorts(func(ports []airlock.PublishedPort) {
		if err := o.Store.Update(sb.ID(), func(r *state.Record) { r.Ports = recordPorts(ports) }); err != nil {
			o.Logger.Warn("could not record the sandbox's published ports", "sandbox", sb.ID(), "err", err)
		}
	})
	stopPaused := sb.WatchPaused(func(paused bool) {
		if err := o.Store.Update(sb.ID(), func(r *state.Record) { r.Paused = paused }); err != nil {
			o.Logger.Warn("could not record that the sandbox was paused or resumed", "sandbox", sb.ID(), "err", err)
		}
	})
	stopWatching := func() {
		stopPorts()
		stopPaused()
	}
	ln, err := listen(o.Store.Dir(sb.ID()), "ctl.sock")
	if err != nil {
		stopWatching()
		_ = o.Store.Update(sb.ID(), func(r *state.Record) { markEnded(r, state.StatusStopped, "control socket failed", nil) })
		return nil, fmt.Errorf("open the control socket of sandbox %s: %w", sb.ID(), err)
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &Supervision{id: sb.ID(), store: o.Store, rec: rec, ln: ln, log: o.Logger, cancel: cancel, stopWatching: stopWatching}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.serve(sctx, ln, o.Server, rpc.ServeOptions{Shared: []*airlock.Sandbox{sb}, Main: o.Main, Events: o.Events})
	}()
	return s, nil
}

// serve accepts control connections from this user until the listener
// closes, and runs one JSON-RPC session on each.
func (s *Supervision) serve(ctx context.Context, ln net.Listener, srv *rpc.Server, so rpc.ServeOptions) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				s.log.Warn("control socket stopped accepting", "sandbox", s.id, "err", err)
			}
			return
		}
		if err := checkPeer(conn); err != nil {
			s.log.Warn("refused a control connection", "sandbox", s.id, "err", err)
			conn.Close()
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer conn.Close()
			// When the supervision ends, the session stops reading, and
			// answers the requests under way before its connection
			// closes, within answerGrace for a client that does not
			// read.
			stop := context.AfterFunc(ctx, func() {
				_ = conn.SetWriteDeadline(time.Now().Add(answerGrace))
				closeRead(conn)
			})
			defer stop()
			if err := srv.ServeWith(ctx, conn, conn, so); err != nil {
				s.log.Debug("control session ended", "sandbox", s.id, "err", err)
			}
		}()
	}
}

// End stops the control socket and records that the sandbox stopped, why,
// and the main command's exit code when there was one.
func (s *Supervision) End(reason string, exitCode *int) {
	s.end(state.StatusStopped, reason, exitCode)
}

// EndFor is End for a sandbox that has stopped by itself or been closed,
// with its Err: a crash is recorded as crashed with the crash's reason;
// anything else as stopped with reason, or with the error when it says
// more than that the sandbox was closed.
func (s *Supervision) EndFor(err error, reason string) {
	if ce, ok := errors.AsType[*airlock.CrashError](err); ok {
		s.end(state.StatusCrashed, ce.Reason, nil)
		return
	}
	if err != nil && err != airlock.ErrClosed {
		reason = err.Error()
	}
	s.End(reason, nil)
}

func (s *Supervision) end(status, reason string, exitCode *int) {
	s.endOnce.Do(func() {
		s.stopWatching()
		s.ln.Close()
		s.cancel()
		s.wg.Wait()
		_ = os.Remove(s.store.SocketPath(s.id))
		err := s.store.Update(s.id, func(r *state.Record) { markEnded(r, status, reason, exitCode) })
		if errors.Is(err, state.ErrDamaged) {
			// The record was damaged while the sandbox ran: this
			// process knows all of it.
			rec := s.rec
			markEnded(&rec, status, reason, exitCode)
			err = s.store.Replace(rec)
		}
		if err != nil {
			// A full disk, for one: the record still says running, and
			// reads as crashed once this process is gone.
			s.log.Warn("could not record that the sandbox stopped", "sandbox", s.id, "err", err)
		}
		if status == state.StatusStopped && s.rec.Kind == state.KindRPC {
			// Programs make and close sandboxes through airlock rpc by
			// the thousand: the records of those closed cleanly are
			// kept for the last few only, so that the state directory
			// and `airlock ps -a` stay bounded. Crashed ones stay until
			// prune, as other kinds stay until rm.
			if _, err := s.store.TrimStopped(KeptStoppedRPC, state.KindRPC); err != nil {
				s.log.Debug("could not remove the records of older stopped sandboxes", "err", err)
			}
		}
	})
}

// KeptStoppedRPC is how many records of sandboxes made through airlock rpc
// and closed cleanly are kept, the last to stop.
const KeptStoppedRPC = 16

func markEnded(r *state.Record, status, reason string, exitCode *int) {
	r.Status = status
	r.StoppedAt = time.Now()
	r.Reason = reason
	// A stopped sandbox publishes nothing, and is not paused.
	r.Ports = nil
	r.Paused = false
	if exitCode != nil {
		r.ExitCode = exitCode
	}
}

// recordPorts is the record of published ports.
func recordPorts(ports []airlock.PublishedPort) []state.Port {
	if len(ports) == 0 {
		return nil
	}
	out := make([]state.Port, len(ports))
	for i, p := range ports {
		out[i] = state.Port{HostIP: p.HostIP, HostPort: p.HostPort, SandboxPort: p.SandboxPort, Protocol: p.Protocol}
	}
	return out
}

func imageName(c airlock.Config) string {
	switch {
	case c.Image != "" && c.Image != "host":
		return c.Image
	case c.RootFS != "":
		return "rootfs:" + c.RootFS
	case c.Image == "":
		return "host"
	}
	return c.Image
}

// answerGrace bounds how long the answers still due on a control
// connection may take to write once the supervision ends.
const answerGrace = 2 * time.Second

// closeRead ends what a connection reads, keeping what it writes, when
// it can; otherwise it closes it.
func closeRead(c net.Conn) {
	if cr, ok := c.(interface{ CloseRead() error }); ok {
		if cr.CloseRead() == nil {
			return
		}
	}
	c.Close()
}
