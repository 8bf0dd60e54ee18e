package process

import (
	"hash/fnv"
	"os"
)

// Sandbox uids: when airlock runs as root, root inside a sandbox maps to an
// unprivileged host uid of its own in [SandboxUIDBase, SandboxUIDBase +
// SandboxUIDRange), not to root: whatever reaches the host through the
// kernel then carries no privilege, and sandboxes differ from each other.
// An unprivileged caller can only map its own uid.
const (
	SandboxUIDBase  = 1_000_000_000
	SandboxUIDRange = 1_000_000
)

// HostIDs returns the host uid and gid that root inside sandbox id maps to
// (for the default root; see Start for --rootfs).
func HostIDs(id string) (uid, gid int) {
	if os.Getuid() != 0 {
		return os.Getuid(), os.Getgid()
	}
	h := fnv.New32a()
	h.Write([]byte(id))
	n := SandboxUIDBase + int(h.Sum32()%SandboxUIDRange)
	return n, n
}
