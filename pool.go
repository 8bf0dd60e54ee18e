package airlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// MaxPoolSize bounds the number of sandboxes a pool keeps ready.
const MaxPoolSize = 64

// poolStarts bounds the starts a pool runs at once, so that refilling a
// pool does not starve the machine (a vm start is CPU-bound).
const poolStarts = 2

// Back-off between failed starts: the first retry waits
// poolRetryMin, each further one twice as long, up to poolRetryMax.
const (
	poolRetryMin = 100 * time.Millisecond
	poolRetryMax = 5 * time.Second
)

// poolRefillHold bounds how long the start that replaces a sandbox
// handed out waits for that sandbox's first command to end (see
// Pool.hold).
const poolRefillHold = 250 * time.Millisecond

// Pool keeps sandboxes of one Config started and ready to be handed out,
// so that taking one (Get, or Create with Config.Pool) takes no longer
// than one ping of its agent, at every isolation level. A sandbox is handed
// out once and never goes back: the caller owns it and closes it, and
// the pool starts another in its place, once the first command of the
// one handed out has ended (see hold). Its methods are safe for
// concurrent use.
type Pool struct {
	cfg  Config
	size int
	log  *slog.Logger

	// ctx bounds the starts; Close cancels it.
	ctx    context.Context
	cancel context.CancelFunc
	// starts holds a token for each start under way.
	starts chan struct{}
	// wg counts the goroutines of starts and of waiting sandboxes.
	wg sync.WaitGroup

	mu    sync.Mutex
	ready []*pooledSandbox
	// starting counts the starts under way.
	starting int
	closed   bool
	// changed is closed, and replaced, whenever a sandbox becomes ready,
	// a start fails or the pool closes: Get waits on it.
	changed chan struct{}
	// failures counts the starts that failed in a row; lastErr is the
	// last one's error. retryAt is when the next start may begin, and
	// retry the timer that begins it.
	failures int
	lastErr  error
	retryAt  time.Time
	retry    *time.Timer
	// holds counts the sandboxes handed out whose replacement waits
	// (see hold), for at most refillHold each.
	holds      int
	refillHold time.Duration

	started, failed, discarded int
}

// pooledSandbox is a ready sandbox waiting in a pool; taken is closed
// when it leaves the pool.
type pooledSandbox struct {
	sb    *Sandbox
	taken chan struct{}
}

// PoolStats counts what a pool holds and has done.
type PoolStats struct {
	// Size is the number of sandboxes the pool keeps ready.
	Size int `json:"size"`
	// Ready is the number ready now, and Starting the number being
	// started.
	Ready    int `json:"ready"`
	Starting int `json:"starting"`
	// Started and Failed count the starts that succeeded and failed
	// since the pool was made; Discarded counts the ready sandboxes that
	// ended while they waited (killed, crashed) and were never handed
	// out.
	Started   int `json:"started"`
	Failed    int `json:"failed"`
	Discarded int `json:"discarded"`
}

// poolClosedError is the error of Get on a closed pool; it matches
// ErrClosed.
type poolClosedError struct{}

func (poolClosedError) Error() string        { return "the pool is closed" }
func (poolClosedError) Is(target error) bool { return target == ErrClosed }

// NewPool validates cfg as Create does, gets its image into the cache
// (within ctx), and starts size sandboxes of cfg in the background, at
// most two at a time; it returns without waiting for them. From then on
// the pool keeps size sandboxes ready: each one handed out is replaced
// by a new start. Only ctx's values outlive NewPool: the pool runs until
// Close.
//
// The pool's sandboxes are configured by cfg, cfg.OnEvent and cfg.Logger
// included: OnEvent receives a pooled sandbox's "started" event when the
// pool starts it, and every event after. Resources.TimeoutSeconds, a
// sandbox's lifetime, counts from when the pool hands it out, not from
// its start.
func NewPool(ctx context.Context, cfg Config, size int) (*Pool, error) {
	if size < 1 || size > MaxPoolSize {
		return nil, fmt.Errorf("invalid pool size %d: give 1 to %d", size, MaxPoolSize)
	}
	if cfg.Pool != nil {
		return nil, errors.New("invalid sandbox config: a pool's Config cannot name a pool")
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid sandbox config: %w", err)
	}
	c := cfg.withDefaults()
	c.pooled = true
	// The image once, before any start: a build or a pull reports its
	// errors here, and every start then finds it in the cache.
	img, err := resolveImage(ctx, &c)
	if err != nil {
		return nil, fmt.Errorf("start a pool of %d sandboxes: %w", size, err)
	}
	img.release()
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p := &Pool{
		cfg: c, size: size, log: c.Logger.With("pool_size", size), refillHold: poolRefillHold,
		ctx: pctx, cancel: cancel, starts: make(chan struct{}, poolStarts),
		changed: make(chan struct{}),
	}
	p.mu.Lock()
	p.fill()
	p.mu.Unlock()
	return p, nil
}

