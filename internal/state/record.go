package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Status values of a Record.
const (
	// StatusRunning: the supervisor was alive when the record was last
	// checked.
	StatusRunning = "running"
	// StatusStopped: the sandbox ended and its supervisor recorded how.
	StatusStopped = "stopped"
	// StatusCrashed: the supervisor died without recording an end, the
	// state could not be read, or the sandbox died under its supervisor
	// (its agent was killed), which recorded how in Reason.
	StatusCrashed = "crashed"
)

// Kind values of a Record: who supervises the sandbox.
const (
	// KindDetached: an `airlock run --detach` supervisor.
	KindDetached = "detached"
	// KindRPC: an `airlock rpc` server.
	KindRPC = "rpc"
	// KindPool: an `airlock pool create` supervisor, which handed the
	// sandbox out of its pool.
	KindPool = "pool"
)

// Reasons this package records itself. Supervisors record their own
// ("exited", "killed", "timeout", "closed", ...).
const (
	// ReasonSupervisorDied: the record said running but its supervisor is
	// gone (or its pid now belongs to another process).
	ReasonSupervisorDied = "supervisor died"
	// ReasonUnreadable: the sandbox folder exists but its state.json is
	// missing, too large or not a valid record, and no supervisor serves
	// the sandbox.
	ReasonUnreadable = "unreadable state"
)

// Sentinel errors; test with errors.Is. The errors returned carry a message
// meant for the user.
var (
	// ErrNotFound: no sandbox has that id (or id prefix).
	ErrNotFound = errors.New("sandbox not found")
	// ErrAmbiguous: an id prefix matches several sandboxes.
	ErrAmbiguous = errors.New("ambiguous sandbox id")
	// ErrRunning: the sandbox is running and its supervisor alive.
	ErrRunning = errors.New("sandbox is running")
	// ErrExists: a sandbox with that id already exists.
	ErrExists = errors.New("sandbox already exists")
)

// Record is the bookkeeping of one sandbox, stored as
// <home>/sandboxes/<id>/state.json.
type Record struct {
	// ID names the sandbox and its folder; see ValidateID.
	ID string `json:"id"`
	// Name is a name the user gave it (run --name), unique in the
	// store as long as the record is kept; see ValidateName.
	Name string `json:"name,omitempty"`
	// Status is StatusRunning, StatusStopped or StatusCrashed.
	Status    string `json:"status"`
	Isolation string `json:"isolation,omitempty"`
	Image     string `json:"image,omitempty"`
	// Command is the sandbox's main command; empty when it has none.
	Command []string `json:"command,omitempty"`
	// TTY says that the main command runs on a terminal (run -d -t).
	TTY       bool      `json:"tty,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// StoppedAt is zero while the sandbox runs.
	StoppedAt time.Time `json:"stopped_at,omitzero"`
	// ExitCode is the main command's exit code, when known.
	ExitCode *int `json:"exit_code,omitempty"`
	// Reason says why the sandbox stopped: "exited", "killed", "timeout",
	// "closed", ReasonSupervisorDied, ...
	Reason string `json:"reason,omitempty"`
	// Supervisor identifies the process that owns the sandbox.
	Supervisor Supervisor `json:"supervisor"`
	// Kind is KindDetached, KindRPC or KindPool.
	Kind string `json:"kind,omitempty"`
	// Config is the sandbox configuration, already passed through Redact
	// by the caller.
	Config json.RawMessage `json:"config,omitempty"`
	// Paused says that the running sandbox is paused (airlock pause).
	Paused bool `json:"paused,omitempty"`
	// Ports are the sandbox's published ports while it runs: the host
	// addresses bound and the sandbox ports they lead to.
	Ports []Port `json:"ports,omitempty"`
	// Damaged, set only in what Get and List return, says that the
	// record could not be read: which file, what is wrong with it, and
	// what to do. The other fields then hold what is known without it.
	Damaged string `json:"damaged,omitempty"`
}

// Port is a published port of a running sandbox.
type Port struct {
	HostIP      string `json:"host_ip"`
	HostPort    uint16 `json:"host_port"`
	SandboxPort uint16 `json:"sandbox_port"`
	Protocol    string `json:"protocol"`
}

// Supervisor identifies a process across PID reuse: its pid and its start
// time (see ProcessStartTime).
type Supervisor struct {
	PID int `json:"pid"`
	// StartTime is in clock ticks since boot on Linux; 0 means unknown, in
	// which case the pid alone decides liveness.
	StartTime uint64 `json:"start_time"`
}

// Alive reports whether the supervisor process still exists.
func (s Supervisor) Alive() bool { return Alive(s.PID, s.StartTime) }

// maxIDLen bounds sandbox ids.
const maxIDLen = 64

// ValidateID reports whether id can name a sandbox: 1 to 64 ASCII letters,
// digits, '-' or '_'. Such an id is a single, non-hidden path element.
func ValidateID(id string) error {
	if id == "" {
		return fmt.Errorf("invalid sandbox id: empty")
	}
	if len(id) > maxIDLen {
		return fmt.Errorf("invalid sandbox id %.20q...: longer than %d characters", id, maxIDLen)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_':
		default:
			return fmt.Errorf("invalid sandbox id %q: only letters, digits, '-' and '_' are allowed", id)
		}
	}
	return nil
}

// maxNameLen bounds a sandbox's name.
const maxNameLen = 128

// ValidateName checks a sandbox's name as docker checks a container's:
// a letter or digit, then letters, digits, '_', '.' and '-'.
func ValidateName(name string) error {
	if name == "" || len(name) > maxNameLen {
		return fmt.Errorf("invalid sandbox name %.20q: it must be 1 to %d characters", name, maxNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case i > 0 && (c == '_' || c == '.' || c == '-'):
		default:
			return fmt.Errorf("invalid sandbox name %q: a letter or digit, then letters, digits, '_', '.' or '-'", name)
		}
	}
	return nil
}

// userError is an error with a message for the user that still matches a
// sentinel with errors.Is.
type userError struct {
	msg  string
	kind error
}

func (e *userError) Error() string { return e.msg }
func (e *userError) Unwrap() error { return e.kind }

func errorf(kind error, format string, args ...any) error {
	return &userError{msg: fmt.Sprintf(format, args...), kind: kind}
}
