package cgroup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// freezeTimeout bounds how long Freeze waits for the kernel to report
// every process frozen when its caller gives no deadline: a task the
// v1 freezer cannot stop (in an uninterruptible wait) keeps the group
// FREEZING for as long as it waits.
const freezeTimeout = 10 * time.Second

// Freeze stops every process of both groups where it is, until Thaw:
// they get no CPU and do not notice until they run again. It returns
// once the kernel reports all of them frozen; when that does not happen
// before ctx ends (or freezeTimeout), the groups are thawed again and
// the error says so. An error wrapping errors.ErrUnsupported says the
// kernel offers no freezer to this group (v1 without the freezer
// hierarchy, v2 before Linux 5.2).
func (g *Group) Freeze(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, freezeTimeout)
		defer cancel()
	}
	state, frozen, err := g.impl.freezer()
	if err != nil {
		return err
	}
	if err := os.WriteFile(state.path, state.freeze, 0); err != nil {
		return fmt.Errorf("freeze cgroup %s: %w", g.id, err)
	}
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		b, err := os.ReadFile(frozen.path)
		if err == nil && frozen.isFrozen(b) {
			return nil
		}
		if err != nil && !errors.Is(err, unix.EINTR) {
			_ = g.Thaw()
			return fmt.Errorf("freeze cgroup %s: read %s: %w", g.id, frozen.path, err)
		}
		select {
		case <-ctx.Done():
			_ = g.Thaw()
			return fmt.Errorf("freeze cgroup %s: its processes were not all frozen in time (one may be in an uninterruptible wait): %w", g.id, context.Cause(ctx))
		case <-time.After(wait):
		}
	}
}

// Thaw lets the processes Freeze stopped run again. Thawing a group
// that is not frozen does nothing.
func (g *Group) Thaw() error {
	state, _, err := g.impl.freezer()
	if err != nil {
		return err
	}
	if err := os.WriteFile(state.path, state.thaw, 0); err != nil {
		return fmt.Errorf("thaw cgroup %s: %w", g.id, err)
	}
	return nil
}

// freezeFile is the file that freezes a group, and what to write there.
type freezeFile struct {
	path         string
	freeze, thaw []byte
}

// frozenFile is the file that tells whether a group is frozen.
type frozenFile struct {
	path     string
	isFrozen func([]byte) bool
}
