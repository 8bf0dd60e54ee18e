package gvisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strconv"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
	"github.com/airlock-sandbox/airlock/internal/boundary"
	"github.com/airlock-sandbox/airlock/internal/diskfs"
	"github.com/airlock-sandbox/airlock/internal/vfsfuse"
)

// mountsInside is where the bundle puts the host's mounts of a
// sandbox's programmable mounts, which the agent binds at their targets.
const mountsInside = "/.airlock/mounts"

// Programmable mounts (and host directories, served as real_fs mounts)
// reach the Sentry through its gofer, from FUSE mounts that the
// supervisor serves itself. Each is made detached (fsmount) and attached
// only in the mount namespace that runsc runs in (the join-cgroups
// helper attaches it there before it executes runsc), so no host
// process sees it, and it goes with runsc even when the supervisor is
// killed. The Sentry's own FUSE client, which the agent's file server
// would speak to as at the other levels, has no mmap (git fails),
// cannot open FIFOs or connect to sockets on a mount, and takes ~60 ms
// a file; through the gofer, the Sentry treats the mount as any host
// directory. The gofer touches only the FUSE mount, whose every answer
// comes from the provider: nothing of the host's own files is behind it.

// diskInside is where the bundle puts the sandbox's disk-backed writable
// tree, when it has one.
const diskInside = "/.airlock/disk"

// attachDisk makes the sandbox's writable tree a disk-backed filesystem
// (a sparse file beneath spec.DiskDir: --disk larger than memory
// allows), attached beside its programmable mounts in runsc's mount
// namespace, which the bundle hands to the Sentry and the agent binds as
// the tree. Its root belongs to the sandbox's root.
func (s *Sandbox) attachDisk(ctx context.Context, spec boundary.Spec, shift vfsfuse.IDShift, boot *agentproto.Boot) error {
	if spec.DiskDir == "" {
		return nil
	}
	base, err := s.mountsDir(shift)
	if err != nil {
		return err
	}
	root := 0
	if shift.Size > 0 {
		root = int(shift.Base)
	}
	s.disk, err = diskfs.Make(ctx, diskfs.Spec{Dir: spec.DiskDir, SizeBytes: boot.Root.SizeBytes, Inodes: boot.Root.Inodes, UID: root, GID: root, Name: spec.ID, SetID: !boot.Hardening.NoRootCaps})
	if err != nil {
		return fmt.Errorf("make the sandbox's disk of %d MiB: %w", boot.Root.SizeBytes>>20, err)
	}
	at := filepath.Join(base, "disk")
	if err := os.Mkdir(at, 0o700); err != nil {
		return fmt.Errorf("make the mount point of the sandbox's disk: %w", err)
	}
	s.attach = append(s.attach, attachSpec{mount: s.disk.Mount(), at: at, inside: diskInside})
	boot.Root.DiskPath = diskInside
	return nil
}

// mountsDir makes, once, the directory that holds the host's mounts of
// the sandbox's trees. The mounts let every user in (the gofer's ids are
// not the supervisor's), so it lets in only root and the gofer: its
// group is the sandbox's root group when the sandbox's ids are a block
// of the host's.
func (s *Sandbox) mountsDir(shift vfsfuse.IDShift) (string, error) {
	base := filepath.Join(s.dir, "mounts")
	if s.madeMountsDir {
		return base, nil
	}
	if err := os.Mkdir(base, 0o700); err != nil {
		return "", fmt.Errorf("make the directory of the sandbox's mounts: %w", err)
	}
	if shift.Size > 0 {
		if err := os.Chown(base, 0, int(shift.Base)); err != nil {
			return "", fmt.Errorf("give the directory of the sandbox's mounts to its ids: %w", err)
		}
		if err := os.Chmod(base, 0o710); err != nil {
			return "", fmt.Errorf("give the directory of the sandbox's mounts to its ids: %w", err)
		}
	}
	s.madeMountsDir = true
	return base, nil
}

