// Package gvisor is the gVisor boundary: the agent runs as PID 1 inside
// runsc's Sentry, a kernel in user space between the sandbox's processes
// and the host's, which serves their system calls itself (platform
// systrap) and reaches the host's files only through its gofer. The
// agent's stream and the sandbox's frames are socket pairs donated to
// it (runsc --pass-fd); the Sentry has no network of its own
// (--network=none): the agent makes the sandbox's interface inside it, a
// TAP device of the Sentry's network stack, and relays its frames to the
// host's, where the policy is enforced as at every level.
package gvisor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
	"github.com/airlock-sandbox/airlock/internal/boundary"
	"github.com/airlock-sandbox/airlock/internal/boundary/privdir"
	"github.com/airlock-sandbox/airlock/internal/boundary/process"
	"github.com/airlock-sandbox/airlock/internal/cgroup"
	"github.com/airlock-sandbox/airlock/internal/diskfs"
	"github.com/airlock-sandbox/airlock/internal/idalloc"
	"github.com/airlock-sandbox/airlock/internal/vfsfuse"
)

// privatePrefix begins the name of a sandbox's private directory (its
// OCI bundle and runsc's state), followed by the sandbox's id.
const privatePrefix = "airlock-gvisor-"

// sentryOverhead is the host memory allowed the Sentry and its gofer on
// top of the sandbox's memory limit: the Sentry's own heap, page tables
// and caches are charged with the sandbox's memory to the same cgroup.
const sentryOverhead = 256 << 20

// preparedRootIDs is how many ids, from 0, a sandbox with a prepared
// root shares with the host: the ids of files an image may hold.
const preparedRootIDs = 65536

// hostTaskHeadroom is added to the pids limit for the host tasks of the
// Sentry, its gofer and systrap's stub threads, which back the sandbox's
// threads on the host: the limit itself is enforced inside the Sentry.
const hostTaskHeadroom = 512

// Backend is the gVisor boundary behind the seam.
type Backend struct{}

var _ boundary.Backend = Backend{}

// CheckNetwork: the interface lives inside the Sentry and its frames
// cross a socket pair, which needs nothing of the host.
func (Backend) CheckNetwork() error { return nil }

// BindsHostDirs: direct mounts are served by the host over the agent's
// file protocol, as programmable mounts are, not by runsc's gofer: the gofer works on host
// files as host root and keeps their set-id bits, so a sandbox could
// leave a set-user-ID-root program in a host directory.
func (Backend) BindsHostDirs() bool { return false }

// ServesMounts: the supervisor serves them from FUSE mounts on the host,
// which the bundle gives the Sentry (see mounts_linux.go).
func (Backend) ServesMounts() bool { return true }

// Sandbox is a running gVisor sandbox.
type Sandbox struct {
	dir     string
	conn    *os.File
	frames  *os.File
	cmd     *exec.Cmd
	group   *cgroup.Group
	ids     *idalloc.Lease // the host ids the sandbox's map to, as root
	notes   []string
	servers []*vfsfuse.Server    // of its programmable mounts
	conns   []vfsfuse.Connection // theirs
	log     *slog.Logger
	attach  []attachSpec // its mounts and disk, for runsc's namespace
	disk    *diskfs.Disk
	// madeMountsDir: the directory of the host's mounts exists.
	madeMountsDir bool
	stderr        *boundary.Tail
	// runsc is how to run runsc on this sandbox: its path, global
	// flags and environment (pause, resume).
	runsc     []string
	runscEnv  []string
	sandboxID string
	done      chan struct{}
	waitErr   error
	once      sync.Once
}

