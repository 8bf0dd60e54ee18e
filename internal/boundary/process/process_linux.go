// Package process is the Linux namespace boundary: the agent runs as PID 1
// of fresh user, PID, mount, network, UTS and IPC namespaces, with user
// commands confined further by the agent (cgroup, rlimits, landlock,
// seccomp, no capabilities).
package process

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
	"github.com/airlock-sandbox/airlock/internal/boundary"
	"github.com/airlock-sandbox/airlock/internal/cgroup"
	"github.com/airlock-sandbox/airlock/internal/diskfs"
	"github.com/airlock-sandbox/airlock/internal/idalloc"
	"github.com/airlock-sandbox/airlock/internal/kernel"
	"github.com/airlock-sandbox/airlock/internal/subid"
	"github.com/airlock-sandbox/airlock/internal/tap"
	"github.com/airlock-sandbox/airlock/internal/vfsfuse"
)

// Options configures one sandbox.
type Options struct {
	ID        string
	AgentPath string
	Limits    cgroup.Limits
	// DiskDir, when set, backs the sandbox's writable tree with an ext4
	// filesystem of boot.Root.SizeBytes and boot.Root.Inodes in a file
	// made under this directory (see package diskfs), instead of a
	// tmpfs. It needs root.
	DiskDir string
	Log     *slog.Logger
	// Mounts are served from this process (see hostVFS), with VFS's
	// settings.
	Mounts []boundary.Mount
	VFS    vfsfuse.Options
}

// Sandbox is a running process-boundary sandbox.
type Sandbox struct {
	conn    *os.File
	link    *os.File // receives the TAP device's file from the agent (boot.Link)
	tapFile *os.File // the TAP device made from here, until Link hands it over
	cmd     *exec.Cmd
	group   *cgroup.Group
	noGroup error       // why the sandbox has no cgroup, when it has none
	paused  atomic.Bool // its cgroup was frozen by Pause, not thawed since
	disk    *diskfs.Disk
	ids     *idalloc.Lease // the block of host ids the sandbox's ids map to, as root
	vfs     *hostVFS       // its programmable mounts, when it has any
	notes   []string
	stderr  *boundary.Tail
	done    chan struct{}
	waitErr error
	once    sync.Once
}

// Start launches the agent inside new namespaces and fills in the
// boundary-specific parts of boot. The caller then performs the handshake
// on Conn.
func Start(ctx context.Context, o Options, boot *agentproto.Boot) (*Sandbox, error) {
	s, err := start(ctx, o, boot, true)
	var fe *fastIdmapError
	if errors.As(err, &fe) {
		// Whatever stopped it (a kernel or file system without
		// idmapped mounts) is met again the slow way, which knows
		// what to do then.
		if o.Log != nil {
			o.Log.Debug("no idmapped mount with the agent's namespace; trying one of its own", "err", fe.err)
		}
		boot.Root.RootFSChan = 0
		return start(ctx, o, boot, false)
	}
	return s, err
}

// fastIdmapError is a failure to idmap the rootfs with the agent's own
// namespace, after the agent started.
type fastIdmapError struct{ err error }

func (e *fastIdmapError) Error() string { return e.err.Error() }

