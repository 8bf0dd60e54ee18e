//go:build linux

// Package ctrshim serves containerd's runtime v2 task API (task API v2,
// over ttrpc) with airlock sandboxes, so that containerd, and Kubernetes
// through it, runs containers in them: containerd-shim-airlock-v2.
package ctrshim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	eventstypes "github.com/containerd/containerd/api/events"
	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/containerd/api/types/task"
	"github.com/containerd/containerd/errdefs"
	"github.com/containerd/containerd/mount"
	"github.com/containerd/containerd/namespaces"
	"github.com/containerd/containerd/pkg/shutdown"
	"github.com/containerd/containerd/protobuf"
	"github.com/containerd/containerd/runtime"
	"github.com/containerd/containerd/runtime/v2/shim"
	"github.com/containerd/ttrpc"
	"github.com/containerd/typeurl/v2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/airlock-sandbox/airlock"
)

// createTimeout bounds the start of a sandbox (a vm's boot under
// emulation included).
const createTimeout = 5 * time.Minute

// Service is the task service of one shim process: the containers
// containerd gave it (one, or a pod's).
type Service struct {
	ctx       context.Context
	node      *NodeConfig
	publisher shim.Publisher
	shutdown  shutdown.Service
	log       *slog.Logger
	events    *eventLog

	mu         sync.Mutex
	containers map[string]*container
}

// container is a task: its sandbox, its init process and its execs.
type container struct {
	id, bundle string
	// rootfs is where the shim mounted the task's root, to unmount.
	rootfs  string
	mounted bool
	sb      *airlock.Sandbox
	init    *proc
	execs   map[string]*proc
}

// NewService is the task service, publishing events through publisher.
func NewService(ctx context.Context, publisher shim.Publisher, sd shutdown.Service) (*Service, error) {
	node, err := LoadNodeConfig()
	if err != nil {
		return nil, err
	}
	s := &Service{
		ctx: ctx, node: node, publisher: publisher, shutdown: sd,
		log:        slog.New(slog.NewTextHandler(os.Stderr, nil)),
		containers: map[string]*container{},
	}
	if node.EventLog != "" {
		if s.events, err = openEventLog(node.EventLog); err != nil {
			return nil, err
		}
		sd.RegisterCallback(func(context.Context) error { return s.events.close() })
	}
	sd.RegisterCallback(func(context.Context) error { return publisher.Close() })
	return s, nil
}

// RegisterTTRPC serves the task API on server.
func (s *Service) RegisterTTRPC(server *ttrpc.Server) error {
	taskapi.RegisterTaskService(server, s)
	return nil
}

// UnaryInterceptor gives every error the task API returns the gRPC code
// of its kind (errdefs' not found, already exists, failed precondition,
// not implemented...), which containerd and its clients act on.
func (s *Service) UnaryInterceptor() ttrpc.UnaryServerInterceptor {
	return func(ctx context.Context, unmarshal ttrpc.Unmarshaler, _ *ttrpc.UnaryServerInfo, method ttrpc.Method) (any, error) {
		resp, err := method(ctx, unmarshal)
		return resp, errdefs.ToGRPC(err)
	}
}

// SandboxID is the airlock id of the sandbox of containerd's task id:
// the id itself when airlock accepts it, else a digest of it.
func SandboxID(id string) string {
	if airlock.ValidID("ctr-" + id) {
		return "ctr-" + id
	}
	sum := sha256.Sum256([]byte(id))
	return "ctr-" + hex.EncodeToString(sum[:])[:32]
}

func (s *Service) get(id string) (*container, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.containers[id]
	if !ok {
		return nil, fmt.Errorf("task %s: %w", id, errdefs.ErrNotFound)
	}
	return c, nil
}