// attachSpec is a detached mount that the join-cgroups helper attaches
// at a directory of the host (in runsc's mount namespace only), which
// the bundle binds, writable, inside.
type attachSpec struct {
	mount  *os.File
	at     string
	inside string
}

// serveMounts makes a FUSE mount of each of ms and serves it, with the
// sandbox's ids shifted to the host's as its user namespace maps them,
// for runsc's mount namespace, and has the agent bind each at its
// target.
func (s *Sandbox) serveMounts(ms []boundary.Mount, shift vfsfuse.IDShift, boot *agentproto.Boot, log *slog.Logger) error {
	if len(ms) == 0 {
		return nil
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: the gvisor level serves programmable mounts and host directories (--mount, -v, vfs) to the Sentry from FUSE mounts, which only root can make here: run as root, or use --isolation process", boundary.ErrUnavailable)
	}
	base, err := s.mountsDir(shift)
	if err != nil {
		return err
	}
	for i, m := range ms {
		at := filepath.Join(base, strconv.Itoa(i))
		if err := os.Mkdir(at, 0o700); err != nil {
			return fmt.Errorf("mount %s: make its mount point: %w", m.Target, err)
		}
		srv, mnt, err := serveOne(m, shift, log)
		if err != nil {
			return fmt.Errorf("mount %s: %w", m.Target, err)
		}
		s.servers = append(s.servers, srv)
		conn, err := vfsfuse.ConnectionOf(mnt)
		if err != nil {
			mnt.Close()
			return fmt.Errorf("mount %s: %w", m.Target, err)
		}
		s.conns = append(s.conns, conn)
		inside := path.Join(mountsInside, strconv.Itoa(i))
		s.attach = append(s.attach, attachSpec{mount: mnt, at: at, inside: inside})
		boot.Root.Direct = append(boot.Root.Direct, agentproto.DirectMount{Target: m.Target, HostPath: inside})
	}
	return nil
}

// serveOne makes a detached FUSE mount of m and serves it.
func serveOne(m boundary.Mount, shift vfsfuse.IDShift, log *slog.Logger) (*vfsfuse.Server, *os.File, error) {
	dev, err := vfsfuse.OpenDevice(nil)
	if err != nil {
		return nil, nil, err
	}
	mnt, err := vfsfuse.MountDetached(dev)
	if err != nil {
		dev.Close()
		return nil, nil, err
	}
	// The server owns dev from here (its Close closes it).
	srv, err := vfsfuse.Serve(dev, m.Provider, vfsfuse.Options{IDs: shift, Logger: log.With("mount", m.Target)})
	if err != nil {
		mnt.Close()
		dev.Close()
		return nil, nil, err
	}
	return srv, mnt, nil
}

// abortMounts ends the connections of the sandbox's mounts: every
// request still waiting on one fails, so that no process of the sandbox
// (the gofer) waits for a provider once it is killed.
func (s *Sandbox) abortMounts() {
	for _, c := range s.conns {
		if err := c.Abort(); err != nil {
			s.log.Debug("programmable mount: abort its connection", "err", err)
		}
	}
}

// closeMounts stops the servers of the sandbox's mounts, any request
// still waiting on one failing, and releases its disk; their mounts went
// with runsc's mount namespace.
func (s *Sandbox) closeMounts() error {
	var errs []error
	for _, a := range s.attach {
		if s.disk == nil || a.mount != s.disk.Mount() {
			a.mount.Close()
		}
	}
	s.attach = nil
	for _, srv := range s.servers {
		if err := srv.Close(); err != nil {
			errs = append(errs, fmt.Errorf("stop a mount's server: %w", err))
		}
	}
	s.servers = nil
	if s.disk != nil {
		if err := s.disk.Close(); err != nil {
			errs = append(errs, fmt.Errorf("release the sandbox's disk: %w", err))
		}
		s.disk = nil
	}
	return errors.Join(errs...)
}
