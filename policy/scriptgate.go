package policy

import (
	"context"
	"fmt"
	"time"
)

// ScriptGate bounds how many calls into policy scripts run at once. Each
// call may allocate up to its own bound (Options.ScriptMaxAlloc), so the
// gates bound what scripts hold together: a Policy has a gate of its own
// (Options.ScriptConcurrency), and every Policy of the process also
// passes one shared gate (Options.ScriptGate), so that many sandboxes,
// each running a hostile script, cannot add up to more.
type ScriptGate struct {
	slots chan struct{}
	scope string // "in this sandbox", "in this process": for errors
}

// NewScriptGate returns a gate that lets n calls run at once.
func NewScriptGate(n int) *ScriptGate {
	return newScriptGate(n, "sharing this bound")
}

func newScriptGate(n int, scope string) *ScriptGate {
	return &ScriptGate{slots: make(chan struct{}, max(n, 1)), scope: scope}
}

// processScripts is the gate that every Policy of the process shares
// unless Options.ScriptGate names another: the bound is on the
// supervisor process's memory, so it is the process's.
var processScripts = newScriptGate(DefaultScriptProcessConcurrency, "in this process")

// enter waits for a slot in the policy's gate, then in the shared one,
// for as long as a call may run (the script timeout) or until ctx is
// done. A call that gets none fails closed.
func (s *script) enter(ctx context.Context) (release func(), err error) {
	lim := &s.limits
	timer := time.NewTimer(lim.timeout)
	defer timer.Stop()
	var held []*ScriptGate
	release = func() {
		for _, g := range held {
			<-g.slots
		}
	}
	for _, g := range []*ScriptGate{lim.calls, lim.shared} {
		select {
		case g.slots <- struct{}{}:
			held = append(held, g)
			continue
		default:
		}
		select {
		case g.slots <- struct{}{}:
			held = append(held, g)
		case <-timer.C:
			release()
			return nil, fmt.Errorf("not run: %d calls into the policy script were already running %s, and none ended within %v", cap(g.slots), g.scope, lim.timeout)
		case <-ctx.Done():
			release()
			return nil, fmt.Errorf("not run: waiting for one of the %d calls into the policy script running %s to end: %w", cap(g.slots), g.scope, context.Cause(ctx))
		}
	}
	return release, nil
}
