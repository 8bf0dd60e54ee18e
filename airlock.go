// Package airlock runs untrusted code in a sandbox whose isolation boundary
// the caller picks, and owns everything that crosses it.
//
//	sb, err := airlock.Create(ctx, airlock.Config{Resources: airlock.Resources{MemoryMB: 512}})
//	if err != nil { ... }
//	defer sb.Close()
//	res, err := sb.Exec(ctx, "python3 -c 'print(1)'")
//
// The same operations are offered by the airlock CLI and its JSON-RPC
// server, with the same names, defaults and errors.
package airlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
	"github.com/airlock-sandbox/airlock/internal/bootcfg"
	"github.com/airlock-sandbox/airlock/internal/boundary"
	"github.com/airlock-sandbox/airlock/internal/boundary/backends"
	"github.com/airlock-sandbox/airlock/internal/spare"
	"github.com/airlock-sandbox/airlock/policy"
)

// Sandbox is a running sandbox. Its methods are safe for concurrent use.
type Sandbox struct {
	id      string
	cfg     Config
	b       boundary.Sandbox
	net     *network
	vfs     *sandboxVFS
	sess    *yamux.Session
	spare   *spare.Stream
	notes   []string
	log     *slog.Logger
	created time.Time

	closeOnce sync.Once
	closeErr  error
	closed    chan struct{}
	mu        sync.Mutex
	stopCause error
	lifetime  *time.Timer
	// ports are the published ports (ports.go).
	ports ports
	// agentNoUsage is set once the agent said it does not measure
	// usage (measure asks it no more).
	agentNoUsage atomic.Bool
	// firstCommand is called once the next command ends or the sandbox
	// closes (afterFirstCommand).
	firstCommand atomic.Pointer[func()]
	// paused is set while the sandbox is paused (pause.go); pauseMu
	// orders Pause and Resume and guards the watchers.
	paused          atomic.Bool
	pauseMu         sync.Mutex
	pauseWatchers   map[int]func(bool)
	pauseWatcherSeq int
}

// Errors that callers can test for with errors.Is.
var (
	ErrClosed      = errors.New("sandbox is closed")
	ErrUnavailable = boundary.ErrUnavailable
	// ErrCrashed matches the error of a sandbox that ended by itself,
	// because its agent died (killed, or exited) under it; such an error
	// is a *CrashError and also matches ErrClosed.
	ErrCrashed = errors.New("sandbox crashed")
)

// CrashError says why a sandbox crashed. It is the sandbox's Err, and the
// error of every request that was under way or comes after.
type CrashError struct {
	// Reason is what happened, such as "the sandbox's agent was killed
	// by signal 9 (SIGKILL)".
	Reason string
}

func (e *CrashError) Error() string { return "sandbox crashed: " + e.Reason }

// Is makes a crash match ErrCrashed and ErrClosed.
func (e *CrashError) Is(target error) bool { return target == ErrCrashed || target == ErrClosed }

// agentExitGrace bounds how long the host waits, once the agent's end of
// the channel has closed, for the agent to exit: an agent that closes it
// and lives on is killed.
const agentExitGrace = 10 * time.Second

// NewID returns a fresh sandbox id.
func NewID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "sb-" + hex.EncodeToString(b[:])
}

// Create starts a sandbox and returns once its agent is ready to run
// commands. With cfg.Pool set it takes a ready sandbox from that pool
// instead (Pool.Get), and the rest of cfg is ignored.
func Create(ctx context.Context, cfg Config) (*Sandbox, error) {
	if cfg.Pool != nil {
		return cfg.Pool.Get(ctx)
	}
	return CreateWithID(ctx, NewID(), cfg)
}

// CreateWithID is Create with a caller-chosen id ([a-zA-Z0-9_-], 1-64).
func CreateWithID(ctx context.Context, id string, cfg Config) (*Sandbox, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid sandbox config: %w", err)
	}
	if cfg.Pool != nil {
		return nil, fmt.Errorf("invalid sandbox config: a sandbox taken from a pool has the id its pool gave it: use Create (or Pool.Get), not CreateWithID")
	}
	if !ValidID(id) {
		return nil, fmt.Errorf("invalid sandbox id %q: use 1-64 letters, digits, - or _", id)
	}
	c := cfg.withDefaults()
	// Before the start's deadline: a build or a pull takes its time.
	img, err := resolveImage(ctx, &c)
	if err != nil {
		return nil, err
	}
	c.image = img
	sb, err := create(ctx, id, c)
	if err != nil {
		img.release()
		return nil, err
	}
	return sb, nil
}

