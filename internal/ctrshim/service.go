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
	"io"
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
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/agentproto"
	"github.com/airlock-sandbox/airlock/vfs"
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
	// pods are the Kubernetes pods this shim serves, by the id of
	// their sandbox (pause) container.
	pods map[string]*pod
}

// podRoot is where a pod's sandbox holds its containers' roots and
// volumes: a programmable mount of the pod's table.
const podRoot = "/run/airlock-pod"

// pod is a Kubernetes pod: one sandbox, which its sandbox container
// made, holding its app containers. Their roots and volumes are host
// directories mounted in its table, which the sandbox sees at podRoot.
type pod struct {
	sb    *airlock.Sandbox
	table *vfs.MountTable
	mu    sync.Mutex
	// volumes counts the containers using each volume mounted in the
	// table, by its name there.
	volumes map[string]int
	// providers are the table's mounts, by name, to close when they
	// are unmounted.
	providers map[string]vfs.Provider
}

// mount mounts p in the pod's table as name. p.mu is held.
func (p *pod) mount(name string, prov vfs.Provider) error {
	if err := p.table.Mount(name, prov); err != nil {
		if c, ok := prov.(io.Closer); ok {
			c.Close()
		}
		return err
	}
	p.providers[name] = prov
	return nil
}

// unmount unmounts name from the pod's table and closes its provider,
// which lets go of the host directory. p.mu is held.
func (p *pod) unmount(name string) {
	_ = p.table.Unmount(name)
	if c, ok := p.providers[name].(io.Closer); ok {
		c.Close()
	}
	delete(p.providers, name)
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
	// pod, for a pod's app container, is its pod; name is its name in
	// the pod's sandbox and table, and volumes the table's volumes it
	// uses.
	pod     *pod
	name    string
	volumes []string
}