// Start writes the sandbox's bundle and starts runsc on it, in the
// sandbox's cgroup when one can be made.
func (Backend) Start(ctx context.Context, spec boundary.Spec, boot *agentproto.Boot) (_ boundary.Sandbox, err error) {
	log := spec.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	runsc, err := Find(exec.LookPath)
	if err != nil {
		return nil, fmt.Errorf("%w: isolation \"gvisor\" needs gVisor's runsc: %v; %s (run `airlock doctor` to see what this machine supports)", boundary.ErrUnavailable, err, RunscFix)
	}
	dir, err := privdir.Make(privatePrefix, spec.ID)
	if err != nil {
		return nil, fmt.Errorf("make the sandbox's private directory: %w", err)
	}
	s := &Sandbox{dir: dir, done: make(chan struct{}), stderr: boundary.NewTail(16 << 10), log: log}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()

	var cgFiles []*os.File
	limits := cgroup.Limits{CPUs: spec.Limits.CPUs}
	if spec.Limits.MemoryBytes > 0 {
		limits.MemoryBytes = spec.Limits.MemoryBytes + sentryOverhead
	}
	if spec.Limits.Pids > 0 {
		limits.Pids = spec.Limits.Pids + hostTaskHeadroom
	}
	if g, cgErr := cgroup.New(ctx, spec.ID, limits); cgErr == nil {
		s.group = g
		if cgFiles, err = g.UserProcsFiles(); err != nil {
			return nil, fmt.Errorf("open sandbox cgroup: %w", err)
		}
		defer closeFiles(cgFiles)
	} else if limits != (cgroup.Limits{}) {
		s.notes = append(s.notes, fmt.Sprintf("gvisor: the sandbox's memory and CPU limits are not enforced by a cgroup: %v", cgErr))
	}
	// Inside the Sentry, the commands' limits are its own cgroups',
	// which the agent makes and watches (the host's holds the whole
	// Sentry: a command over the limit would end the sandbox).
	boot.Sentry = &agentproto.SentrySpec{MemoryBytes: spec.Limits.MemoryBytes, Pids: spec.Limits.Pids}

	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("create agent channel: %w", err)
	}
	if err := unix.SetNonblock(pair[0], true); err != nil {
		unix.Close(pair[0])
		unix.Close(pair[1])
		return nil, fmt.Errorf("create agent channel: %w", err)
	}
	s.conn = os.NewFile(uintptr(pair[0]), "agent")
	agentEnd := os.NewFile(uintptr(pair[1]), "agent")
	defer agentEnd.Close()
	extra := append([]*os.File{}, cgFiles...)
	passFDs := []string{"--pass-fd", fmt.Sprintf("%d:3", 3+len(extra))}
	extra = append(extra, agentEnd)
	boot.Link = nil
	if l := spec.Link; l != nil {
		fp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("create the sandbox's network channel: %w", err)
		}
		s.frames = os.NewFile(uintptr(fp[0]), "frames")
		guest := os.NewFile(uintptr(fp[1]), "guest-frames")
		defer guest.Close()
		passFDs = append(passFDs, "--pass-fd", fmt.Sprintf("%d:4", 3+len(extra)))
		extra = append(extra, guest)
		boot.Link = &agentproto.LinkSpec{FD: 4, Name: l.Name, Address: l.Address.String(), Gateway: l.Gateway.String(), MTU: l.MTU}
		if l.AddressV6.IsValid() {
			boot.Link.AddressV6, boot.Link.GatewayV6 = l.AddressV6.String(), l.GatewayV6.String()
		}
	}
	boot.Mode, boot.Root.Stage, boot.CgroupFDs = "gvisor", "/tmp", nil
	// System V IPC objects are the Sentry's memory, charged to the
	// sandbox's cgroup with the rest of it, and the Sentry's IPC
	// sysctls are its own and read-only.
	boot.IPC = agentproto.IPCLimits{}
	// So are POSIX message queues; the Sentry refuses to set their
	// rlimit.
	boot.Rlimits.MsgQueue = nil
	// The Sentry has no landlock; it is itself the boundary that keeps
	// commands from the host's files, of which it holds only the
	// bundle's.
	boot.Hardening.Landlock = false
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	for _, k := range []string{"AIRLOCK_AGENT_DEBUG", "AIRLOCK_VFS_WRITEBACK", "AIRLOCK_VFS_SERIAL"} {
		if v := os.Getenv(k); v != "" {
			env = append(env, k+"="+v)
		}
	}
	var ids *specs.LinuxIDMapping
	switch {
	case os.Geteuid() != 0:
	case boot.Root.RootFS == "":
		if s.ids, err = process.ReserveIDs(ctx, spec.ID); err != nil {
			return nil, err
		}
		ids = &specs.LinuxIDMapping{ContainerID: 0, HostID: s.ids.First, Size: s.ids.Count}
		// The block's root (the gofer) reaches the bundle's root
		// through this directory, which it may cross but not list.
		if err := os.Chmod(dir, 0o711); err != nil {
			return nil, fmt.Errorf("open the sandbox's private directory to its ids: %w", err)
		}
	default:
		// A prepared root (an image) belongs to host root as images
		// unpack, and the sandbox's root must own its files; the
		// Sentry's overlay does not take an idmapped mount here
		// (copying up a directory of it fails). So the Sentry and its
		// gofer run in a user namespace that maps ids 0 to 65535 to
		// the host's same ids: host root's files are root's inside,
		// and a file of any other host id (another user's, in a
		// directory given as --rootfs) belongs to nobody there, its
		// permission bits closing it to the gofer as the host's kernel
		// checks them.
		ids = &specs.LinuxIDMapping{ContainerID: 0, HostID: 0, Size: preparedRootIDs}
	}
	var shift vfsfuse.IDShift
	if ids != nil {
		shift = vfsfuse.IDShift{Base: ids.HostID, Size: ids.Size}
	}
	if err := s.serveMounts(spec.Mounts, shift, boot, log); err != nil {
		return nil, err
	}
	if err := s.attachDisk(ctx, spec, shift, boot); err != nil {
		return nil, err
	}
	bdir := filepath.Join(dir, "bundle")
	if err := bundle(bdir, spec.AgentPath, boot, env, ids, s.attach); err != nil {
		return nil, err
	}

	args := []string{
		"--root", filepath.Join(dir, "state"),
		"--network", "none",
		"--platform", "systrap",
		"--ignore-cgroups",
		"--overlay2", "none",
		"--host-uds", "none",
		// Set-id programs work as at the other levels (su, sudo inside
		// the sandbox); they raise ids in the Sentry only.
		"--allow-suid",
	}
	if os.Geteuid() != 0 {
		args = append(args, "--rootless")
	}
	if d := os.Getenv("AIRLOCK_GVISOR_DEBUG"); d != "" {
		// A directory that outlives the sandbox, for runsc's logs of
		// every system call.
		args = append(args, "--debug", "--strace", "--log-packets", "--debug-log", filepath.Join(d, spec.ID)+"/")
		s.notes = append(s.notes, "gvisor: runsc's debug logs are in "+filepath.Join(d, spec.ID))
	}
	s.runsc, s.sandboxID = append([]string{runsc}, args...), spec.ID
	args = append(args, "run", "--bundle", bdir)
	args = append(args, passFDs...)
	args = append(args, spec.ID)
	// runsc is started through the agent binary, which puts itself in
	// the sandbox's cgroup before it executes runsc, so that no process
	// of the sandbox ever runs outside it.
	// As root, runsc mounts on the host (its network namespace's file,
	// under its state directory): it does so in a mount namespace of
	// its own, which goes with it.
	mountNS := "shared"
	if os.Geteuid() == 0 {
		mountNS = "private"
	}
	helper := []string{agentproto.JoinCgroupsArg, strconv.Itoa(len(cgFiles)), mountNS}
	for _, a := range s.attach {
		helper = append(helper, "--attach", fmt.Sprintf("%d:%s", 3+len(extra), a.at))
		extra = append(extra, a.mount)
	}
	cmd := exec.Command(spec.AgentPath, append(append(helper, runsc), args...)...)
	s.runscEnv = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "TMPDIR=" + dir}
	cmd.Env = s.runscEnv
	cmd.ExtraFiles = extra
	cmd.Stdout, cmd.Stderr = s.stderr, s.stderr
	if os.Getenv("AIRLOCK_AGENT_DEBUG") != "" {
		cmd.Stderr = io.MultiWriter(s.stderr, os.Stderr)
	}
	// runsc kills its sandbox and gofer when it dies (they have a
	// parent-death signal); it dies with this process.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	log.Debug("starting runsc", "runsc", runsc, "args", args)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", runsc, err)
	}
	s.cmd = cmd
	go func() {
		s.waitErr = cmd.Wait()
		close(s.done)
	}()
	return s, nil
}