func (s *Service) process(id, execID string) (*container, *proc, error) {
	c, err := s.get(id)
	if err != nil {
		return nil, nil, err
	}
	if execID == "" {
		return c, c.init, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := c.execs[execID]
	if !ok {
		return nil, nil, fmt.Errorf("exec %s of task %s: %w", execID, id, errdefs.ErrNotFound)
	}
	return c, p, nil
}

// Create makes the task's sandbox, with its root from the task's rootfs
// mounts and its limits, policy and level from the bundle's spec; its
// process starts on Start.
func (s *Service) Create(ctx context.Context, r *taskapi.CreateTaskRequest) (_ *taskapi.CreateTaskResponse, retErr error) {
	s.mu.Lock()
	_, dup := s.containers[r.ID]
	s.mu.Unlock()
	if dup {
		return nil, fmt.Errorf("task %s: %w", r.ID, errdefs.ErrAlreadyExists)
	}
	spec, err := readSpec(filepath.Join(r.Bundle, "config.json"))
	if err != nil {
		return nil, err
	}
	if _, sandbox := podOf(r.ID, spec); sandbox || spec.Annotations[annotationContainerType] == containerTypeContainer {
		return nil, fmt.Errorf("task %s is part of a Kubernetes pod: %w", r.ID, errPods)
	}
	if r.Checkpoint != "" {
		return nil, fmt.Errorf("restore task %s from a checkpoint: airlock sandboxes cannot be checkpointed: %w", r.ID, errdefs.ErrNotImplemented)
	}
	cmd, err := command(spec.Process)
	if err != nil {
		return nil, fmt.Errorf("task %s: %w", r.ID, err)
	}
	c := &container{id: r.ID, bundle: r.Bundle, execs: map[string]*proc{}}
	c.rootfs = filepath.Join(r.Bundle, "rootfs")
	if len(r.Rootfs) > 0 {
		var mounts []mount.Mount
		for _, m := range r.Rootfs {
			mounts = append(mounts, mount.Mount{Type: m.Type, Source: m.Source, Target: m.Target, Options: m.Options})
		}
		if err := os.MkdirAll(c.rootfs, 0o711); err != nil {
			return nil, fmt.Errorf("task %s: make its root's mount point: %w", r.ID, err)
		}
		if err := mount.All(mounts, c.rootfs); err != nil {
			return nil, fmt.Errorf("task %s: mount its root: %w", r.ID, err)
		}
		c.mounted = true
		defer func() {
			if retErr != nil {
				c.unmount()
			}
		}()
	} else if spec.Root != nil && spec.Root.Path != "" {
		c.rootfs = spec.Root.Path
		if !filepath.IsAbs(c.rootfs) {
			c.rootfs = filepath.Join(r.Bundle, c.rootfs)
		}
	}
	cfg, err := sandboxConfig(s.node, spec, c.rootfs)
	if err != nil {
		return nil, fmt.Errorf("task %s: %w", r.ID, err)
	}
	if err := directMounts(&cfg, spec); err != nil {
		return nil, fmt.Errorf("task %s: %w", r.ID, err)
	}
	cfg.Logger = s.log
	cfg.OnEvent = s.onEvent(r.ID)
	sctx, cancel := context.WithTimeout(ctx, createTimeout)
	defer cancel()
	c.sb, err = airlock.CreateWithID(sctx, SandboxID(r.ID), cfg)
	if err != nil {
		return nil, fmt.Errorf("task %s: create its airlock sandbox: %w", r.ID, err)
	}
	for _, n := range c.sb.Notes() {
		if s.events != nil {
			s.events.note(r.ID, n)
		}
	}
	c.init = newProc(c, "", cmd, stdio{Stdin: r.Stdin, Stdout: r.Stdout, Stderr: r.Stderr, Terminal: r.Terminal})
	s.mu.Lock()
	s.containers[r.ID] = c
	s.mu.Unlock()
	pid := uint32(c.sb.PID())
	s.publish(ctx, runtime.TaskCreateEventTopic, &eventstypes.TaskCreate{
		ContainerID: r.ID, Bundle: r.Bundle, Rootfs: r.Rootfs,
		IO:  &eventstypes.TaskIO{Stdin: r.Stdin, Stdout: r.Stdout, Stderr: r.Stderr, Terminal: r.Terminal},
		Pid: pid,
	})
	return &taskapi.CreateTaskResponse{Pid: pid}, nil
}

// errPods refuses the containers of a Kubernetes pod until a pod can
// be one sandbox with each container's own root inside it.
var errPods = fmt.Errorf("the airlock shim runs standalone containers (ctr run, nerdctl), not yet the containers of a Kubernetes pod: %w", errdefs.ErrNotImplemented)

// directMounts gives the sandbox the spec's bind mounts of host
// directories and files (volumes), read-only when the spec says so. The
// mounts a runtime makes of its own (proc, sysfs, devpts, the /dev
// tmpfs, cgroups, mqueue) are the sandbox's business and are left out,
// as are /etc/hosts, /etc/hostname and /etc/resolv.conf: the sandbox's
// network is airlock's, with its own resolver.
func directMounts(cfg *airlock.Config, s *specs.Spec) error {
	for _, m := range s.Mounts {
		if m.Type != "bind" && !slices.Contains(m.Options, "bind") && !slices.Contains(m.Options, "rbind") {
			continue
		}
		switch m.Destination {
		case "/etc/hosts", "/etc/hostname", "/etc/resolv.conf", "/dev/shm", "/dev/termination-log":
			continue
		}
		if !filepath.IsAbs(m.Source) || !filepath.IsAbs(m.Destination) {
			return fmt.Errorf("bind mount %s on %s: both must be absolute paths", m.Source, m.Destination)
		}
		if cfg.VFS.DirectMounts == nil {
			cfg.VFS.DirectMounts = map[string]airlock.DirectMount{}
		}
		cfg.VFS.DirectMounts[m.Destination] = airlock.DirectMount{HostPath: m.Source, Readonly: slices.Contains(m.Options, "ro")}
	}
	return nil
}

func (c *container) unmount() {
	if c.mounted {
		if err := mount.UnmountAll(c.rootfs, 0); err != nil && !errors.Is(err, os.ErrNotExist) {
			slog.Warn("unmount a task's root", "task", c.id, "err", err)
		}
		c.mounted = false
	}
}

// Start starts the task's process, or one of its execs.
func (s *Service) Start(ctx context.Context, r *taskapi.StartRequest) (*taskapi.StartResponse, error) {
	c, p, err := s.process(r.ID, r.ExecID)
	if err != nil {
		return nil, err
	}
	if err := p.start(ctx, s.ctx); err != nil {
		return nil, err
	}
	if r.ExecID == "" {
		s.publish(ctx, runtime.TaskStartEventTopic, &eventstypes.TaskStart{ContainerID: c.id, Pid: p.pidForContainerd()})
	} else {
		s.publish(ctx, runtime.TaskExecStartedEventTopic, &eventstypes.TaskExecStarted{ContainerID: c.id, ExecID: r.ExecID, Pid: p.pidForContainerd()})
	}
	go s.reportExit(c, p)
	return &taskapi.StartResponse{Pid: p.pidForContainerd()}, nil
}

// reportExit publishes p's exit; the init process's exit ends the
// container, as a container's pid 1 does: every other process in its
// sandbox is killed with it.
func (s *Service) reportExit(c *container, p *proc) {
	<-p.done
	if p.id == "" {
		c.sb.Close()
	}
	st := p.status()
	s.publish(s.ctx, runtime.TaskExitEventTopic, &eventstypes.TaskExit{
		ContainerID: c.id, ID: p.eventID(), Pid: p.pidForContainerd(),
		ExitStatus: st.exitCode, ExitedAt: protobuf.ToTimestamp(st.exitedAt),
	})
}

// Delete removes an exec, or the task: its sandbox is closed (if
// anything still ran in it, it is killed) and its root unmounted.
func (s *Service) Delete(ctx context.Context, r *taskapi.DeleteRequest) (*taskapi.DeleteResponse, error) {
	c, p, err := s.process(r.ID, r.ExecID)
	if err != nil {
		return nil, err
	}
	st := p.status()
	if st.state == task.Status_RUNNING {
		return nil, fmt.Errorf("delete %s: it is running: kill it first: %w", p.describe(), errdefs.ErrFailedPrecondition)
	}
	if r.ExecID != "" {
		s.mu.Lock()
		delete(c.execs, r.ExecID)
		s.mu.Unlock()
		return &taskapi.DeleteResponse{Pid: p.pidForContainerd(), ExitStatus: st.exitCode, ExitedAt: protobuf.ToTimestamp(st.exitedAt)}, nil
	}
	c.sb.Close()
	c.unmount()
	s.mu.Lock()
	delete(s.containers, r.ID)
	s.mu.Unlock()
	s.publish(ctx, runtime.TaskDeleteEventTopic, &eventstypes.TaskDelete{
		ContainerID: c.id, Pid: p.pidForContainerd(), ExitStatus: st.exitCode, ExitedAt: protobuf.ToTimestamp(st.exitedAt),
	})
	return &taskapi.DeleteResponse{Pid: p.pidForContainerd(), ExitStatus: st.exitCode, ExitedAt: protobuf.ToTimestamp(st.exitedAt)}, nil
}

// Exec adds a process to a running task; it starts on Start.
func (s *Service) Exec(ctx context.Context, r *taskapi.ExecProcessRequest) (*emptypb.Empty, error) {
	c, err := s.get(r.ID)
	if err != nil {
		return nil, err
	}
	if st := c.init.status(); st.state != task.Status_RUNNING {
		return nil, fmt.Errorf("exec in task %s: it is not running: %w", r.ID, errdefs.ErrFailedPrecondition)
	}
	v, err := typeurl.UnmarshalAny(r.Spec)
	if err != nil {
		return nil, fmt.Errorf("exec %s in task %s: read its process spec: %w", r.ExecID, r.ID, err)
	}
	ps, ok := v.(*specs.Process)
	if !ok {
		return nil, fmt.Errorf("exec %s in task %s: its spec is a %T, not a process: %w", r.ExecID, r.ID, v, errdefs.ErrInvalidArgument)
	}
	cmd, err := command(ps)
	if err != nil {
		return nil, fmt.Errorf("exec %s in task %s: %w", r.ExecID, r.ID, err)
	}
	s.mu.Lock()
	if _, dup := c.execs[r.ExecID]; dup {
		s.mu.Unlock()
		return nil, fmt.Errorf("exec %s in task %s: %w", r.ExecID, r.ID, errdefs.ErrAlreadyExists)
	}
	if len(c.execs) >= maxExecs {
		s.mu.Unlock()
		return nil, fmt.Errorf("exec in task %s: it has %d execs, the most it may: delete finished ones: %w", r.ID, maxExecs, errdefs.ErrResourceExhausted)
	}
	c.execs[r.ExecID] = newProc(c, r.ExecID, cmd, stdio{Stdin: r.Stdin, Stdout: r.Stdout, Stderr: r.Stderr, Terminal: r.Terminal})
	s.mu.Unlock()
	s.publish(ctx, runtime.TaskExecAddedEventTopic, &eventstypes.TaskExecAdded{ContainerID: r.ID, ExecID: r.ExecID})
	return &emptypb.Empty{}, nil
}

// maxExecs bounds the execs a task holds at once.
const maxExecs = 1024

// State reports a process's state.
func (s *Service) State(ctx context.Context, r *taskapi.StateRequest) (*taskapi.StateResponse, error) {
	c, p, err := s.process(r.ID, r.ExecID)
	if err != nil {
		return nil, err
	}
	st := p.status()
	return &taskapi.StateResponse{
		ID: p.eventID(), Bundle: c.bundle, Pid: p.pidForContainerd(), Status: st.state,
		Stdin: p.io.Stdin, Stdout: p.io.Stdout, Stderr: p.io.Stderr, Terminal: p.io.Terminal,
		ExitStatus: st.exitCode, ExitedAt: protobuf.ToTimestamp(st.exitedAt), ExecID: r.ExecID,
	}, nil
}

// Kill signals a process; with All, every process of the task.
func (s *Service) Kill(ctx context.Context, r *taskapi.KillRequest) (*emptypb.Empty, error) {
	c, p, err := s.process(r.ID, r.ExecID)
	if err != nil {
		return nil, err
	}
	sig := syscall.Signal(r.Signal)
	if r.All && r.ExecID == "" {
		s.mu.Lock()
		all := []*proc{c.init}
		for _, e := range c.execs {
			all = append(all, e)
		}
		s.mu.Unlock()
		for _, x := range all {
			if ended, _ := x.signal(sig); ended {
				go s.reportExit(c, x)
			}
		}
		return &emptypb.Empty{}, nil
	}
	ended, err := p.signal(sig)
	if err != nil {
		return nil, err
	}
	if ended {
		go s.reportExit(c, p)
	}
	return &emptypb.Empty{}, nil
}

// Pids lists the task's processes that the shim started and that run:
// their pids inside the sandbox.
func (s *Service) Pids(ctx context.Context, r *taskapi.PidsRequest) (*taskapi.PidsResponse, error) {
	c, err := s.get(r.ID)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	all := []*proc{c.init}
	for _, e := range c.execs {
		all = append(all, e)
	}
	s.mu.Unlock()
	var out []*task.ProcessInfo
	for _, p := range all {
		if st := p.status(); st.state == task.Status_RUNNING {
			out = append(out, &task.ProcessInfo{Pid: p.pidForContainerd()})
		}
	}
	return &taskapi.PidsResponse{Processes: out}, nil
}

// ResizePty resizes a process's terminal.
func (s *Service) ResizePty(ctx context.Context, r *taskapi.ResizePtyRequest) (*emptypb.Empty, error) {
	_, p, err := s.process(r.ID, r.ExecID)
	if err != nil {
		return nil, err
	}
	if err := p.resize(clampSize(uint(r.Height)), clampSize(uint(r.Width))); err != nil {
		return nil, err
	}
	return &emptypb.Empty{}, nil
}

// CloseIO closes a process's stdin.
func (s *Service) CloseIO(ctx context.Context, r *taskapi.CloseIORequest) (*emptypb.Empty, error) {
	_, p, err := s.process(r.ID, r.ExecID)
	if err != nil {
		return nil, err
	}
	if r.Stdin {
		p.closeStdin()
	}
	return &emptypb.Empty{}, nil
}

// Wait waits for a process to exit.
func (s *Service) Wait(ctx context.Context, r *taskapi.WaitRequest) (*taskapi.WaitResponse, error) {
	_, p, err := s.process(r.ID, r.ExecID)
	if err != nil {
		return nil, err
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	st := p.status()
	return &taskapi.WaitResponse{ExitStatus: st.exitCode, ExitedAt: protobuf.ToTimestamp(st.exitedAt)}, nil
}

// Stats reports what the task's sandbox uses, as cgroup v2 metrics.
func (s *Service) Stats(ctx context.Context, r *taskapi.StatsRequest) (*taskapi.StatsResponse, error) {
	c, err := s.get(r.ID)
	if err != nil {
		return nil, err
	}
	u, err := c.sb.Usage()
	if err != nil {
		return nil, err
	}
	a, err := typeurl.MarshalAny(metrics(u))
	if err != nil {
		return nil, fmt.Errorf("encode the stats of task %s: %w", r.ID, err)
	}
	return &taskapi.StatsResponse{Stats: protobuf.FromAny(a)}, nil
}

// Connect says which process serves the task.
func (s *Service) Connect(ctx context.Context, r *taskapi.ConnectRequest) (*taskapi.ConnectResponse, error) {
	resp := &taskapi.ConnectResponse{ShimPid: uint32(os.Getpid())}
	if c, err := s.get(r.ID); err == nil {
		resp.TaskPid = c.init.pidForContainerd()
	}
	return resp, nil
}

// Shutdown ends the shim once it serves no task.
func (s *Service) Shutdown(ctx context.Context, r *taskapi.ShutdownRequest) (*emptypb.Empty, error) {
	s.mu.Lock()
	n := len(s.containers)
	s.mu.Unlock()
	if n > 0 {
		return &emptypb.Empty{}, nil
	}
	s.shutdown.Shutdown()
	return &emptypb.Empty{}, nil
}

// Pause, Resume, Checkpoint and Update are not offered by airlock
// sandboxes.
func (s *Service) Pause(ctx context.Context, r *taskapi.PauseRequest) (*emptypb.Empty, error) {
	return nil, fmt.Errorf("pause task %s: airlock sandboxes cannot be paused: %w", r.ID, errdefs.ErrNotImplemented)
}

func (s *Service) Resume(ctx context.Context, r *taskapi.ResumeRequest) (*emptypb.Empty, error) {
	return nil, fmt.Errorf("resume task %s: airlock sandboxes cannot be paused: %w", r.ID, errdefs.ErrNotImplemented)
}

func (s *Service) Checkpoint(ctx context.Context, r *taskapi.CheckpointTaskRequest) (*emptypb.Empty, error) {
	return nil, fmt.Errorf("checkpoint task %s: airlock sandboxes cannot be checkpointed: %w", r.ID, errdefs.ErrNotImplemented)
}

func (s *Service) Update(ctx context.Context, r *taskapi.UpdateTaskRequest) (*emptypb.Empty, error) {
	return nil, fmt.Errorf("update task %s: an airlock sandbox's limits are fixed when it starts: recreate the container to change them: %w", r.ID, errdefs.ErrNotImplemented)
}

func (s *Service) publish(ctx context.Context, topic string, ev any) {
	ctx = namespaces.WithNamespace(context.WithoutCancel(ctx), namespaceOf(s.ctx))
	if err := s.publisher.Publish(ctx, topic, ev); err != nil {
		s.log.Warn("publish an event to containerd", "topic", topic, "err", err)
	}
}

func namespaceOf(ctx context.Context) string {
	ns, _ := namespaces.Namespace(ctx)
	return ns
}