// start is Start; with fast, a prepared root under root is idmapped with
// the started agent's own user namespace (sendIdmappedTree), instead of
// one a holder process makes first (idmappedTree).
func start(ctx context.Context, o Options, boot *agentproto.Boot, fast bool) (_ *Sandbox, err error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	s := &Sandbox{done: make(chan struct{}), stderr: boundary.NewTail(16 << 10)}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()

	g, cgErr := cgroup.New(ctx, o.ID, o.Limits)
	var cgFiles []*os.File
	if cgErr == nil {
		s.group = g
		if cgFiles, err = g.UserProcsFiles(); err != nil {
			return nil, fmt.Errorf("open sandbox cgroup: %w", err)
		}
		defer closeFiles(cgFiles)
	} else {
		s.noGroup = cgErr
	}
	if cgErr != nil && o.Limits != (cgroup.Limits{}) {
		s.notes = append(s.notes, fmt.Sprintf("memory, pids and CPU limits are not enforced by a cgroup: %v", cgErr))
		if o.Limits.Pids > 0 {
			// A per-user process count is the only fork-bomb brake
			// without cgroups. Since Linux 5.14 it counts the tasks of
			// the sandbox's root in its own user namespace, to which
			// the agent adds its own threads (the cgroup limit leaves
			// them out); before, every task of this user on the host,
			// which are counted here.
			n := uint64(o.Limits.Pids)
			if !kernel.AtLeast(kernel.Release(), 5, 14) {
				n += uint64(userProcessCount())
			}
			boot.Rlimits.NProc = n
			s.notes = append(s.notes, fmt.Sprintf("pids limit falls back to RLIMIT_NPROC=%d plus the agent's threads (it counts the tasks of each uid inside apart: root's, and those of any other uid a command becomes; before Linux 5.14 every process of uid %d)", n, os.Getuid()))
		}
	}

	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("create agent channel: %w", err)
	}
	// Non-blocking, so the runtime poller owns it and Close interrupts
	// a pending read.
	if err := unix.SetNonblock(pair[0], true); err != nil {
		return nil, fmt.Errorf("create agent channel: %w", err)
	}
	s.conn = os.NewFile(uintptr(pair[0]), "agent")
	agentEnd := os.NewFile(uintptr(pair[1]), "agent")
	defer agentEnd.Close()

	ids, err := hostIDs(ctx, o.ID)
	if err != nil {
		return nil, err
	}
	s.ids = ids.lease
	if ids.why != "" {
		s.notes = append(s.notes, fmt.Sprintf("the sandbox has one uid and one gid (root, which is you on the host), not %d: %s; run `airlock doctor` for details", subid.MaxIDs+1, ids.why))
	}
	uid, gid := ids.root()
	// The agent is executed through a descriptor opened here, so that no
	// directory on its path has to be searchable by the sandbox's uid.
	bin, err := os.Open(o.AgentPath)
	if err != nil {
		return nil, fmt.Errorf("open agent %s: %w", o.AgentPath, err)
	}
	defer bin.Close()
	if err := checkExecutable(bin, uid); err != nil {
		return nil, err
	}
	var tree, treeCh *os.File
	boot.Root.RootFSChan = 0
	fast = fast && boot.Root.RootFS != "" && os.Getuid() == 0
	if fast {
		tp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("create the rootfs channel: %w", err)
		}
		treeCh = os.NewFile(uintptr(tp[0]), "rootfs")
		defer treeCh.Close()
		tree = os.NewFile(uintptr(tp[1]), "rootfs")
		defer tree.Close()
	} else if boot.Root.RootFS != "" && os.Getuid() == 0 {
		// A prepared root owned by host root would be unwritable by a
		// remapped root (capabilities do not apply to files whose owner
		// is not mapped): it is given through an idmapped mount, or,
		// where none can be made, the sandbox keeps host root's
		// mapping, and root inside no capability. Said, not silent.
		if tree, err = idmappedTree(bin, boot.Root.RootFS, ids); err != nil {
			o.Log.Debug("no idmapped mount of the rootfs", "rootfs", boot.Root.RootFS, "err", err)
			ids = single(0, 0)
			uid, gid = 0, 0
			boot.Hardening.NoRootCaps = true
			s.notes = append(s.notes, fmt.Sprintf("with --rootfs under root, root in the sandbox is root on the host (without capabilities, and with one uid: set-id programs, chown and su do not work), since no idmapped mount of the rootfs could be made (%v); run airlock as an unprivileged user, with a rootfs that user owns, for an unprivileged sandbox", err))
		} else {
			defer tree.Close()
		}
	}
	extra := append([]*os.File{agentEnd}, cgFiles...)
	boot.Root.RootFSFD = 0
	switch {
	case fast:
		boot.Root.RootFSChan = 3 + len(extra)
		extra = append(extra, tree)
	case tree != nil:
		boot.Root.RootFSFD = 3 + len(extra)
		extra = append(extra, tree)
	}
	boot.Root.VFS = targets(o.Mounts)
	mounts, err := hostMounts(boot, uid, gid, 3+len(extra))
	if err != nil {
		return nil, err
	}
	defer closeFiles(mounts)
	extra = append(extra, mounts...)
	if o.DiskDir != "" {
		// Its root directory belongs to the sandbox's root, whose
		// mapping is now settled.
		s.disk, err = diskfs.Make(ctx, diskfs.Spec{Dir: o.DiskDir, SizeBytes: boot.Root.SizeBytes, Inodes: boot.Root.Inodes, UID: uid, GID: gid, Name: o.ID, SetID: !boot.Hardening.NoRootCaps})
		if err != nil {
			return nil, fmt.Errorf("make the sandbox's disk of %d MiB: %w", boot.Root.SizeBytes>>20, err)
		}
		boot.Root.DiskFD = 3 + len(extra)
		extra = append(extra, s.disk.Mount())
	}
	boot.Root.VFSChan = 0
	if len(o.Mounts) > 0 {
		h, theirs, err := newHostVFS(o.Mounts, o.VFS, uid, o.Log)
		if err != nil {
			return nil, err
		}
		s.vfs = h
		defer theirs.Close()
		if !vfsfuse.ConnectionsListed() {
			s.notes = append(s.notes, "programmable mounts: the kernel's FUSE connections are not listed (fusectl is not mounted at /sys/fs/fuse/connections), so closing the sandbox cannot fail a request its provider has not answered: a provider that never returns keeps the sandbox's processes, and Close, waiting; as root: mount -t fusectl fusectl /sys/fs/fuse/connections")
		}
		boot.Root.VFSChan = 3 + len(extra)
		extra = append(extra, theirs)
	}
	if boot.Link != nil {
		// The agent makes the network interface and sends its file
		// back on a channel of its own.
		lp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("create network channel: %w", err)
		}
		if err := unix.SetNonblock(lp[0], true); err != nil {
			unix.Close(lp[0])
			unix.Close(lp[1])
			return nil, fmt.Errorf("create network channel: %w", err)
		}
		s.link = os.NewFile(uintptr(lp[0]), "link")
		linkEnd := os.NewFile(uintptr(lp[1]), "link")
		defer linkEnd.Close()
		boot.Link.FD = 3 + len(extra)
		extra = append(extra, linkEnd)
	}
	binFD := 3 + len(extra)
	extra = append(extra, bin)
	agent := agentStart{binFD: binFD, extra: extra, stderr: s.stderr}
	if env := os.Getenv("AIRLOCK_AGENT_DEBUG"); env != "" {
		agent.env = []string{"AIRLOCK_AGENT_DEBUG=" + env}
		agent.stderr = io.MultiWriter(s.stderr, os.Stderr)
	}
	cmd, err := agent.start(ctx, ids)
	if err != nil && ids.helpers != nil {
		// The caller's subordinate ids could not be mapped: it keeps
		// its own ids alone, as without them. Said, not silent.
		o.Log.Debug("no subordinate ids", "err", err)
		s.notes = append(s.notes, fmt.Sprintf("the sandbox has one uid and one gid (root, which is you on the host), since your subordinate ids could not be mapped: %v; run `airlock doctor` for details", err))
		cmd, err = agent.start(ctx, single(uid, gid))
	}
	if err != nil {
		return nil, fmt.Errorf("start agent %s in new namespaces: %w", o.AgentPath, explainStart(err))
	}
	s.cmd = cmd
	go func() {
		s.waitErr = cmd.Wait()
		close(s.done)
	}()
	if s.vfs != nil {
		go s.vfs.serve()
	}
	if s.group != nil {
		if err := s.group.AddAgent(cmd.Process.Pid); err != nil {
			return nil, fmt.Errorf("place agent in its cgroup: %w", err)
		}
	}
	if fast {
		if err := sendIdmappedTree(treeCh, bin, cmd.Process.Pid, boot.Root.RootFS); err != nil {
			return nil, &fastIdmapError{err}
		}
	}
	boot.Mode = "process"
	// The root is assembled on a tmpfs mounted over /tmp in the agent's
	// private mount namespace: nothing is created on the host, and no host
	// path has to be reachable by the sandbox's uid.
	boot.Root.Stage = "/tmp"
	boot.CgroupFDs = nil
	for i := range cgFiles {
		boot.CgroupFDs = append(boot.CgroupFDs, 4+i)
	}
	return s, nil
}

