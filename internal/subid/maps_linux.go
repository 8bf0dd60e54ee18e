package subid

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

// HelperTimeout bounds one run of newuidmap or newgidmap.
const HelperTimeout = 30 * time.Second

// Maps are the uid and gid maps of a user namespace made by the user
// with host ids uid and gid: its own ids are root there, and its
// subordinate ids are 1 and up, as rootless container engines map
// them. Sandboxes and the image trees they run on are mapped alike, so
// that a file an image gives to id n belongs to n inside.
func (ids IDs) Maps(uid, gid int) (uids, gids []syscall.SysProcIDMap) {
	uids = []syscall.SysProcIDMap{
		{ContainerID: 0, HostID: uid, Size: 1},
		{ContainerID: 1, HostID: int(ids.UID.First), Size: int(ids.UID.Count)},
	}
	gids = []syscall.SysProcIDMap{
		{ContainerID: 0, HostID: gid, Size: 1},
		{ContainerID: 1, HostID: int(ids.GID.First), Size: int(ids.GID.Count)},
	}
	return uids, gids
}

// WriteMaps writes the maps of the user namespace of process pid with
// newuidmap and newgidmap, which only they may write for subordinate
// ids. Each run is bounded by HelperTimeout.
func (ids IDs) WriteMaps(ctx context.Context, pid int, uids, gids []syscall.SysProcIDMap) error {
	ctx, cancel := context.WithTimeout(ctx, HelperTimeout)
	defer cancel()
	if err := runHelper(ctx, ids.UIDHelper, pid, uids); err != nil {
		return err
	}
	return runHelper(ctx, ids.GIDHelper, pid, gids)
}

// runHelper runs newuidmap or newgidmap to write the map of process pid.
func runHelper(ctx context.Context, helper string, pid int, m []syscall.SysProcIDMap) error {
	args := []string{strconv.Itoa(pid)}
	for _, e := range m {
		args = append(args, strconv.Itoa(e.ContainerID), strconv.Itoa(e.HostID), strconv.Itoa(e.Size))
	}
	c := exec.CommandContext(ctx, helper, args...)
	c.Env = []string{}
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	if err := c.Run(); err != nil {
		msg := bytes.TrimSpace(out.Bytes())
		if len(msg) > 512 {
			msg = msg[:512]
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("%w (after %s)", err, HelperTimeout)
		}
		return fmt.Errorf("%s %v: %w: %s", helper, args, err, msg)
	}
	return nil
}
