package airlock

import "time"

// Event types.
const (
	EventLifecycle = "lifecycle"
	EventExec      = "exec"
	EventFile      = "file"
	EventNetwork   = "network"
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
}

// LifecycleEvent reports a sandbox starting or stopping.
type LifecycleEvent struct {
	State      string `json:"state"`
	DurationMs int64  `json:"duration_ms,omitempty"`
	Reason     string `json:"reason,omitempty"`
}

// ExecEvent reports a finished command.
type ExecEvent struct {
	Command    []string `json:"command"`
	ExitCode   int      `json:"exit_code"`
	DurationMs int64    `json:"duration_ms"`
	KilledBy   string   `json:"killed_by,omitempty"`
}

// FileEvent reports a file operation made through the API.
type FileEvent struct {
	Op   string `json:"op"`
	Path string `json:"path"`
	Size int64  `json:"size,omitempty"`
}

func (s *Sandbox) emit(e Event) {
	if s.cfg.OnEvent == nil {
		return
	}
	e.Timestamp = time.Now().Unix()
	e.SandboxID = s.id
	s.cfg.OnEvent(e)
}
