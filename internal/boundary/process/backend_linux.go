package process

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
	"github.com/airlock-sandbox/airlock/internal/boundary"
	"github.com/airlock-sandbox/airlock/internal/cgroup"
	"github.com/airlock-sandbox/airlock/internal/tap"
	"github.com/airlock-sandbox/airlock/internal/vfsfuse"
)

// Backend is the process boundary behind the seam: Linux namespaces,
// seccomp, landlock and cgroups around the agent, which runs as a host
// process.
type Backend struct{}

var _ boundary.Backend = Backend{}

// CheckNetwork says whether this process can give a sandbox its network
// interface, a TAP device in the sandbox's network namespace: as root, the
// supervisor makes it there itself; otherwise the agent makes it (it is
// root in the sandbox's namespaces) and sends it back, which needs
// /dev/net/tun to be open to the caller (the sandbox's root is the
// caller's uid).
func (Backend) CheckNetwork() error {
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		return fmt.Errorf("%w: network egress needs /dev/net/tun (%v): load the tun module (modprobe tun)", boundary.ErrUnavailable, err)
	}
	if os.Geteuid() == 0 {
		return nil
	}
	f, err := os.OpenFile("/dev/net/tun", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("%w: network egress without root needs /dev/net/tun to be open to uid %d, and it is not (%v): `sudo chmod 0666 /dev/net/tun` (the default on most distributions; a udev rule keeps it), or run airlock as root (`airlock doctor` shows what this machine supports)", boundary.ErrUnavailable, os.Geteuid(), err)
	}
	f.Close()
	return nil
}

// BindsHostDirs: the agent binds direct mounts from descriptors the
// host opened.
func (Backend) BindsHostDirs() bool { return true }

// ServesMounts: the agent mounts them and hands their FUSE devices to
// the supervisor, which serves them (see hostVFS).
func (Backend) ServesMounts() bool { return true }

// Start starts the agent in new namespaces. With spec.Link, the TAP
// device is made while the agent boots: from here as root, by the agent
// otherwise (Link receives it after the handshake).
func (Backend) Start(ctx context.Context, spec boundary.Spec, boot *agentproto.Boot) (boundary.Sandbox, error) {
	o := Options{
		ID: spec.ID, AgentPath: spec.AgentPath, DiskDir: spec.DiskDir, Log: spec.Log,
		Limits: cgroup.Limits{MemoryBytes: spec.Limits.MemoryBytes, Pids: spec.Limits.Pids, CPUs: spec.Limits.CPUs},
		Mounts: spec.Mounts,
		// Served from here, a request costs two copies and no socket:
		// the largest requests the kernel makes halve a sequential
		// transfer's round trips.
		VFS: vfsfuse.Options{
			MaxWrite: vfsfuse.LargestWrite, MaxReadAhead: vfsfuse.LargestWrite, Passthrough: true,
			Writeback: os.Getenv("AIRLOCK_VFS_WRITEBACK") == "1", Serial: os.Getenv("AIRLOCK_VFS_SERIAL") == "1",
		},
	}
	l := spec.Link
	byAgent := l != nil && os.Geteuid() != 0
	if byAgent {
		boot.Link = &agentproto.LinkSpec{
			Name: l.Name, Address: l.Address.String(), Gateway: l.Gateway.String(),
			AddressV6: l.AddressV6.String(), GatewayV6: l.GatewayV6.String(), MTU: l.MTU,
		}
	}
	s, err := Start(ctx, o, boot)
	if err != nil {
		return nil, err
	}
	if l != nil && !byAgent {
		s.tapFile, err = tap.Create(s.PID(), tap.Config{
			Name: l.Name, Address: l.Address, Gateway: l.Gateway, AddressV6: l.AddressV6, GatewayV6: l.GatewayV6, MTU: l.MTU,
		})
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("make the sandbox's network interface: %w", err)
		}
	}
	return s, nil
}

// Link hands over the TAP device's file: the one made from here, or the
// one the agent sends.
func (s *Sandbox) Link(ctx context.Context) (*os.File, error) {
	if f := s.tapFile; f != nil {
		s.tapFile = nil
		return f, nil
	}
	if s.link == nil {
		return nil, errors.New("the sandbox was started without a network interface")
	}
	return s.ReceiveLink(ctx)
}
