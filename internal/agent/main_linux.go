package agent

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"sync"
	"syscall"

	"github.com/fxamacker/cbor/v2"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
	"github.com/airlock-sandbox/airlock/internal/image/owners"
	"github.com/airlock-sandbox/airlock/internal/tap"
)

// Main is the agent's entry point. With "zygote" as first argument it runs
// the user-command spawner, with agentproto.FUSEServerArg the server of
// the programmable mounts; otherwise it is PID 1 of a new sandbox and
// speaks to the host on fd 3.
func Main(args []string) {
	lvl := slog.LevelWarn
	if os.Getenv("AIRLOCK_AGENT_DEBUG") != "" {
		lvl = slog.LevelDebug
	}
	logs := slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl})
	log := slog.New(logs).With("component", "agent")
	if len(args) > 1 && args[1] == agentproto.HoldArg {
		// Holding a user namespace for the host: nothing else to do.
		_, _ = io.Copy(io.Discard, os.Stdin)
		return
	}
	if len(args) > 1 && args[1] == agentproto.OverlayLayersArg {
		os.Exit(overlayLayersMain(args[2:]))
	}
	if len(args) > 1 && args[1] == agentproto.AwaitMapsArg {
		awaitMaps(args[2:])
		return
	}
	if len(args) > 1 && args[1] == agentproto.JoinCgroupsArg {
		joinCgroups(args[2:])
		return
	}
	if len(args) > 1 && args[1] == agentproto.ImageWorkerArg {
		owners.Serve(args[2:])
		return
	}
	if err := closeOnExecAbove2(); err != nil {
		fmt.Fprintf(os.Stderr, "airlock agent: %v\n", err)
		os.Exit(1)
	}
	if len(args) > 1 && args[1] == agentproto.FUSEServerArg {
		os.Exit(fuseServerMain(args[2:], slog.New(logs).With("component", "fuse-server")))
	}
	if len(args) > 1 && args[1] == "zygote" {
		var cfg ZygoteConfig
		if len(args) > 2 {
			b, err := base64.StdEncoding.DecodeString(args[2])
			if err == nil {
				err = agentproto.Unmarshal(b, &cfg)
			}
			if err != nil {
				fmt.Fprintf(os.Stderr, "airlock spawner: bad configuration: %v\n", err)
				os.Exit(2)
			}
		}
		ZygoteMain(cfg, log)
		return
	}
	if os.Getpid() == 1 && len(args) == 1 && slices.Contains(os.Environ(), agentproto.VMEnv) {
		runtime.GOMAXPROCS(1)
		go reapOrphans()
		err := vmMain(log)
		fmt.Fprintf(os.Stderr, "airlock agent: %v\n", err)
		// PID 1 ends the machine: a restart, which the VMM turns into
		// its exit.
		unix.Sync()
		_ = unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART)
		os.Exit(1)
	}
	// The agent shuffles bytes between the host and user commands. With
	// one P, a hand-off between its goroutines (stream reader, request
	// handler, writer) stays on one thread instead of waking another CPU
	// for it; that shortens every request by tens of microseconds, more
	// on virtual CPUs where a wake-up costs an exit to the hypervisor.
	// System calls that block still release the P.
	runtime.GOMAXPROCS(1)
	// As PID 1, reap whatever is reparented to it. No process that runs
	// user code can see the agent (they live in the spawner's nested PID
	// namespace), so it needs no protection from their signals.
	go reapOrphans()
	// Supplementary groups that came from the host (an unprivileged
	// caller's, whose maps a helper wrote) are none of the sandbox's.
	// Where the namespace denies setgroups, the host left none to drop
	// or none can be dropped; either way this changes nothing.
	_ = syscall.Setgroups(nil)
	// Entering the user namespace gained capabilities, which cleared the
	// parent-death signal set at clone; set it again. If the supervisor is
	// already gone, its end of the channel is closed and Serve returns.
	_ = unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0, 0, 0)
	_ = syscall.SetNonblock(3, true)
	conn := os.NewFile(3, "host")
	if err := Serve(context.Background(), conn, func(ctx context.Context, b *agentproto.Boot) (Prepared, error) { return prepareProcess(ctx, b, log) }, log); err != nil {
		fmt.Fprintf(os.Stderr, "airlock agent: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// makeLink makes the sandbox's TAP device in this namespace, sends its
// file to the host over the inherited socket, and keeps nothing of it.
func makeLink(l *agentproto.LinkSpec) error {
	defer unix.Close(l.FD)
	c, err := tapConfig(l)
	if err != nil {
		return err
	}
	f, err := tap.CreateHere(c)
	if err != nil {
		return err
	}
	defer f.Close()
	return tap.Send(l.FD, f)
}

// tapConfig is the interface l describes.
func tapConfig(l *agentproto.LinkSpec) (tap.Config, error) {
	c := tap.Config{Name: l.Name, MTU: l.MTU}
	var err error
	if c.Address, err = netip.ParsePrefix(l.Address); err != nil {
		return c, err
	}
	if c.Gateway, err = netip.ParseAddr(l.Gateway); err != nil {
		return c, err
	}
	if l.AddressV6 != "" {
		if c.AddressV6, err = netip.ParsePrefix(l.AddressV6); err != nil {
			return c, err
		}
		if c.GatewayV6, err = netip.ParseAddr(l.GatewayV6); err != nil {
			return c, err
		}
	}
	return c, nil
}

func reapOrphans() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGCHLD)
	for range ch {
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if err != nil || pid <= 0 {
				break
			}
		}
	}
}

