package airlock

import (
	"context"
	"fmt"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
)

// ContainerSpec describes a container of a sandbox: a process tree on a
// root of its own, inside the sandbox and under its confinement, limits
// and network, as the containers of a Kubernetes pod share one sandbox.
// Its commands (Command.Container) see Root as /, a /dev that is the
// sandbox's, a /proc of their own PID namespace (they see no process of
// the sandbox's or of another container's), and Binds; nothing else of
// the sandbox's files.
type ContainerSpec struct {
	// Root is a directory of the sandbox: a programmable mount that
	// serves a container image's tree, say, or a directory of
	// /workspace. Paths in it are resolved in it, symlinks included.
	Root string
	// Binds are files and directories of the sandbox bound into Root:
	// a volume that containers share, or /etc/resolv.conf.
	Binds []ContainerBind
}

// ContainerBind binds a file or directory of the sandbox (Source) at
// Target in a container's root, made if missing.
type ContainerBind struct {
	Source, Target string
	ReadOnly       bool
}

// AddContainer adds container name (1-64 letters, digits, '.', '-' or
// '_') to the sandbox.
func (s *Sandbox) AddContainer(ctx context.Context, name string, spec ContainerSpec) error {
	req := &agentproto.ContainerRequest{Name: name, Root: spec.Root}
	for _, b := range spec.Binds {
		req.Binds = append(req.Binds, agentproto.Bind{Source: b.Source, Target: b.Target, ReadOnly: b.ReadOnly})
	}
	if err := s.containerOp(ctx, req); err != nil {
		return fmt.Errorf("add container %s to sandbox %s: %w", name, s.id, err)
	}
	return nil
}

// RemoveContainer removes container name, killing every process in it.
// Its root and binds stay as they are in the sandbox.
func (s *Sandbox) RemoveContainer(ctx context.Context, name string) error {
	req := &agentproto.ContainerRequest{Name: name, Remove: true}
	if err := s.containerOp(ctx, req); err != nil {
		return fmt.Errorf("remove container %s of sandbox %s: %w", name, s.id, err)
	}
	return nil
}

func (s *Sandbox) containerOp(ctx context.Context, req *agentproto.ContainerRequest) error {
	st, err := s.open(ctx, agentproto.Request{Op: agentproto.OpContainer, Container: req})
	if err != nil {
		return err
	}
	defer st.Close()
	var m agentproto.Msg
	return s.readReply(ctx, st.c, &m)
}