// startTimeout bounds a sandbox's start, from the first host resource it
// takes to the agent's answer: a start that hangs (an agent that never
// answers) fails with a reason instead.
const startTimeout = time.Minute

// errStartTimeout is the cause of a start that took startTimeout.
var errStartTimeout = fmt.Errorf("the sandbox did not become ready within %s", startTimeout)

// create starts sandbox id from c, which is valid and has its defaults.
func create(ctx context.Context, id string, c Config) (*Sandbox, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeoutCause(ctx, startTimeout, errStartTimeout)
	defer cancel()
	st, err := planStorage(c.DiskMB, c.Resources.MemoryMB, hostMemoryBytes(), canMountDisks())
	if err != nil {
		return nil, fmt.Errorf("invalid sandbox config: %w", err)
	}
	be, err := backends.For(string(c.Isolation))
	if err != nil {
		return nil, err
	}
	nw, err := newNetwork(&c, be)
	if err != nil {
		return nil, err
	}
	var pol *policy.Policy
	if nw != nil {
		pol = nw.policy
	}
	fsys, err := buildVFS(&c, pol, func(e Event) { emitTo(c.OnEvent, id, e) }, !be.BindsHostDirs())
	if err != nil {
		nw.close()
		return nil, fmt.Errorf("invalid sandbox config: %w", err)
	}
	boot := bootcfg.Boot(bootInput(id, &c, st, be.BindsHostDirs()))
	if nw != nil {
		nw.configureBoot(boot)
	}
	spec, err := boundarySpec(id, &c, st)
	if err != nil {
		nw.close()
		fsys.close()
		return nil, err
	}
	if be.ServesMounts() {
		spec.Mounts = fsys.mounts()
	} else {
		fsys.boot(boot)
	}
	if nw != nil {
		spec.Link = nw.linkSpec()
	}
	b, err := be.Start(ctx, spec, boot)
	if err != nil {
		nw.close()
		fsys.close()
		return nil, fmt.Errorf("start %s sandbox: %w", c.Isolation, err)
	}
	s := &Sandbox{id: id, cfg: c, b: b, net: nw, vfs: fsys, log: c.Logger.With("sandbox", id), created: start, closed: make(chan struct{})}
	fail := func(err error) (*Sandbox, error) {
		err = explainStartFailure(err, b, c.PidsLimit)
		s.closePorts()
		b.Close()
		nw.close()
		fsys.close()
		return nil, err
	}
	if err := s.handshake(ctx, boot); err != nil {
		return fail(err)
	}
	if pidsExhausted(b, c.PidsLimit) {
		return fail(errors.New("start sandbox: no command could start"))
	}
	if err := s.startVFS(ctx); err != nil {
		return fail(fmt.Errorf("start sandbox: %w", err))
	}
	if nw != nil {
		if nw.link, err = b.Link(ctx); err != nil {
			return fail(fmt.Errorf("start sandbox: %w", err))
		}
		// No command has run yet.
		if err := nw.run(s.log, s.emitNetwork); err != nil {
			return fail(fmt.Errorf("start sandbox: %w", err))
		}
		if err := s.publishConfigured(ctx); err != nil {
			return fail(fmt.Errorf("start sandbox: %w", err))
		}
	}
	s.notes = append(s.notes, b.Notes()...)
	for _, n := range s.notes {
		s.log.Warn("degraded confinement", "note", n)
	}
	if !c.pooled {
		s.startLifetime()
	}
	go s.watch()
	s.emit(Event{Type: EventLifecycle, Lifecycle: &LifecycleEvent{State: "started", DurationMs: time.Since(start).Milliseconds()}})
	return s, nil
}

// startLifetime starts the timer of the sandbox's lifetime
// (Resources.TimeoutSeconds), when it has one: when create returns, or,
// for a pooled sandbox, when its pool hands it out (see Pool.Get).
func (s *Sandbox) startLifetime() {
	t := s.cfg.Resources.Timeout()
	if t <= 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopCause != nil || s.lifetime != nil {
		return
	}
	s.lifetime = time.AfterFunc(t, func() {
		s.stop(fmt.Errorf("%w: it reached its %s lifetime (resources.timeout_seconds)", ErrClosed, t))
	})
}

