package rpc

import (
	"sort"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/api"
)

// maxForgotten bounds how many closed sandbox ids a session remembers, to
// say "closed" rather than "unknown" about them.
const maxForgotten = 4096

// sandboxEntry is a sandbox a session can act on.
type sandboxEntry struct {
	sb      *airlock.Sandbox
	owned   bool // created by this session, closed when it ends
	created time.Time
	release func() // from Options.OnCreate

	closeOnce sync.Once
	closeErr  error
}

// close stops the sandbox and then runs its release hook, once.
func (e *sandboxEntry) close() error {
	e.closeOnce.Do(func() {
		e.closeErr = e.sb.Close()
		if e.release != nil {
			e.release()
		}
	})
	return e.closeErr
}

// sandboxes is a session's set of sandboxes. Its methods are called with
// the session's lock held.
type sandboxes struct {
	byID      map[string]*sandboxEntry
	forgotten map[string]bool
	order     []string // forgotten ids, oldest first
}

func newSandboxes() sandboxes {
	return sandboxes{byID: map[string]*sandboxEntry{}, forgotten: map[string]bool{}}
}

func (s *sandboxes) add(e *sandboxEntry) { s.byID[e.sb.ID()] = e }

// forget removes a closed sandbox, remembering its id.
func (s *sandboxes) forget(e *sandboxEntry) {
	id := e.sb.ID()
	if s.byID[id] != e {
		return
	}
	delete(s.byID, id)
	s.forgotten[id] = true
	s.order = append(s.order, id)
	if len(s.order) > maxForgotten {
		delete(s.forgotten, s.order[0])
		s.order = s.order[1:]
	}
}

// resolve finds the sandbox a request names; id may be empty while there
// is exactly one.
func (s *sandboxes) resolve(id string) (*sandboxEntry, *api.Error) {
	if id != "" {
		if e, ok := s.byID[id]; ok {
			return e, nil
		}
		if s.forgotten[id] {
			return nil, rpcError(api.CodeNotRunning, "sandbox %s was closed: create a new sandbox", quote(id))
		}
		return nil, rpcError(api.CodeNotFound, "no sandbox %s in this session: use a sandbox_id returned by create (info lists them)", quote(id))
	}
	switch len(s.byID) {
	case 1:
		for _, e := range s.byID {
			return e, nil
		}
	case 0:
		if len(s.order) > 0 {
			return nil, rpcError(api.CodeNotRunning, "this session's sandbox was closed: call create to start a new one")
		}
		return nil, rpcError(api.CodeNotFound, "this session has no sandbox: call create first")
	}
	return nil, rpcError(api.CodeInvalidParams, "this session has %d sandboxes: give sandbox_id", len(s.byID))
}

// list returns the entries, oldest first.
func (s *sandboxes) list() []*sandboxEntry {
	out := make([]*sandboxEntry, 0, len(s.byID))
	for _, e := range s.byID {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].created.Equal(out[j].created) {
			return out[i].created.Before(out[j].created)
		}
		return out[i].sb.ID() < out[j].sb.ID()
	})
	return out
}
