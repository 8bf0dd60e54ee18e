package client

import (
	"encoding/json"
	"time"

	"github.com/airlock-sandbox/airlock/api"
)

// Event types.
const (
	EventExec      = api.EventExec
	EventFile      = api.EventFile
	EventNetwork   = api.EventNetwork
	EventLifecycle = api.EventLifecycle
)

// Event is something that happened in a sandbox, as reported by an "event"
// notification. The detail field matching Type is set when the client
// knows its shape and could decode it; Raw always holds the notification's
// params as received.
type Event struct {
	// Type is EventExec, EventFile, EventNetwork, EventLifecycle or a type
	// this client does not know.
	Type string
	// Timestamp is when it happened, in Unix seconds.
	Timestamp int64
	// SandboxID is the sandbox it happened in.
	SandboxID string
	// Dropped counts the events the server dropped just before this one
	// because the client read too slowly (see also
	// Client.DroppedEvents, the events this client dropped).
	Dropped int64

	Exec      *ExecEvent
	File      *FileEvent
	Network   *NetworkEvent
	Lifecycle *LifecycleEvent

	// Raw is the event as received, detail fields undecoded.
	Raw api.Event
}

// Time returns Timestamp as a time.Time.
func (e Event) Time() time.Time { return time.Unix(e.Timestamp, 0) }

// The details of events: the wire types, under the names this package
// has always used.
type (
	ExecEvent      = api.ExecEvent
	FileEvent      = api.FileEvent
	NetworkEvent   = api.NetworkEvent
	LifecycleEvent = api.LifecycleEvent
)

// decodeEvent turns the params of an "event" notification into an Event.
// A detail that does not decode is left nil; Raw still carries it.
func decodeEvent(params json.RawMessage) (Event, error) {
	var raw api.Event
	if err := json.Unmarshal(params, &raw); err != nil {
		return Event{}, err
	}
	ev := Event{Type: raw.Type, Timestamp: raw.Timestamp, SandboxID: raw.SandboxID, Dropped: raw.Dropped, Raw: raw}
	ev.Exec = decodeDetail[ExecEvent](raw.Exec)
	ev.File = decodeDetail[FileEvent](raw.File)
	ev.Network = decodeDetail[NetworkEvent](raw.Network)
	ev.Lifecycle = decodeDetail[LifecycleEvent](raw.Lifecycle)
	return ev, nil
}

func decodeDetail[T any](raw json.RawMessage) *T {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	v := new(T)
	if json.Unmarshal(raw, v) != nil {
		return nil
	}
	return v
}
