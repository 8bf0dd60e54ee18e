// Package privdir makes a sandbox's private directory on the host (its
// sockets, state and generated files, in the system's temporary
// directory), records which supervisor owns it, and removes those whose
// supervisor is gone. A backend whose every other resource dies with its
// supervisor needs nothing else swept.
package privdir

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/state"
)

// ownerFile, in a private directory, names the supervisor that made it:
// its pid and start time.
const ownerFile = "owner"

// Make makes a private directory named prefix, then id, then a dash and
// a random suffix, owned by this process.
func Make(prefix, id string) (string, error) {
	dir, err := os.MkdirTemp("", prefix+id+"-")
	if err != nil {
		return "", err
	}
	if err := writeOwner(dir); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// writeOwner records this process as the owner of dir. The record
// appears whole (written aside, then renamed): a sweep by another
// process that read it half written would take the directory for an
// orphan's and remove it under its sandbox.
func writeOwner(dir string) error {
	start, err := state.ProcessStartTime(os.Getpid())
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, ownerFile+".new")
	if err := os.WriteFile(tmp, fmt.Appendf(nil, "%d %d\n", os.Getpid(), start), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, ownerFile))
}

// Sweep removes the private directories named with prefix whose
// supervisor died (by SIGKILL, say) and returns their sandboxes' ids.
func Sweep(prefix string) []string {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), prefix+"*"))
	var ids []string
	for _, d := range dirs {
		if id, ok := orphan(prefix, d); ok && Remove(d) == nil {
			ids = append(ids, id)
		}
	}
	return ids
}

// Remove removes private directory dir, detaching first any mount left
// beneath it (a backend's processes mount in namespaces of their own,
// but one that did not, or a version of airlock before, may have left
// one in the host's).
func Remove(dir string) error {
	err := os.RemoveAll(dir)
	if err == nil {
		return nil
	}
	if !detachUnder(dir) {
		return err
	}
	return os.RemoveAll(dir)
}

// Reclaim removes the private directories named with prefix of sandbox
// id, whose supervisor is known to be gone.
func Reclaim(prefix, id string) error {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), prefix+id+"-*"))
	for _, d := range dirs {
		if err := Remove(d); err != nil {
			return err
		}
	}
	return nil
}

// orphan reports whether private directory d belongs to a supervisor
// that is gone, and the sandbox id its name holds.
func orphan(prefix, d string) (string, bool) {
	name := strings.TrimPrefix(filepath.Base(d), prefix)
	i := strings.LastIndexByte(name, '-')
	if i <= 0 {
		return "", false
	}
	id := name[:i]
	b, err := os.ReadFile(filepath.Join(d, ownerFile))
	if err != nil {
		// A directory being made has no owner yet: leave it.
		return "", false
	}
	var pid int
	var start uint64
	if _, err := fmt.Sscan(string(b), &pid, &start); err != nil {
		return id, true
	}
	return id, !state.Alive(pid, start)
}
