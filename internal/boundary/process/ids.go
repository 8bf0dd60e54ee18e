package process

import (
	"context"
	"fmt"
	"os"

	"github.com/airlock-sandbox/airlock/internal/idalloc"
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

// HostIDsDir is the registry (see package idalloc) of the host uids that
// running sandboxes hold when airlock runs as root. The uids are the
// host's, shared by every airlock process whatever its state directory,
// so there is one registry per host; it lives on /run, a tmpfs, as no
// sandbox outlives a boot.
const HostIDsDir = "/run/airlock/ids"

// hostIDs reserves the host uid and gid that root inside sandbox id maps
// to (for the default root; see Start for --rootfs), unique among running
// sandboxes, for as long as this process lives or until the lease is
// released. An unprivileged caller gets its own ids and no lease.
func hostIDs(ctx context.Context, id string) (uid, gid int, lease *idalloc.Lease, err error) {
	if os.Getuid() != 0 {
		return os.Getuid(), os.Getgid(), nil, nil
	}
	reg, err := idalloc.Open(HostIDsDir, SandboxUIDBase, SandboxUIDRange)
	if err != nil {
		return 0, 0, nil, fmt.Errorf("reserve the sandbox's host uid: %w", err)
	}
	owner, err := idalloc.Self(id)
	if err != nil {
		return 0, 0, nil, fmt.Errorf("reserve the sandbox's host uid: %w", err)
	}
	l, err := reg.Allocate(ctx, owner, 1)
	if err != nil {
		return 0, 0, nil, fmt.Errorf("reserve the sandbox's host uid: %w", err)
	}
	return int(l.First), int(l.First), l, nil
}
