package client

import (
	"encoding/json"
	"time"

	"github.com/airlock-sandbox/airlock/api"
)

// Event types.
const (
	EventExec      = "exec"
	EventFile      = "file"
	EventNetwork   = "network"
	EventLifecycle = "lifecycle"
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

// ExecEvent reports a finished command.
type ExecEvent struct {
	Command    []string `json:"command"`
	ExitCode   int      `json:"exit_code"`
	DurationMs int64    `json:"duration_ms"`
	// KilledBy is "timeout", "oom", "signal" or "".
	KilledBy string `json:"killed_by,omitempty"`
}

// FileEvent reports a file operation.
type FileEvent struct {
	// Op is the operation: write, read, list, stat, mkdir, remove, ...
	Op   string `json:"op"`
	Path string `json:"path"`
	Size int64  `json:"size,omitempty"`
}

// NetworkEvent reports a request that crossed (or was refused at) the
// sandbox's network boundary.
type NetworkEvent struct {
	Method        string `json:"method,omitempty"`
	URL           string `json:"url,omitempty"`
	Host          string `json:"host,omitempty"`
	StatusCode    int    `json:"status_code,omitempty"`
	RequestBytes  int64  `json:"request_bytes,omitempty"`
	ResponseBytes int64  `json:"response_bytes,omitempty"`
	DurationMs    int64  `json:"duration_ms,omitempty"`
	Blocked       bool   `json:"blocked,omitempty"`
	Reason        string `json:"reason,omitempty"`
}

// LifecycleEvent reports a sandbox starting or stopping.
type LifecycleEvent struct {
	// State is, for example, "started" or "stopped".
	State      string `json:"state"`
	DurationMs int64  `json:"duration_ms,omitempty"`
	Reason     string `json:"reason,omitempty"`
}

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