// Conn is the byte stream to the agent.
func (s *Sandbox) Conn() io.ReadWriteCloser { return s.conn }

// Link hands over the host's end of the frames' socket pair.
func (s *Sandbox) Link(context.Context) (*os.File, error) {
	f := s.frames
	if f == nil {
		return nil, errors.New("the sandbox was started without a network interface, or its link was taken")
	}
	s.frames = nil
	return f, nil
}

// Notes lists what could not be enforced, with reasons.
func (s *Sandbox) Notes() []string { return s.notes }

// Done is closed when runsc has exited.
func (s *Sandbox) Done() <-chan struct{} { return s.done }

// PID is the host pid of runsc.
func (s *Sandbox) PID() int {
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Err describes how runsc ended, with the tail of what it and the agent
// printed.
func (s *Sandbox) Err() error {
	select {
	case <-s.done:
	default:
		return nil
	}
	what := fmt.Sprintf("the sandbox's runsc ended: %v", s.waitErr)
	if ps := s.cmd.ProcessState; ps != nil {
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok {
			switch {
			case ws.Signaled():
				what = fmt.Sprintf("the sandbox's runsc was killed by signal %d (%s)", int(ws.Signal()), unix.SignalName(ws.Signal()))
			case ws.Exited():
				what = fmt.Sprintf("the sandbox's runsc exited with status %d", ws.ExitStatus())
			}
		}
	}
	if s.group != nil {
		if ev, err := s.group.Events(); err == nil && ev.OOMKills > 0 {
			// The Sentry holds, on its heap, the kernel memory the
			// commands make it keep (pipe buffers, socket buffers, IPC
			// objects), which no limit inside it counts.
			what = fmt.Sprintf("%s: the host's memory cgroup killed it for memory: the sandbox reached its memory limit plus the %d MiB allowed gVisor's own kernel, counting the kernel memory its commands made that kernel hold (pipe and socket buffers, IPC objects); give it more --memory", what, sentryOverhead>>20)
		}
	}
	if msg := s.stderr.String(); msg != "" {
		return fmt.Errorf("%s: %s", what, msg)
	}
	return errors.New(what)
}

// Counters: the commands' limit events are counted inside the Sentry,
// by its agent (the host's cgroup holds the whole Sentry).
func (s *Sandbox) Counters() (boundary.Counters, error) {
	return boundary.Counters{}, errors.ErrUnsupported
}

// Usage: what the commands use is measured inside the Sentry, by its
// agent.
func (s *Sandbox) Usage() (boundary.Usage, error) { return boundary.Usage{}, errors.ErrUnsupported }

// PidsCurrent: the host's task count is the Sentry's, not the sandbox's
// processes', which only the Sentry knows.
func (s *Sandbox) PidsCurrent() (int64, error) { return 0, errors.ErrUnsupported }

// Pause has the Sentry stop every task of the sandbox (runsc pause): the
// agent and every command stand still until Resume.
func (s *Sandbox) Pause(ctx context.Context) error { return s.control(ctx, "pause") }

// Resume has the Sentry run the sandbox's tasks again (runsc resume).
func (s *Sandbox) Resume(ctx context.Context) error { return s.control(ctx, "resume") }

// control runs `runsc <verb> <id>` on the sandbox.
func (s *Sandbox) control(ctx context.Context, verb string) error {
	cmd := exec.CommandContext(ctx, s.runsc[0], append(s.runsc[1:], verb, s.sandboxID)...)
	cmd.Env = s.runscEnv
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("runsc %s: %w: %s", verb, err, bytes.TrimSpace(out))
	}
	return nil
}