// watch stops the sandbox as crashed when its agent dies, or closes its
// end of the channel, before the sandbox is closed. A slow agent is not a
// dead one: nothing here, nor in the channel, has a timer that runs while
// the agent is merely stopped or starved.
func (s *Sandbox) watch() {
	select {
	case <-s.b.Done():
	case <-s.sess.CloseChan():
		// The channel ends first when the agent dies: wait for its exit,
		// which says how it died.
		select {
		case <-s.b.Done():
		case <-s.closed:
			return
		case <-time.After(agentExitGrace):
			s.stop(&CrashError{Reason: "the sandbox's agent closed its channel to the host"})
			return
		}
	case <-s.closed:
		return
	}
	reason := "the sandbox's agent exited"
	if err := s.b.Err(); err != nil {
		reason = err.Error()
	}
	s.stop(&CrashError{Reason: reason})
}

func (s *Sandbox) handshake(ctx context.Context, boot *agentproto.Boot) error {
	conn := s.b.Conn()
	type result struct {
		r   agentproto.Ready
		err error
	}
	ch := make(chan result, 1)
	go func() {
		fc := agentproto.NewConn(conn)
		if err := fc.Write(boot); err != nil {
			ch <- result{err: err}
			return
		}
		var r agentproto.Ready
		ch <- result{r, fc.Read(&r)}
	}()
	var res result
	select {
	case res = <-ch:
	case <-ctx.Done():
		return fmt.Errorf("start sandbox: %w", context.Cause(ctx))
	case <-s.b.Done():
		return fmt.Errorf("start sandbox: %w", s.b.Err())
	}
	if res.err != nil {
		select {
		case <-s.b.Done():
		case <-time.After(time.Second):
		}
		if berr := s.b.Err(); berr != nil {
			return fmt.Errorf("start sandbox: %w", berr)
		}
		return fmt.Errorf("start sandbox: agent handshake: %w", res.err)
	}
	if res.r.Err != nil {
		return fmt.Errorf("start sandbox: %w", res.r.Err)
	}
	s.notes = append(s.notes, res.r.Notes...)
	sess, err := yamux.Client(agentproto.CoalesceWrites(conn), agentproto.HostMuxConfig())
	if err != nil {
		return fmt.Errorf("start sandbox: stream multiplexer: %w", err)
	}
	s.sess = sess
	s.spare = spare.New(sess)
	go s.spare.Refill()
	return nil
}

// pidsExhausted reports whether a sandbox's tasks fill its pids limit:
// when it has just started, no command could.
func pidsExhausted(b boundary.Sandbox, limit int64) bool {
	if limit <= 0 {
		return false
	}
	n, err := b.PidsCurrent()
	return err == nil && n >= limit
}

// explainStartFailure says, when a sandbox failed to start because of its
// pids limit (the agent's process spawner counts against it: a fork of
// its refused, or its threads alone fill the limit), which limit would do.
func explainStartFailure(err error, b boundary.Sandbox, pidsLimit int64) error {
	c, cerr := b.Counters()
	if (cerr != nil || c.PidsLimitHits == 0) && !pidsExhausted(b, pidsLimit) {
		return err
	}
	return fmt.Errorf("%w: the sandbox reached its pids limit of %d while it started; airlock's process spawner counts against that limit with up to %d threads of its own: give pids_limit (--pids-limit) at least %d", err, pidsLimit, agentproto.SpawnerTasks, MinPidsLimit)
}

// ID returns the sandbox id.
func (s *Sandbox) ID() string { return s.id }

// PID returns the host pid of the sandbox's agent (or VM monitor).
func (s *Sandbox) PID() int { return s.b.PID() }

// Config returns the effective configuration, defaults applied.
func (s *Sandbox) Config() Config { return s.cfg }

// Notes lists confinement or limits that could not be applied on this
// machine, each with its reason. Empty means everything asked for holds.
func (s *Sandbox) Notes() []string { return append([]string(nil), s.notes...) }

// Done is closed when the sandbox has stopped.
func (s *Sandbox) Done() <-chan struct{} { return s.closed }

// Err returns why the sandbox stopped, or nil while it runs.
func (s *Sandbox) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopCause
}

func (s *Sandbox) stop(cause error) {
	s.mu.Lock()
	if s.stopCause == nil {
		s.stopCause = cause
	}
	s.mu.Unlock()
	_ = s.Close()
}

// Close stops the sandbox: every process in it is killed and everything it
// created on the host is removed. It is safe to call more than once.
func (s *Sandbox) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		if s.stopCause == nil {
			s.stopCause = ErrClosed
		}
		if s.lifetime != nil {
			s.lifetime.Stop()
		}
		s.mu.Unlock()
		// Published ports first: no new connection reaches a sandbox
		// being torn down.
		s.closePorts()
		if s.sess != nil {
			s.sess.Close()
		}
		s.closeErr = errors.Join(s.b.Close(), s.net.close())
		// The boundary has stopped serving the mounts: what their
		// providers hold can go.
		if err := s.vfs.close(); err != nil {
			s.log.Debug("release the programmable mounts' providers", "err", err)
		}
		s.cfg.image.release()
		close(s.closed)
		s.commandEnded()
		s.emit(Event{Type: EventLifecycle, Lifecycle: stopEvent(s.Err())})
	})
	return s.closeErr
}

