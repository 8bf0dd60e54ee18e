package netstack

import (
	"fmt"
	"sync"
	"time"
)

// limitEvery is the shortest time between two limit events of one cap:
// a sandbox that floods a cap (thousands of connections a second) gets
// one event a second for it, each counting the refusals it stands for,
// rather than an event per refusal that would flood the event queue and
// crowd out the others.
const limitEvery = time.Second

// The caps whose refusals are reported as limit events.
type limitKind int

const (
	limitTCPConns     limitKind = iota // connections forwarded at once (Config.MaxConns)
	limitUDPFlows                      // UDP flows forwarded at once (Config.MaxConns)
	limitTCPHandshake                  // TCP handshakes being decided (maxTCPInFlight)
	limitEndpoint                      // the sandbox side of a connection could not be made
	limitDNSTCPConns                   // DNS-over-TCP connections (maxDNSTCPConns)
	limitDNSQuestions                  // DNS questions being resolved (maxDNSInFlight)
	numLimits
)

// limitReporter rate-limits the events of one cap.
type limitReporter struct {
	mu         sync.Mutex
	last       time.Time // when the last event went out
	suppressed int       // refusals since then not reported
	pending    Event     // the last of them, for the summary
	timer      *time.Timer
	stopped    bool
}

// limits holds a reporter per cap.
type limits struct {
	emit func(Event)
	r    [numLimits]limitReporter
}

func newLimits(emit func(Event)) *limits { return &limits{emit: emit} }

// report emits ev (Blocked, with a limit reason) unless an event of the
// same cap went out less than limitEvery ago; then it is counted, and
// one summary event at the end of that second says how many there were.
func (l *limits) report(kind limitKind, ev Event) {
	ev.Blocked = true
	r := &l.r[kind]
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return
	}
	now := time.Now()
	if wait := limitEvery - now.Sub(r.last); !r.last.IsZero() && wait > 0 {
		r.suppressed++
		r.pending = ev
		if r.timer == nil {
			r.timer = time.AfterFunc(wait, func() { l.flush(kind) })
		}
		r.mu.Unlock()
		return
	}
	r.last = now
	r.mu.Unlock()
	l.emit(ev)
}

// flush emits the summary of the refusals counted in the last second.
func (l *limits) flush(kind limitKind) {
	r := &l.r[kind]
	r.mu.Lock()
	r.timer = nil
	n, ev := r.suppressed, r.pending
	r.suppressed = 0
	if n == 0 || r.stopped {
		r.mu.Unlock()
		return
	}
	r.last = time.Now()
	r.mu.Unlock()
	ev.Reason += fmt.Sprintf(" (%d refused in the last second; this is the last)", n)
	l.emit(ev)
}

// stop drops what is counted and emits no more.
func (l *limits) stop() {
	for i := range l.r {
		r := &l.r[i]
		r.mu.Lock()
		r.stopped = true
		if r.timer != nil {
			r.timer.Stop()
			r.timer = nil
		}
		r.mu.Unlock()
	}
}