// Close kills runsc, whose sandbox and gofer die with it, and removes
// the cgroup and the private directory.
func (s *Sandbox) Close() error {
	var errs []error
	s.once.Do(func() {
		if s.conn != nil {
			s.conn.Close()
		}
		if s.frames != nil {
			s.frames.Close()
		}
		if s.cmd != nil && s.cmd.Process != nil {
			// runsc leads a process group of its own.
			_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
			// A gofer killed while its request is with a provider
			// waits for the answer: the sandbox's end must not wait
			// on any provider.
			s.abortMounts()
			<-s.done
		}
		if err := s.closeMounts(); err != nil {
			errs = append(errs, err)
		}
		cleared := true
		if s.group != nil {
			if err := s.group.Delete(); err != nil {
				errs = append(errs, fmt.Errorf("remove cgroup: %w", err))
				cleared = false
			}
		}
		// No process runs with the sandbox's ids any more (runsc and
		// its children are gone and the cgroup empty); ids that may
		// still be in use stay held until this process exits.
		if cleared && s.ids != nil {
			if err := s.ids.Release(); err != nil {
				errs = append(errs, err)
			}
		}
		if err := privdir.Remove(s.dir); err != nil {
			errs = append(errs, fmt.Errorf("remove the sandbox's private directory: %w", err))
		}
	})
	return errors.Join(errs...)
}

// Sweep removes the private directories of sandboxes whose supervisor
// died and returns their ids; runsc and its processes died with it, and
// the process boundary's sweep removes cgroups.
func Sweep() []string { return privdir.Sweep(privatePrefix) }

// Reclaim removes sandbox id's private directory, whose supervisor is
// known to be gone.
func Reclaim(id string) error { return privdir.Reclaim(privatePrefix, id) }

func closeFiles(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}