// afterFirstCommand has fn called once, when the next command run in s
// ends (or fails) or when s is closed, whichever comes first; never on
// the caller's goroutine, which may hold locks fn takes.
func (s *Sandbox) afterFirstCommand(fn func()) {
	s.firstCommand.Store(&fn)
	select {
	case <-s.closed:
		go s.commandEnded()
	default:
	}
}

// commandEnded calls what afterFirstCommand left, if anything.
func (s *Sandbox) commandEnded() {
	if fn := s.firstCommand.Swap(nil); fn != nil {
		(*fn)()
	}
}

// stopEvent is the lifecycle event of a sandbox that stopped for cause:
// "crashed" with the crash's reason, or "stopped" (with the reason, unless
// it was closed by its owner).
func stopEvent(cause error) *LifecycleEvent {
	if ce, ok := errors.AsType[*CrashError](cause); ok {
		return &LifecycleEvent{State: "crashed", Reason: ce.Reason}
	}
	ev := &LifecycleEvent{State: "stopped"}
	if cause != nil && cause != ErrClosed {
		ev.Reason = cause.Error()
	}
	return ev
}

// stream is one request's stream to the agent.
type stream struct {
	net.Conn
	c     *agentproto.Conn
	stop  func() bool
	spare *spare.Stream
}

// Close ends the stream and releases its context watch. The request is
// over: the spare stream for the next one is opened now.
func (st *stream) Close() error {
	st.stop()
	err := st.Conn.Close()
	st.spare.Kick()
	return err
}

// open starts a new stream to the agent and sends req. Cancelling ctx
// closes the stream, which makes the agent abandon the request (and kill a
// running command).
func (s *Sandbox) open(ctx context.Context, req agentproto.Request) (*stream, error) {
	select {
	case <-s.closed:
		return nil, s.Err()
	default:
	}
	if err := s.errIfPaused(); err != nil {
		return nil, err
	}
	conn := s.spare.Take(ctx)
	if conn == nil {
		var err error
		if conn, err = s.sess.OpenStream(); err != nil {
			return nil, s.channelErr(fmt.Errorf("open stream to sandbox agent: %w", err))
		}
	}
	st := &stream{Conn: conn, c: agentproto.NewConn(conn), stop: func() bool { return false }, spare: s.spare}
	if err := st.c.Write(req); err != nil {
		conn.Close()
		return nil, s.channelErr(fmt.Errorf("send %s request: %w", req.Op, err))
	}
	if ctx.Done() != nil {
		st.stop = context.AfterFunc(ctx, func() {
			// Close only half-closes a yamux stream: also wake our own
			// pending read, which may wait for a reply that never comes,
			// first, since the close waits while the channel is full.
			_ = conn.SetReadDeadline(time.Now())
			conn.Close()
		})
	}
	return st, nil
}

// channelErr is err, a failure of the channel to the agent, unless the
// sandbox stopped: then it is why. The channel fails as soon as the agent
// dies, before its exit is seen, so a failure that ended the channel
// waits for the sandbox to be stopped (see watch) and reports its cause.
func (s *Sandbox) channelErr(err error) error {
	select {
	case <-s.sess.CloseChan():
		<-s.closed
	default:
	}
	if e := s.Err(); e != nil {
		return e
	}
	return err
}

// Ping round-trips a no-op request to the agent.
func (s *Sandbox) Ping(ctx context.Context) error {
	st, err := s.open(ctx, agentproto.Request{Op: agentproto.OpPing})
	if err != nil {
		return err
	}
	defer st.Close()
	var m agentproto.Msg
	return s.readReply(ctx, st.c, &m)
}

// readReply reads one frame and turns transport failures into errors that
// say whether the sandbox or the caller ended the request.
func (s *Sandbox) readReply(ctx context.Context, c *agentproto.Conn, m *agentproto.Msg) error {
	if err := c.Read(m); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return s.channelErr(fmt.Errorf("read from sandbox agent: %w", err))
	}
	if m.K == agentproto.KErr && m.Err != nil {
		return m.Err
	}
	return nil
}

// ValidID reports whether id can name a sandbox (CreateWithID): 1-64
// letters, digits, - or _.
func ValidID(id string) bool {
	if len(id) == 0 || len(id) > 64 {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}