// Get hands out a ready sandbox that has never run a command: at once
// when one is ready, or else once the next start ends. It fails when ctx
// ends first, when the pool is closed (an error matching ErrClosed), or,
// when no sandbox is ready and none is being started because the last
// starts failed (the pool is backing off before it tries again), with
// the last start's error. The caller owns the sandbox and closes it; the
// pool starts another in its place.
func (p *Pool) Get(ctx context.Context) (*Sandbox, error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, fmt.Errorf("take a sandbox from the pool: %w", poolClosedError{})
		}
		if len(p.ready) > 0 {
			e := p.ready[0]
			p.ready = slices.Delete(p.ready, 0, 1)
			close(e.taken)
			ended := e.sb.ended()
			if ended {
				p.discarded++
			} else {
				p.hold(e.sb)
			}
			p.fill()
			p.mu.Unlock()
			if !ended && !e.sb.answers(ctx) {
				ended = true
				p.mu.Lock()
				p.discarded++
				p.mu.Unlock()
			}
			if ended {
				p.discard(e.sb)
				continue
			}
			// The lifetime starts now, when the sandbox is the
			// caller's: time spent waiting in the pool is not the
			// caller's to pay for.
			e.sb.startLifetime()
			return e.sb, nil
		}
		// Nothing is ready: whatever replacement waits for a command
		// starts now.
		p.fill()
		if p.failures > 0 && p.starting == 0 {
			err := p.lastErr
			p.mu.Unlock()
			return nil, fmt.Errorf("take a sandbox from the pool: no sandbox is ready and the last start failed: %w", err)
		}
		changed := p.changed
		p.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, fmt.Errorf("take a sandbox from the pool: %w", context.Cause(ctx))
		}
	}
}

// Stats counts what the pool holds and has done.
func (p *Pool) Stats() PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return PoolStats{
		Size: p.size, Ready: len(p.ready), Starting: p.starting,
		Started: p.started, Failed: p.failed, Discarded: p.discarded,
	}
}

// Config returns the configuration of the pool's sandboxes, defaults
// applied.
func (p *Pool) Config() Config { return p.cfg }

// Close stops refilling the pool and closes every sandbox waiting in it,
// and those being started once their start ends; the sandboxes already
// handed out are their owners' and keep running. It returns once they
// are all closed. Get fails after Close. It is safe to call more than
// once.
func (p *Pool) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	if p.retry != nil {
		p.retry.Stop()
		p.retry = nil
	}
	waiting := p.ready
	p.ready = nil
	for _, e := range waiting {
		close(e.taken)
	}
	p.broadcast()
	p.mu.Unlock()
	p.cancel()
	// In parallel: a VM takes its time to stop.
	errs := make([]error, len(waiting))
	var wg sync.WaitGroup
	for i, e := range waiting {
		wg.Go(func() {
			if err := e.sb.Close(); err != nil {
				errs[i] = fmt.Errorf("close pooled sandbox %s: %w", e.sb.ID(), err)
			}
		})
	}
	wg.Wait()
	p.wg.Wait()
	return errors.Join(errs...)
}

// hold delays the start that replaces sb, just handed out, until sb's
// first command has ended, sb is closed, or poolRefillHold has passed,
// whichever comes first; fill starts it at once all the same when
// nothing is left ready. A start is CPU-bound (runsc's boot, a VM's
// restore) and its first command is what the caller waits for: on a
// machine of few cores the two would share them, and a pooled
// sandbox's first command took three to four times as long as the next
// ones. p.mu is held.
func (p *Pool) hold(sb *Sandbox) {
	p.holds++
	var once sync.Once
	release := func() {
		once.Do(func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			p.holds--
			p.fill()
		})
	}
	t := time.AfterFunc(p.refillHold, release)
	sb.afterFirstCommand(func() {
		t.Stop()
		release()
	})
}

// fill begins starts until the ready sandboxes and those being started
// make the pool's size, unless a sandbox handed out holds the starts
// back (hold) while others are ready. After a failed start it waits out
// the back-off, and then starts one sandbox at a time until a start
// succeeds. p.mu is held.
func (p *Pool) fill() {
	if p.closed || p.holds > 0 && len(p.ready) > 0 {
		return
	}
	if wait := time.Until(p.retryAt); wait > 0 {
		if p.retry == nil {
			p.retry = time.AfterFunc(wait, func() {
				p.mu.Lock()
				defer p.mu.Unlock()
				p.retry = nil
				p.fill()
			})
		}
		return
	}
	for len(p.ready)+p.starting < p.size && (p.failures == 0 || p.starting == 0) {
		p.starting++
		p.wg.Add(1)
		go p.start()
	}
}