func explainStart(err error) error {
	if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EACCES) {
		return fmt.Errorf("%w (user namespaces may be disabled or restricted; run `airlock doctor` for the exact cause and fix)", err)
	}
	return err
}

func closeFiles(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

// ReceiveLink returns the file of the TAP device that the agent made
// (when boot.Link asked it to), once it has sent it.
func (s *Sandbox) ReceiveLink(ctx context.Context) (*os.File, error) {
	if s.link == nil {
		return nil, errors.New("the agent was not asked to make the network interface")
	}
	defer func() {
		s.link.Close()
		s.link = nil
	}()
	return tap.Receive(ctx, s.link)
}

// Conn is the byte stream to the agent.
func (s *Sandbox) Conn() io.ReadWriteCloser { return s.conn }

// Notes lists limits that could not be enforced, with reasons.
func (s *Sandbox) Notes() []string { return s.notes }

// Done is closed when the agent has exited.
func (s *Sandbox) Done() <-chan struct{} { return s.done }

// PID is the host pid of the agent.
func (s *Sandbox) PID() int {
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Err describes how the agent ended, with the tail of what it printed.
func (s *Sandbox) Err() error {
	select {
	case <-s.done:
	default:
		return nil
	}
	what := agentEnd(s.cmd.ProcessState, s.waitErr)
	if msg := s.stderr.String(); msg != "" {
		return fmt.Errorf("%s: %s", what, msg)
	}
	return errors.New(what)
}

// agentEnd says how the agent process ended.
func agentEnd(ps *os.ProcessState, waitErr error) string {
	if ps != nil {
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok {
			switch {
			case ws.Signaled():
				return fmt.Sprintf("the sandbox's agent was killed by signal %d (%s)", int(ws.Signal()), unix.SignalName(ws.Signal()))
			case ws.Exited():
				return fmt.Sprintf("the sandbox's agent exited with status %d", ws.ExitStatus())
			}
		}
	}
	return fmt.Sprintf("the sandbox's agent ended: %v", waitErr)
}

// Counters reports the user cgroup's limit events so far. It is read
// around every command, so it reads only the two counters.
func (s *Sandbox) Counters() (boundary.Counters, error) { return boundary.GroupCounters(s.group) }

// Usage reads the user cgroup's figures.
func (s *Sandbox) Usage() (boundary.Usage, error) { return boundary.GroupUsage(s.group) }

// Pause freezes the sandbox's cgroup: its agent and every command.
func (s *Sandbox) Pause(ctx context.Context) error {
	if s.group == nil {
		return s.cannotPause()
	}
	if err := s.group.Freeze(ctx); err != nil {
		return err
	}
	s.paused.Store(true)
	return nil
}

// Resume thaws the sandbox's cgroup.
func (s *Sandbox) Resume(context.Context) error {
	if s.group == nil {
		return s.cannotPause()
	}
	if err := s.group.Thaw(); err != nil {
		return err
	}
	s.paused.Store(false)
	return nil
}

func (s *Sandbox) cannotPause() error {
	return fmt.Errorf("%w: at the process level a sandbox is paused by freezing its cgroup, and this one has none: %v", errors.ErrUnsupported, s.noGroup)
}

// PidsCurrent is how many tasks count against the pids limit: the user
// cgroup's, the spawner's threads included.
func (s *Sandbox) PidsCurrent() (int64, error) {
	if s.group == nil {
		return 0, errors.ErrUnsupported
	}
	n, err := s.group.PidsCurrent()
	return int64(n), err
}

// Close kills every process of the sandbox and removes what it left: the
// PID namespace collapses with its init, mounts vanish with the mount
// namespace, and the cgroup and mount point are removed here.
func (s *Sandbox) Close() error {
	var errs []error
	s.once.Do(func() {
		if s.conn != nil {
			s.conn.Close()
		}
		if s.link != nil {
			s.link.Close()
		}
		if s.tapFile != nil {
			s.tapFile.Close()
		}
		if s.cmd != nil && s.cmd.Process != nil {
			_ = s.cmd.Process.Kill()
			if s.paused.Load() {
				// A paused sandbox's agent dies once thawed (v1's
				// freezer holds even SIGKILL), its commands with it.
				_ = s.group.Thaw()
			}
			if s.vfs != nil {
				// A process killed while its request is with a
				// provider waits for the answer: the sandbox's end
				// must not wait on any provider.
				s.vfs.abort()
			}
			<-s.done
		}
		if s.vfs != nil {
			if err := s.vfs.close(); err != nil {
				errs = append(errs, err)
			}
		}
		if s.disk != nil {
			// No process uses it any more.
			if err := s.disk.Close(); err != nil {
				errs = append(errs, fmt.Errorf("release the disk: %w", err))
			}
		}
		cleared := true
		if s.group != nil {
			if err := s.group.Delete(); err != nil {
				errs = append(errs, fmt.Errorf("remove cgroup: %w", err))
				cleared = false
			}
		}
		// Every process that ran with the sandbox's uid is gone: its
		// PID namespace died with the agent, and the cgroups were
		// emptied. A uid that may still be in use stays held until this
		// process exits.
		if cleared {
			if err := s.ids.Release(); err != nil {
				errs = append(errs, err)
			}
		}
	})
	return errors.Join(errs...)
}

func userProcessCount() int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	uid := uint32(os.Getuid())
	n := 0
	for _, e := range ents {
		var st syscall.Stat_t
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		if syscall.Stat("/proc/"+e.Name(), &st) == nil && st.Uid == uid {
			n++
		}
	}
	return n
}

// Sweep removes the empty cgroups that sandboxes whose supervisor died
// (for example by SIGKILL) left behind. Everything else such a sandbox had
// lived in its own namespaces and died with it. Groups younger than a
// minute are left to the sandbox that may be setting them up. It returns
// the ids it removed.
func Sweep(log *slog.Logger) []string {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ids, err := cgroup.Sweep(time.Minute)
	if err == nil && len(ids) > 0 {
		log.Debug("removed stale cgroups", "ids", ids)
	}
	return ids
}

// Reclaim kills whatever is left of sandbox id, whose supervisor is known
// to be dead, and removes its cgroups.
func Reclaim(id string) error { return cgroup.Reclaim(id) }

// checkExecutable reports, before any namespace is made, whether uid can
// execute the agent binary.
func checkExecutable(f *os.File, uid int) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	mode := fi.Mode().Perm()
	switch {
	case int(st.Uid) == uid && mode&0o100 != 0, mode&0o001 != 0:
		return nil
	}
	return fmt.Errorf("agent %s (mode %v) is not executable by the sandbox's uid %d: chmod 0755 it", f.Name(), mode, uid)
}
