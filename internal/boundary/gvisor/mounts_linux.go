package gvisor

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strconv"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
	"github.com/airlock-sandbox/airlock/internal/boundary"
	"github.com/airlock-sandbox/airlock/internal/vfsfuse"
)

// mountsInside is where the bundle puts the host's mounts of a
// sandbox's programmable mounts, which the agent binds at their targets.
const mountsInside = "/.airlock/mounts"

// Programmable mounts (and host directories, served as real_fs mounts)
// reach the Sentry through its gofer, from FUSE mounts that the
// supervisor makes on the host and serves itself. The Sentry's own FUSE
// client, which the agent's file server would speak to as at the other
// levels, has no mmap (git fails), cannot open FIFOs or connect to
// sockets on a mount, and takes ~60 ms a file; through the gofer, the
// Sentry treats the mount as any host directory. The gofer touches only
// the FUSE mount, whose every answer comes from the provider: nothing of
// the host's own files is behind it.

// hostMount is one served mount.
type hostMount struct {
	dir    string // the FUSE mount on the host
	inside string // where the bundle puts it
	srv    *vfsfuse.Server
}

// serveMounts mounts each of ms under dir and serves it, with the
// sandbox's ids shifted to the host's as its user namespace maps them,
// and has the agent bind each at its target.
func (s *Sandbox) serveMounts(dir string, ms []boundary.Mount, shift vfsfuse.IDShift, boot *agentproto.Boot, log *slog.Logger) error {
	if len(ms) == 0 {
		return nil
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: the gvisor level serves programmable mounts and host directories (--mount, -v, vfs) to the Sentry from FUSE mounts on the host, which only root can make here: run as root, or use --isolation process", boundary.ErrUnavailable)
	}
	// The mounts let every user in (allow_other: the gofer's ids are
	// not the supervisor's), so the directory above them lets in only
	// root and the gofer: its group is the sandbox's root group when the
	// sandbox's ids are a block of the host's.
	base := filepath.Join(dir, "mounts")
	if err := os.Mkdir(base, 0o700); err != nil {
		return fmt.Errorf("make the directory of the sandbox's mounts: %w", err)
	}
	if shift.Size > 0 {
		if err := os.Chown(base, 0, int(shift.Base)); err != nil {
			return fmt.Errorf("give the directory of the sandbox's mounts to its ids: %w", err)
		}
		if err := os.Chmod(base, 0o710); err != nil {
			return fmt.Errorf("give the directory of the sandbox's mounts to its ids: %w", err)
		}
	}
	for i, m := range ms {
		hm := hostMount{dir: filepath.Join(base, strconv.Itoa(i)), inside: path.Join(mountsInside, strconv.Itoa(i))}
		if err := os.Mkdir(hm.dir, 0o700); err != nil {
			return fmt.Errorf("mount %s: make its mount point: %w", m.Target, err)
		}
		srv, err := serveOne(hm.dir, m, shift, log)
		if err != nil {
			return fmt.Errorf("mount %s: %w", m.Target, err)
		}
		hm.srv = srv
		s.mounts = append(s.mounts, hm)
		boot.Root.Direct = append(boot.Root.Direct, agentproto.DirectMount{Target: m.Target, HostPath: hm.inside})
	}
	return nil
}

func serveOne(dir string, m boundary.Mount, shift vfsfuse.IDShift, log *slog.Logger) (*vfsfuse.Server, error) {
	dev, err := vfsfuse.OpenDevice(nil)
	if err != nil {
		return nil, err
	}
	if err := vfsfuse.Mount(dev, dir); err != nil {
		dev.Close()
		return nil, err
	}
	// The server owns dev from here (its Close closes it).
	srv, err := vfsfuse.Serve(dev, m.Provider, vfsfuse.Options{IDs: shift, Logger: log.With("mount", m.Target)})
	if err != nil {
		_ = vfsfuse.Unmount(dir)
		dev.Close()
		return nil, err
	}
	// The process that serves the mount may open its files too (a
	// program embedding airlock, its tests).
	if err := vfsfuse.PollOnce(dir); err != nil {
		_ = vfsfuse.Unmount(dir)
		srv.Close()
		return nil, err
	}
	return srv, nil
}

// closeMounts detaches the sandbox's mounts from the host and stops
// their servers; any request still waiting on one fails.
func (s *Sandbox) closeMounts() error {
	var errs []error
	for _, m := range s.mounts {
		if err := vfsfuse.Unmount(m.dir); err != nil {
			errs = append(errs, err)
		}
		if err := m.srv.Close(); err != nil {
			errs = append(errs, fmt.Errorf("stop the server of %s: %w", m.dir, err))
		}
	}
	s.mounts = nil
	return errors.Join(errs...)
}
