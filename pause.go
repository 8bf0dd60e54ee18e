package airlock

import (
	"context"
	"errors"
	"fmt"
)

// ErrPaused matches the error of a request that needs the sandbox's
// processes while it is paused (an exec, a file operation): resume it
// first. Pause of a paused sandbox fails with it too.
var ErrPaused = errors.New("sandbox is paused")

// ErrNotPaused is the error of Resume on a sandbox that is not paused.
var ErrNotPaused = errors.New("sandbox is not paused")

// Pause stops every process of the sandbox where it is, its agent
// included, until Resume: they use no CPU and do not run, and on Resume
// they go on from where they were (seeing the clock jump). The host's
// part goes on: published ports and open connections stay (what arrives
// waits), the egress policy can be changed, Usage reads the sandbox,
// and Close and the sandbox's Timeout end it as usual.
//
// Until Resume, new requests that need the agent (Exec, Run, Start,
// the file operations) fail at once with an error matching ErrPaused;
// those already under way wait. At the process level a sandbox is
// paused by the freezer of its cgroup, at gvisor by the Sentry (runsc
// pause), in a micro-VM by stopping its CPUs.
func (s *Sandbox) Pause(ctx context.Context) error {
	s.pauseMu.Lock()
	defer s.pauseMu.Unlock()
	select {
	case <-s.closed:
		return fmt.Errorf("pause sandbox %s: %w", s.id, s.Err())
	default:
	}
	if s.paused.Load() {
		return fmt.Errorf("pause sandbox %s: %w already", s.id, ErrPaused)
	}
	// Refused from now: a request that started the agent on a new
	// stream now would wait for the resume.
	s.paused.Store(true)
	if err := s.b.Pause(ctx); err != nil {
		s.paused.Store(false)
		if e := s.Err(); e != nil {
			return fmt.Errorf("pause sandbox %s: %w", s.id, e)
		}
		return fmt.Errorf("pause sandbox %s: %w", s.id, err)
	}
	s.log.Debug("sandbox paused")
	s.emit(Event{Type: EventLifecycle, Lifecycle: &LifecycleEvent{State: "paused"}})
	s.notifyPaused(true)
	return nil
}

// Resume lets the processes of a paused sandbox run on.
func (s *Sandbox) Resume(ctx context.Context) error {
	s.pauseMu.Lock()
	defer s.pauseMu.Unlock()
	select {
	case <-s.closed:
		return fmt.Errorf("resume sandbox %s: %w", s.id, s.Err())
	default:
	}
	if !s.paused.Load() {
		return fmt.Errorf("resume sandbox %s: %w", s.id, ErrNotPaused)
	}
	if err := s.b.Resume(ctx); err != nil {
		return fmt.Errorf("resume sandbox %s: %w", s.id, err)
	}
	s.paused.Store(false)
	s.log.Debug("sandbox resumed")
	s.emit(Event{Type: EventLifecycle, Lifecycle: &LifecycleEvent{State: "resumed"}})
	s.notifyPaused(false)
	return nil
}

// Paused reports whether the sandbox is paused.
func (s *Sandbox) Paused() bool { return s.paused.Load() }

// WatchPaused calls fn each time the sandbox is paused or resumed, with
// whether it is now paused, until stop is called. Calls do not overlap.
func (s *Sandbox) WatchPaused(fn func(paused bool)) (stop func()) {
	s.pauseMu.Lock()
	defer s.pauseMu.Unlock()
	if s.pauseWatchers == nil {
		s.pauseWatchers = map[int]func(bool){}
	}
	id := s.pauseWatcherSeq
	s.pauseWatcherSeq++
	s.pauseWatchers[id] = fn
	return func() {
		s.pauseMu.Lock()
		defer s.pauseMu.Unlock()
		delete(s.pauseWatchers, id)
	}
}

// notifyPaused tells the watchers; the caller holds pauseMu.
func (s *Sandbox) notifyPaused(paused bool) {
	for _, fn := range s.pauseWatchers {
		fn(paused)
	}
}

// errIfPaused is ErrPaused, said for this sandbox, while it is paused.
func (s *Sandbox) errIfPaused() error {
	if s.paused.Load() {
		return fmt.Errorf("sandbox %s: %w: resume it first (airlock unpause, or the RPC method resume)", s.id, ErrPaused)
	}
	return nil
}