// prepareProcess sets up a process-mode sandbox: hostname, root
// filesystem, loopback, and the confined spawner.
func prepareProcess(ctx context.Context, b *agentproto.Boot, log *slog.Logger) (Prepared, error) {
	if b.Mode != "process" && b.Mode != "gvisor" {
		return Prepared{}, fmt.Errorf("agent mode %q is not supported by this agent", b.Mode)
	}
	if err := unix.Sethostname([]byte(b.Hostname)); err != nil {
		return Prepared{}, fmt.Errorf("set hostname: %w", err)
	}
	if b.Link != nil {
		// Before the root is built: /dev/net/tun is the host's (or
		// the Sentry's).
		mk := makeLink
		if b.Mode == "gvisor" {
			mk = relayLink
		}
		if err := mk(b.Link); err != nil {
			return Prepared{}, fmt.Errorf("make the network interface: %w", err)
		}
	}
	if b.Mode != "gvisor" || b.Sentry == nil {
		return prepareSandbox(ctx, b, log)
	}
	// The commands' limits are the Sentry's cgroups' (the host's holds
	// the whole Sentry), made while its /sys and /proc are in view.
	cg, fds, err := newSentryCgroups(b.Sentry)
	if err != nil {
		return Prepared{}, err
	}
	b.CgroupFDs = fds
	p, err := prepareSandbox(ctx, b, log)
	if err != nil {
		return p, err
	}
	p.usage = cg.usage
	p.limits = cg.limits
	go cg.watch(context.Background(), log)
	return p, nil
}

// prepareSandbox does what every boundary's agent does once its own
// setup is made: the programmable mounts' devices, the root, IPC limits,
// loopback, and the confined spawner.
func prepareSandbox(ctx context.Context, b *agentproto.Boot, log *slog.Logger) (Prepared, error) {
	// The FUSE devices are opened while the host's are in view; the
	// mounts are made once the root is the sandbox's.
	vfs, err := openVFS(&b.Root, log)
	if err != nil {
		return Prepared{}, err
	}
	vfs.sentry = b.Mode == "gvisor"
	if err := buildRoot(b); err != nil {
		vfs.closeDevices()
		return Prepared{}, err
	}
	if err := vfs.mount(); err != nil {
		vfs.closeDevices()
		return Prepared{}, err
	}
	// The mounts' server starts meanwhile, in the agent's PID namespace,
	// where no user command can see it.
	if err := vfs.startServer(); err != nil {
		return Prepared{}, err
	}
	if err := limitIPC(b.IPC); err != nil {
		return Prepared{}, err
	}
	if err := loopbackUp(); err != nil {
		return Prepared{}, fmt.Errorf("bring up loopback: %w", err)
	}
	// A micro-VM's guest kernel is its own, but a VM restored from a
	// snapshot has the snapshot's boot id, as every other restore of it
	// does, and its command line names the host's TSC frequency:
	// commands see the sandbox's own there too. Its clocks stay the
	// guest's: a guest kernel before 6.2 refuses the vfork of a command
	// into a time namespace its spawner made (EINVAL), and they count
	// from the guest's boot (the snapshot's, when restored), never the
	// host's.
	var mask *HostMask
	if b.Mode != "gvisor" {
		// gVisor's Sentry is a kernel of its own, with its own boot
		// id, command line and clocks.
		if mask, err = newHostMask(b.Mode != "vm"); err != nil {
			return Prepared{}, err
		}
	}
	if err := vfs.ready(); err != nil {
		return Prepared{}, err
	}
	var cgfds []*os.File
	for _, fd := range b.CgroupFDs {
		cgfds = append(cgfds, os.NewFile(uintptr(fd), "cgroup.procs"))
	}
	cfg := ZygoteConfig{
		CgroupFDs:   len(cgfds),
		NoFile:      b.Rlimits.NoFile,
		FSize:       b.Rlimits.FSize,
		NProc:       nprocWithAgent(b.Rlimits.NProc, vfs.serverTasks()),
		AS:          b.Rlimits.AS,
		MsgQueue:    b.Rlimits.MsgQueue,
		Seccomp:     b.Hardening.Seccomp,
		Landlock:    b.Hardening.Landlock,
		AllowPtrace: b.Hardening.AllowPtrace,
		NoRootCaps:  b.Hardening.NoRootCaps,
		MountProc:   true,
		Mask:        mask,
		// A micro-VM's agent is exempt from its guest's OOM killer.
		KillableByOOM: b.Mode == "vm",
		Sentry:        b.Mode == "gvisor",
	}
	// The cgroup files stay open: restarting the spawner after a crash
	// needs them again.
	sp := &restartingSpawner{start: func() (*zclient, error) { return startZygote(cfg, cgfds) }}
	z, err := sp.current()
	if err != nil {
		return Prepared{}, err
	}
	newContainer := func(root string, binds []agentproto.Bind) (ContainerSpawner, error) {
		c := cfg
		c.Root, c.Binds = root, binds
		csp := &restartingSpawner{start: func() (*zclient, error) { return startZygote(c, cgfds) }}
		if _, err := csp.current(); err != nil {
			return nil, err
		}
		return csp, nil
	}
	return Prepared{Spawner: sp, Notes: z.notes, vfs: vfs, NewContainer: newContainer}, nil
}

