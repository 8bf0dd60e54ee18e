package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// ErrDamaged is wrapped by the errors of Update when a sandbox's
// state.json cannot be read: missing, empty, truncated, not a record of
// that sandbox, not a regular file, or too large.
var ErrDamaged = errors.New("damaged sandbox record")

// errLockFile is wrapped by lockSandbox's errors when the lock file
// cannot be opened (it is missing on a full disk, or not a regular file).
var errLockFile = errors.New("lock")

// damageError says what is wrong with a state.json.
type damageError struct{ cause error }

func (e *damageError) Error() string   { return stateFile + " is damaged: " + e.cause.Error() }
func (e *damageError) Unwrap() []error { return []error{ErrDamaged, e.cause} }

func damaged(cause error) error {
	if errors.Is(cause, fs.ErrNotExist) {
		cause = errors.New("it is missing")
	}
	return &damageError{cause: cause}
}

// supervisorInfo is supervisor.json: the part of a Record that is known
// when the sandbox is registered and never changes.
type supervisorInfo struct {
	Supervisor Supervisor `json:"supervisor"`
	Kind       string     `json:"kind,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	Isolation  string     `json:"isolation,omitempty"`
	Image      string     `json:"image,omitempty"`
	Command    []string   `json:"command,omitempty"`
}

func readSupervisorInfo(sub *os.Root) (supervisorInfo, error) {
	b, err := readBounded(sub, supervisorFile, maxStateSize)
	if err != nil {
		return supervisorInfo{}, err
	}
	var info supervisorInfo
	if err := json.Unmarshal(b, &info); err != nil {
		return supervisorInfo{}, fmt.Errorf("%s: %w", supervisorFile, err)
	}
	if info.Supervisor.PID <= 0 {
		return supervisorInfo{}, fmt.Errorf("%s names no supervisor", supervisorFile)
	}
	return info, nil
}

// fromFolder is the record of sandbox id, whose state.json is damaged
// (cause), as far as its folder tells without it: its supervisor, kind
// and creation from supervisor.json, and whether it runs from that
// supervisor being alive (and, for an rpc server, which outlives the
// sandboxes it closes, from its control socket still being there). When
// supervisor.json cannot be read either, the process serving the control
// socket, if any, is the supervisor. Damaged says what is wrong and what
// to do.
func (s *Store) fromFolder(sub *os.Root, id string, cause error) Record {
	rec := Record{ID: id, Status: StatusCrashed, Reason: ReasonUnreadable}
	info, infoErr := readSupervisorInfo(sub)
	if infoErr == nil {
		rec.Supervisor, rec.Kind, rec.CreatedAt = info.Supervisor, info.Kind, info.CreatedAt
		rec.Isolation, rec.Image, rec.Command = info.Isolation, info.Image, info.Command
	} else if fi, err := sub.Stat("."); err == nil {
		rec.CreatedAt = fi.ModTime()
	}
	switch {
	case infoErr == nil && info.Supervisor.Alive():
		// A detached supervisor keeps its sandbox as long as it lives;
		// an rpc one removes the socket when it closes the sandbox.
		if info.Kind == KindDetached || isSocket(sub, socketFile) {
			rec.Status, rec.Reason = StatusRunning, ""
		} else {
			rec.Status = StatusStopped
		}
	case infoErr != nil && isSocket(sub, socketFile):
		// Whoever serves the control socket supervises the sandbox.
		if pid, err := socketPeer(s.SocketPath(id)); err == nil {
			start, _ := ProcessStartTime(pid)
			rec.Supervisor = Supervisor{PID: pid, StartTime: start}
			rec.Status, rec.Reason = StatusRunning, ""
		}
	}
	var de *damageError
	if errors.As(cause, &de) {
		cause = de.cause
	}
	path := filepath.Join(s.Dir(id), stateFile)
	if rec.Status == StatusRunning {
		rec.Damaged = fmt.Sprintf("%s is damaged (%v); the sandbox still runs under its supervisor (pid %d), which writes the record anew when the sandbox stops: `airlock kill %s` stops it, `airlock rm -f %s` stops and removes it",
			path, cause, rec.Supervisor.PID, id, id)
	} else {
		rec.Damaged = fmt.Sprintf("%s is damaged (%v) and no supervisor serves the sandbox: `airlock rm %s` (or `airlock prune`) removes it and whatever it left",
			path, cause, id)
	}
	return rec
}

// isSocket reports whether name in root is a unix socket (not a link to
// one).
func isSocket(root *os.Root, name string) bool {
	fi, err := root.Lstat(name)
	return err == nil && fi.Mode()&fs.ModeSocket != 0
}