// broadcast wakes the callers of Get that wait; p.mu is held.
func (p *Pool) broadcast() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// start starts one sandbox and puts it in the pool.
func (p *Pool) start() {
	defer p.wg.Done()
	sb, err := p.startSandbox()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.starting--
	switch {
	case p.closed:
		if sb != nil {
			// Closed outside p.mu; Close waits for it (wg).
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				_ = sb.Close()
			}()
		}
		return
	case err != nil:
		p.failed++
		p.failures++
		p.lastErr = err
		backoff := min(poolRetryMin<<min(p.failures-1, 16), poolRetryMax)
		p.retryAt = time.Now().Add(backoff)
		p.log.Warn("pool: a sandbox failed to start", "err", err, "failures_in_a_row", p.failures, "retry_in", backoff)
	default:
		p.started++
		p.failures, p.lastErr, p.retryAt = 0, nil, time.Time{}
		e := &pooledSandbox{sb: sb, taken: make(chan struct{})}
		p.ready = append(p.ready, e)
		p.wg.Add(1)
		go p.watch(e)
	}
	p.broadcast()
	p.fill()
}

// startSandbox starts a sandbox of the pool's config, once one of the
// poolStarts tokens is free.
func (p *Pool) startSandbox() (*Sandbox, error) {
	select {
	case p.starts <- struct{}{}:
	case <-p.ctx.Done():
		return nil, fmt.Errorf("start a pooled sandbox: %w", poolClosedError{})
	}
	defer func() { <-p.starts }()
	c := p.cfg
	// NewPool reported the image's progress; a start that finds it
	// gone from the cache gets it again quietly.
	c.OnImageProgress = nil
	img, err := resolveImage(p.ctx, &c)
	if err != nil {
		return nil, fmt.Errorf("start a pooled sandbox: %w", err)
	}
	c.image = img
	sb, err := create(p.ctx, NewID(), c)
	if err != nil {
		img.release()
		return nil, err
	}
	return sb, nil
}

// watch discards e's sandbox when it ends (its agent killed or crashed)
// while it waits in the pool, and starts another in its place.
func (p *Pool) watch(e *pooledSandbox) {
	defer p.wg.Done()
	select {
	case <-e.taken:
		return
	case <-e.sb.Done():
	}
	p.mu.Lock()
	i := slices.Index(p.ready, e)
	if i >= 0 {
		p.ready = slices.Delete(p.ready, i, i+1)
		close(e.taken)
		p.discarded++
		p.broadcast()
		p.fill()
	}
	p.mu.Unlock()
	if i >= 0 {
		p.discard(e.sb)
	}
}

// discard closes a sandbox that ended while it waited in the pool.
func (p *Pool) discard(sb *Sandbox) {
	p.log.Warn("pool: a ready sandbox ended before it was handed out; it is discarded and replaced", "sandbox", sb.ID(), "reason", sb.Err())
	_ = sb.Close()
}

// poolPingWait bounds how long Get waits for a ready sandbox's agent to
// answer before it hands the sandbox out anyway.
const poolPingWait = time.Second

// answers reports whether the sandbox's agent answers a ping on its
// channel, so that Get never hands out a sandbox whose agent has just
// died: its death closed the channel, but ended sees that only once the
// multiplexer has read the end, and the backend's Done only once the
// exit is reaped, both in goroutines of their own that a busy machine
// may not have run yet. The ping makes the multiplexer meet the closed
// channel now. A slow agent is not a dead one: one that has not answered
// within poolPingWait, or before ctx ends, is handed out, and the
// caller's requests end with their own deadlines if it never does. The
// ping's goroutine ends with its answer or with the session.
func (s *Sandbox) answers(ctx context.Context) bool {
	res := make(chan error, 1)
	go func() {
		_, err := s.sess.Ping()
		res <- err
	}()
	t := time.NewTimer(poolPingWait)
	defer t.Stop()
	select {
	case err := <-res:
		return err == nil
	case <-s.b.Done():
		return false
	case <-t.C:
		return true
	case <-ctx.Done():
		return true
	}
}

// ended reports whether the sandbox has stopped, or its agent has died
// or closed its channel even if watch has not yet stopped it.
func (s *Sandbox) ended() bool {
	select {
	case <-s.closed:
		return true
	case <-s.b.Done():
		return true
	case <-s.sess.CloseChan():
		return true
	default:
		return false
	}
}
