package vm

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/state"
)

// privatePrefix begins the name of a VM's private directory (its
// sockets, its ramdisk, QEMU's empty root), in the system's temporary
// directory, followed by the sandbox's id.
const privatePrefix = "airlock-vm-"

// ownerFile, in a VM's private directory, names the supervisor that made
// it: its pid and start time.
const ownerFile = "owner"

// writeOwner records this process as the owner of dir.
func writeOwner(dir string) error {
	start, err := state.ProcessStartTime(os.Getpid())
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, ownerFile), fmt.Appendf(nil, "%d %d\n", os.Getpid(), start), 0o600)
}

// Sweep removes the private directories of VMs whose supervisor died
// (by SIGKILL, say) and returns their sandboxes' ids. QEMU itself died
// with its supervisor; nothing else of a VM is on the host.
func Sweep() []string {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), privatePrefix+"*"))
	var ids []string
	for _, d := range dirs {
		if id, ok := orphan(d); ok && os.RemoveAll(d) == nil {
			ids = append(ids, id)
		}
	}
	return ids
}

// Reclaim removes the private directories of sandbox id's VMs, whose
// supervisor is known to be gone.
func Reclaim(id string) error {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), privatePrefix+id+"-*"))
	for _, d := range dirs {
		if err := os.RemoveAll(d); err != nil {
			return err
		}
	}
	return nil
}

// orphan reports whether private directory d belongs to a supervisor
// that is gone, and the sandbox id its name holds.
func orphan(d string) (string, bool) {
	name := strings.TrimPrefix(filepath.Base(d), privatePrefix)
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
