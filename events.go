package airlock

import (
	"time"

	"github.com/airlock-sandbox/airlock/api"
)

// Event types.
const (
	EventLifecycle = api.EventLifecycle
	EventExec      = api.EventExec
	EventFile      = api.EventFile
	EventNetwork   = api.EventNetwork
)

// Event is something that happened in a sandbox. Exactly one of the
// detail fields is set, matching Type.
type Event struct {
	Type      string          `json:"type"`
	Timestamp int64           `json:"timestamp"`
	SandboxID string          `json:"sandbox_id,omitempty"`
	Lifecycle *LifecycleEvent `json:"lifecycle,omitempty"`
	Exec      *ExecEvent      `json:"exec,omitempty"`
	File      *FileEvent      `json:"file,omitempty"`
	Network   *NetworkEvent   `json:"network,omitempty"`
}

// The details of events are the wire types of package api: the embed
// API, the JSON-RPC server and the clients share one definition.
type (
	LifecycleEvent = api.LifecycleEvent
	ExecEvent      = api.ExecEvent
	FileEvent      = api.FileEvent
	NetworkEvent   = api.NetworkEvent
)

func (s *Sandbox) emit(e Event) { emitTo(s.cfg.OnEvent, s.id, e) }

// emitTo reports e of sandbox id to on, when set.
func emitTo(on func(Event), id string, e Event) {
	if on == nil {
		return
	}
	e.Timestamp = time.Now().Unix()
	e.SandboxID = id
	on(e)
}

func (s *Sandbox) emitNetwork(e api.NetworkEvent) {
	s.emit(Event{Type: EventNetwork, Network: &e})
}