// nprocWithAgent is the RLIMIT_NPROC that stands for the pids limit n
// (when no cgroup can), plus the agent's own threads and others, those
// of its other processes (the FUSE server's): since Linux 5.14 the
// kernel counts them with the commands', as the tasks of the sandbox's
// root, where the cgroup limit leaves the agent out. Threads they make
// later come out of the commands' share.
func nprocWithAgent(n uint64, others int) uint64 {
	if n == 0 {
		return 0
	}
	n += uint64(max(others, 0))
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return n
	}
	return n + uint64(len(tasks))
}

// restartingSpawner starts a new spawner if the previous one died (for
// example, killed by the OOM killer inside the user cgroup).
type restartingSpawner struct {
	start   func() (*zclient, error)
	mu      sync.Mutex
	z       *zclient
	stopped bool
}

// Stop kills the spawner, and with it, the init of its PID namespace,
// every command it started; it starts no other.
func (r *restartingSpawner) Stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = true
	if r.z == nil || r.z.pid <= 0 {
		return
	}
	select {
	case <-r.z.done:
		// Dead already (and maybe reaped: its pid may be another's).
	default:
		_ = unix.Kill(r.z.pid, unix.SIGKILL)
	}
}

func (r *restartingSpawner) current() (*zclient, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return nil, errors.New("the container was removed")
	}
	if r.z != nil {
		select {
		case <-r.z.done:
		default:
			return r.z, nil
		}
	}
	z, err := r.start()
	if err != nil {
		return nil, err
	}
	r.z = z
	return z, nil
}

func (r *restartingSpawner) Spawn(req SpawnRequest, stdio [3]*os.File) (Child, error) {
	z, err := r.current()
	if err != nil {
		return nil, err
	}
	return z.Spawn(req, stdio)
}

func startZygote(cfg ZygoteConfig, cgfds []*os.File) (*zclient, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("spawner socket: %w", err)
	}
	ours := os.NewFile(uintptr(fds[0]), "spawner")
	theirs := os.NewFile(uintptr(fds[1]), "spawner")
	b, err := cbor.Marshal(cfg)
	if err != nil {
		ours.Close()
		theirs.Close()
		return nil, err
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		ours.Close()
		theirs.Close()
		return nil, err
	}
	files := []*os.File{devnull, os.Stderr, os.Stderr, theirs}
	files = append(files, cgfds...)
	p, err := os.StartProcess("/proc/self/exe", []string{"airlock-guest", "zygote", base64.StdEncoding.EncodeToString(b)}, &os.ProcAttr{
		Dir: "/",
		// Nothing of the agent's environment (nil would pass it on);
		// each command gets its own.
		Env:   []string{},
		Files: files,
		// No parent-death signal here: the spawner sets its own (see
		// ZygoteMain), since the runtime's check that the parent still
		// lives, made with it, misreads a parent outside the new PID
		// namespace as dead (getppid is 0 there), and kills the child
		// where that kill of a namespace's init is not ignored (gVisor).
		Sys: &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS},
	})
	// The spawner's end is its own now: were it kept open here, a
	// spawner that dies during its setup would leave the wait for its
	// ready message below without an end of file.
	theirs.Close()
	devnull.Close()
	if err != nil {
		ours.Close()
		return nil, fmt.Errorf("start the spawner: %w", err)
	}
	pid := p.Pid
	_ = p.Release() // reaped by reapOrphans
	c, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		return nil, fmt.Errorf("spawner socket: %w", err)
	}
	z, err := newZClient(c.(*net.UnixConn))
	if err != nil {
		return nil, err
	}
	z.pid = pid
	return z, nil
}

func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	if ifr.Uint16()&unix.IFF_UP != 0 {
		return nil // gVisor's Sentry brings it up, and cannot be asked to
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}
