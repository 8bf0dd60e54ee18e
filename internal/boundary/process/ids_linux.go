package process

import (
	"context"
	"fmt"
	"os"
	"syscall"

	"github.com/airlock-sandbox/airlock/internal/idalloc"
	"github.com/airlock-sandbox/airlock/internal/subid"
)

// idMapping is how a sandbox's uids and gids map to the host's.
type idMapping struct {
	uids, gids []syscall.SysProcIDMap
	// helpers, when set, are the newuidmap and newgidmap that must
	// write the maps (an unprivileged caller's subordinate ids).
	helpers *subid.IDs
	// lease holds the block under root.
	lease *idalloc.Lease
	// why says, for an unprivileged caller left with its own ids only,
	// what stopped it from having more (empty when nothing was asked).
	why string
}

// root is the host uid and gid of the sandbox's root, which owns its
// user namespace.
func (m idMapping) root() (uid, gid int) { return m.uids[0].HostID, m.gids[0].HostID }

// size is how many uids the sandbox has.
func (m idMapping) size() int {
	n := 0
	for _, e := range m.uids {
		n += e.Size
	}
	return n
}

// single maps root inside to the host's uid and gid alone.
func single(uid, gid int) idMapping {
	return idMapping{
		uids: []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}},
		gids: []syscall.SysProcIDMap{{ContainerID: 0, HostID: gid, Size: 1}},
	}
}

// hostIDs decides the ids of sandbox id. Under root it reserves a block
// of SandboxIDs host ids, unique among running sandboxes, for as long as
// this process lives or until the lease is released; ids 0 to
// SandboxIDs-1 inside are that block, uids and gids alike. An
// unprivileged caller maps its own uid and gid to root and, when it has
// subordinate ids (/etc/subuid, /etc/subgid) and newuidmap and
// newgidmap, up to SandboxIDs-1 of them to ids 1 and up, as rootless
// container engines do; without them, its own ids alone.
func hostIDs(ctx context.Context, id string) (idMapping, error) {
	if os.Getuid() != 0 {
		return callerIDs(), nil
	}
	l, err := ReserveIDs(ctx, id)
	if err != nil {
		return idMapping{}, err
	}
	block := []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(l.First), Size: int(l.Count)}}
	return idMapping{uids: block, gids: block, lease: l}, nil
}

// callerIDs is an unprivileged caller's mapping.
func callerIDs() idMapping {
	uid, gid := os.Getuid(), os.Getgid()
	m := single(uid, gid)
	sub, err := subid.Lookup(uid)
	if err != nil {
		m.why = err.Error()
		return m
	}
	m.uids, m.gids = sub.Maps(uid, gid)
	m.helpers = &sub
	return m
}

// ReserveIDs reserves, as root, a block of SandboxIDs host ids for
// sandbox id, unique among running sandboxes of every level, held until
// the lease is released or this process exits: the ids another boundary
// maps its sandbox's 0 to SandboxIDs-1 to.
func ReserveIDs(ctx context.Context, id string) (*idalloc.Lease, error) {
	reg, err := idalloc.Open(HostIDsDir, SandboxUIDBase, SandboxUIDRange)
	if err != nil {
		return nil, fmt.Errorf("reserve the sandbox's host ids: %w", err)
	}
	owner, err := idalloc.Self(id)
	if err != nil {
		return nil, fmt.Errorf("reserve the sandbox's host ids: %w", err)
	}
	l, err := reg.Allocate(ctx, owner, SandboxIDs)
	if err != nil {
		return nil, fmt.Errorf("reserve the sandbox's host ids: %w", err)
	}
	return l, nil
}