// end ends the container once its init process has exited: a sandbox
// of its own closes (killing whatever still runs in it), and an app
// container of a pod is removed from the pod's sandbox, its processes
// killed.
func (c *container) end() {
	if c.pod == nil {
		c.sb.Close()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.sb.RemoveContainer(ctx, c.name); err != nil && !errors.Is(err, os.ErrNotExist) {
		slog.Debug("remove a pod's container", "task", c.id, "err", err)
	}
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
		pods:       map[string]*pod{},
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
	podID, isPodSandbox := podOf(r.ID, spec)
	if r.Checkpoint != "" {
		return nil, fmt.Errorf("restore task %s from a checkpoint: airlock sandboxes cannot be checkpointed: %w", r.ID, errdefs.ErrNotImplemented)
	}
	cmd, err := command(spec.Process)
	if err != nil {
		return nil, fmt.Errorf("task %s: %w", r.ID, err)
	}
	c := &container{id: r.ID, bundle: r.Bundle, execs: map[string]*proc{}}
	if err := c.mountRoot(r, spec); err != nil {
		return nil, err
	}
	defer func() {
		if retErr != nil {
			c.unmount()
		}
	}()
	if podID != r.ID {
		if err := s.addToPod(ctx, c, podID, spec, &cmd); err != nil {
			return nil, err
		}
	} else if err := s.createSandbox(ctx, c, spec, isPodSandbox); err != nil {
		return nil, err
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

// mountRoot mounts the task's root from its rootfs mounts, or finds it
// in its spec.
func (c *container) mountRoot(r *taskapi.CreateTaskRequest, spec *specs.Spec) error {
	c.rootfs = filepath.Join(r.Bundle, "rootfs")
	if len(r.Rootfs) > 0 {
		var mounts []mount.Mount
		for _, m := range r.Rootfs {
			mounts = append(mounts, mount.Mount{Type: m.Type, Source: m.Source, Target: m.Target, Options: m.Options})
		}
		if err := os.MkdirAll(c.rootfs, 0o711); err != nil {
			return fmt.Errorf("task %s: make its root's mount point: %w", r.ID, err)
		}
		if err := mount.All(mounts, c.rootfs); err != nil {
			return fmt.Errorf("task %s: mount its root: %w", r.ID, err)
		}
		c.mounted = true
	} else if spec.Root != nil && spec.Root.Path != "" {
		c.rootfs = spec.Root.Path
		if !filepath.IsAbs(c.rootfs) {
			c.rootfs = filepath.Join(r.Bundle, c.rootfs)
		}
	}
	return nil
}

// createSandbox makes the sandbox of a standalone container, or of a
// pod's sandbox container, which then holds the pod's app containers.
func (s *Service) createSandbox(ctx context.Context, c *container, spec *specs.Spec, isPod bool) error {
	cfg, err := sandboxConfig(s.node, spec, c.rootfs)
	if err != nil {
		return fmt.Errorf("task %s: %w", c.id, err)
	}
	if err := directMounts(&cfg, spec); err != nil {
		return fmt.Errorf("task %s: %w", c.id, err)
	}
	var p *pod
	if isPod {
		p = &pod{table: vfs.NewMountTable(), volumes: map[string]int{}, providers: map[string]vfs.Provider{}}
		cfg.VFS.Providers = map[string]vfs.Provider{podRoot: p.table}
	}
	cfg.Logger = s.log
	cfg.OnEvent = s.onEvent(c.id)
	sctx, cancel := context.WithTimeout(ctx, createTimeout)
	defer cancel()
	c.sb, err = airlock.CreateWithID(sctx, SandboxID(c.id), cfg)
	if err != nil {
		return fmt.Errorf("task %s: create its airlock sandbox: %w", c.id, err)
	}
	for _, n := range c.sb.Notes() {
		if s.events != nil {
			s.events.note(c.id, n)
		}
	}
	if p != nil {
		p.sb = c.sb
		s.mu.Lock()
		s.pods[c.id] = p
		s.mu.Unlock()
	}
	return nil
}

// addToPod makes c an app container of pod podID: its root and volumes
// are mounted in the pod's table, and it is a container of the pod's
// sandbox, where cmd runs.
func (s *Service) addToPod(ctx context.Context, c *container, podID string, spec *specs.Spec, cmd *airlock.Command) (err error) {
	s.mu.Lock()
	p := s.pods[podID]
	s.mu.Unlock()
	if p == nil {
		return fmt.Errorf("task %s: its pod's sandbox %s is not one this shim runs (start the pod's sandbox container first): %w", c.id, podID, errdefs.ErrFailedPrecondition)
	}
	// An app container's airlock.dev annotations are ignored: the
	// pod's sandbox has its isolation, network and secrets, and the
	// CRI plugin copies the pod's annotations to every container.
	c.pod, c.sb, c.name = p, p.sb, ContainerName(c.id)
	root, err := vfs.NewRealFS(c.rootfs)
	if err != nil {
		return fmt.Errorf("task %s: serve its root: %w", c.id, err)
	}
	p.mu.Lock()
	err = p.mount(c.name, root)
	p.mu.Unlock()
	if err != nil {
		return fmt.Errorf("task %s: %w", c.id, err)
	}
	defer func() {
		if err != nil {
			c.leavePod()
		}
	}()
	binds, err := s.podBinds(ctx, c, spec)
	if err != nil {
		return err
	}
	if err := c.sb.AddContainer(ctx, c.name, airlock.ContainerSpec{Root: podRoot + "/" + c.name, Binds: binds}); err != nil {
		return fmt.Errorf("task %s: %w", c.id, err)
	}
	cmd.Container = c.name
	return nil
}

// podBinds are the binds of an app container: its spec's bind mounts of
// host paths (volumes), each served through the pod's table (a file's
// directory, for a file), and the sandbox's own /etc/hosts,
// /etc/hostname and /etc/resolv.conf where the spec asks for them.
func (s *Service) podBinds(ctx context.Context, c *container, spec *specs.Spec) ([]airlock.ContainerBind, error) {
	var binds []airlock.ContainerBind
	for _, m := range spec.Mounts {
		if m.Type != "bind" && !slices.Contains(m.Options, "bind") && !slices.Contains(m.Options, "rbind") {
			continue
		}
		ro := slices.Contains(m.Options, "ro")
		switch m.Destination {
		case "/etc/hosts", "/etc/hostname", "/etc/resolv.conf":
			if _, err := c.sb.Stat(ctx, m.Destination); err == nil {
				binds = append(binds, airlock.ContainerBind{Source: m.Destination, Target: m.Destination, ReadOnly: ro})
			}
			continue
		case "/dev/shm", "/dev/termination-log":
			continue
		}
		if !filepath.IsAbs(m.Source) || !filepath.IsAbs(m.Destination) {
			return nil, fmt.Errorf("task %s: bind mount %s on %s: both must be absolute paths", c.id, m.Source, m.Destination)
		}
		fi, err := os.Stat(m.Source)
		if err != nil {
			return nil, fmt.Errorf("task %s: bind mount %s: %w", c.id, m.Source, err)
		}
		dir, file := m.Source, ""
		if !fi.IsDir() {
			dir, file = filepath.Dir(m.Source), filepath.Base(m.Source)
		}
		name, err := c.useVolume(dir)
		if err != nil {
			return nil, fmt.Errorf("task %s: volume %s: %w", c.id, dir, err)
		}
		src := podRoot + "/" + name
		if file != "" {
			src += "/" + file
		}
		binds = append(binds, airlock.ContainerBind{Source: src, Target: m.Destination, ReadOnly: ro})
	}
	return binds, nil
}

// useVolume mounts host directory dir in the pod's table, once for all
// the pod's containers that use it, and returns its name there.
func (c *container) useVolume(dir string) (string, error) {
	sum := sha256.Sum256([]byte(dir))
	name := "vol-" + hex.EncodeToString(sum[:12])
	c.pod.mu.Lock()
	defer c.pod.mu.Unlock()
	if c.pod.volumes[name] == 0 {
		p, err := vfs.NewRealFS(dir)
		if err != nil {
			return "", err
		}
		if err := c.pod.mount(name, p); err != nil {
			return "", err
		}
	}
	c.pod.volumes[name]++
	c.volumes = append(c.volumes, name)
	return name, nil
}

// leavePod unmounts an app container's root and volumes from its pod's
// table.
func (c *container) leavePod() {
	c.pod.mu.Lock()
	defer c.pod.mu.Unlock()
	c.pod.unmount(c.name)
	for _, v := range c.volumes {
		if c.pod.volumes[v]--; c.pod.volumes[v] <= 0 {
			delete(c.pod.volumes, v)
			c.pod.unmount(v)
		}
	}
	c.volumes = nil
}

// ContainerName is the name in its pod's sandbox of app container id:
// the id itself when the agent accepts it, else a digest of it.
func ContainerName(id string) string {
	if agentproto.ValidContainerName(id) {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return "c-" + hex.EncodeToString(sum[:])[:32]
}

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
		err := mount.UnmountAll(c.rootfs, 0)
		if errors.Is(err, syscall.EBUSY) {
			// A pod's sandbox may still be letting go of files of
			// it that its container had open: detached, the mount
			// goes when they are closed.
			err = mount.UnmountAll(c.rootfs, unix.MNT_DETACH)
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
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
		c.end()
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
	c.end()
	s.mu.Lock()
	if c.pod != nil {
		c.leavePod()
	}
	delete(s.containers, r.ID)
	delete(s.pods, r.ID)
	s.mu.Unlock()
	c.unmount()
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
	if c.pod != nil {
		cmd.Container = c.name
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
	if st.state == task.Status_RUNNING && c.pod == nil && c.sb.Paused() {
		st.state = task.Status_PAUSED
	}
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
	if c.pod == nil && c.sb.Paused() {
		// A signal is sent by the sandbox's agent, which a pause
		// stops too: the task is resumed to take it.
		if err := c.sb.Resume(ctx); err != nil && !errors.Is(err, airlock.ErrNotPaused) {
			return nil, fmt.Errorf("resume task %s to signal it: %w", r.ID, err)
		}
		s.publish(ctx, runtime.TaskResumedEventTopic, &eventstypes.TaskResumed{ContainerID: c.id})
	}
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

// Pause stops every process of a task that is a sandbox of its own
// (ctr task pause), as airlock pause does. The containers of a pod share
// its one sandbox, which is not paused for one of them.
func (s *Service) Pause(ctx context.Context, r *taskapi.PauseRequest) (*emptypb.Empty, error) {
	c, err := s.ownSandbox(r.ID, "pause")
	if err != nil {
		return nil, err
	}
	if err := c.sb.Pause(ctx); err != nil {
		return nil, fmt.Errorf("pause task %s: %w", r.ID, err)
	}
	s.publish(ctx, runtime.TaskPausedEventTopic, &eventstypes.TaskPaused{ContainerID: c.id})
	return &emptypb.Empty{}, nil
}

// Resume lets a paused task's processes run on.
func (s *Service) Resume(ctx context.Context, r *taskapi.ResumeRequest) (*emptypb.Empty, error) {
	c, err := s.ownSandbox(r.ID, "resume")
	if err != nil {
		return nil, err
	}
	if err := c.sb.Resume(ctx); err != nil {
		return nil, fmt.Errorf("resume task %s: %w", r.ID, err)
	}
	s.publish(ctx, runtime.TaskResumedEventTopic, &eventstypes.TaskResumed{ContainerID: c.id})
	return &emptypb.Empty{}, nil
}

// ownSandbox is task id, when it is a sandbox of its own: not a pod's
// sandbox nor one of its containers.
func (s *Service) ownSandbox(id, what string) (*container, error) {
	c, err := s.get(id)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	_, isPod := s.pods[id]
	s.mu.Unlock()
	if c.pod != nil || isPod {
		return nil, fmt.Errorf("%s task %s: the containers of a pod share one airlock sandbox, which is not paused or resumed for one of them: %w", what, id, errdefs.ErrNotImplemented)
	}
	return c, nil
}

// Checkpoint and Update are not offered by airlock sandboxes.
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
