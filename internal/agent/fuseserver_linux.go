package agent

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/fxamacker/cbor/v2"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
	"github.com/airlock-sandbox/airlock/internal/vfsfuse"
	"github.com/airlock-sandbox/airlock/internal/vfsproto"
)

// The FUSE server is a process of its own, the agent's binary run with
// agentproto.FUSEServerArg, that holds the FUSE devices of the sandbox's
// programmable mounts and serves them. The agent itself uses the mounts
// (the file API), and the kernel cannot interrupt a request that the
// server has read: were the agent its own server, a thread of it waiting
// on a mount would keep the device open, so the agent could never exit
// once killed, its mounts never end, and neither would the sandbox. Kept
// apart, the server dies with the agent (its parent-death signal) or
// with the sandbox's PID namespace, which ends every mount and every
// wait on them.
//
// Its descriptors: 3 is a SOCK_SEQPACKET socket to the agent, on which
// it reports that it is ready and answers each request to serve a mount;
// mount i of fuseServerConfig.Targets has its FUSE device at 4+2i and,
// at 5+2i, a stream socket that carries the mount's protocol (package
// vfsproto), which the agent relays to and from the host's stream.

const (
	fuseCtlFD = 3
	// fuseFirstFD is the descriptor of the first mount's device.
	fuseFirstFD = 4
	// maxFUSEMsg bounds a control message (a target is at most a path).
	maxFUSEMsg = 8 << 10
	// maxFUSEMounts bounds the mounts of one server.
	maxFUSEMounts = 1024
	// fuseServerProcs is the server's GOMAXPROCS: many requests at
	// once, which one P would serialise.
	fuseServerProcs = 2
	// relayBuffer is the size of each direction's buffer of a mount's
	// relay: the protocol's largest frames (1 MiB of data) pass in a few
	// copies.
	relayBuffer = 256 << 10
)

// fuseServerConfig is passed to the FUSE server on its command line
// (CBOR, base64).
type fuseServerConfig struct {
	// Parent is the agent's pid: a server whose parent is another (the
	// agent died before it could tell) exits at once.
	Parent int `cbor:"parent"`
	// Targets are the mounts, in the order of their descriptors.
	Targets   []string `cbor:"targets"`
	Writeback bool     `cbor:"writeback,omitempty"`
	Serial    bool     `cbor:"serial,omitempty"`
	// Sentry: it runs inside gVisor's Sentry (see ZygoteConfig.Sentry).
	Sentry bool `cbor:"sentry,omitempty"`
}

// fuseMsg is a control message between the agent and the FUSE server:
// "ready" (server, once, Err if it cannot serve), "serve" (agent, with
// Target) and "served" (server, with Target, and Err if it failed).
type fuseMsg struct {
	Op     string `cbor:"op"`
	Target string `cbor:"target,omitempty"`
	Err    string `cbor:"err,omitempty"`
}

func encodeFUSEMsg(m fuseMsg) ([]byte, error) {
	b, err := cbor.Marshal(m)
	if err != nil {
		return nil, err
	}
	if len(b) > maxFUSEMsg {
		return nil, fmt.Errorf("control message of %d bytes is larger than %d", len(b), maxFUSEMsg)
	}
	return b, nil
}

// readFUSEMsg reads one control message from the blocking SOCK_SEQPACKET
// socket fd; io.EOF once the other end is gone.
func readFUSEMsg(fd int, buf []byte) (fuseMsg, error) {
	var m fuseMsg
	b, err := recvPacket(fd, buf)
	if err != nil {
		return m, err
	}
	if err := agentproto.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("malformed control message: %w", err)
	}
	return m, nil
}

// recvPacket reads one message from the blocking SOCK_SEQPACKET socket
// fd into buf; io.EOF once the other end is gone.
func recvPacket(fd int, buf []byte) ([]byte, error) {
	for {
		n, _, flags, _, err := unix.Recvmsg(fd, buf, nil, 0)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return nil, err
		case n == 0:
			return nil, io.EOF
		case flags&unix.MSG_TRUNC != 0:
			return nil, fmt.Errorf("a message larger than %d bytes", len(buf))
		}
		return buf[:n], nil
	}
}

func writeFUSEMsg(fd int, m fuseMsg) error {
	b, err := encodeFUSEMsg(m)
	if err != nil {
		return err
	}
	for {
		_, err = unix.Write(fd, b)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// fuseServerMain is the FUSE server process (see above). It returns its
// exit code.
func fuseServerMain(args []string, log *slog.Logger) int {
	var cfg fuseServerConfig
	if len(args) < 1 {
		log.Error("no configuration")
		return 2
	}
	b, err := base64.StdEncoding.DecodeString(args[0])
	if err == nil {
		err = agentproto.Unmarshal(b, &cfg)
	}
	if err != nil {
		log.Error("bad configuration", "err", err)
		return 2
	}
	// It needs no privilege to read and answer its devices: whatever a
	// command could make of it through a mount's requests, it holds no
	// capability and gains none.
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		log.Error("set no_new_privs", "err", err)
		return 1
	}
	if err := limitCapabilities(nil, !cfg.Sentry); err != nil {
		log.Error("drop capabilities", "err", err)
		return 1
	}
	// Die with the agent: its death must end the mounts, whatever any
	// of its threads waits for. The signal was set at the start, but
	// the execution may have cleared it; it is the parent's now or
	// never.
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		log.Error("set the parent-death signal", "err", err)
		return 1
	}
	if os.Getppid() != cfg.Parent {
		return 1
	}
	// No one may ptrace it or read its memory, even with its uid (no
	// user command can name it anyway: they live in a PID namespace
	// beneath the agent's).
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		log.Error("make the FUSE server non-dumpable", "err", err)
		return 1
	}
	s, err := newFUSEServer(cfg, log)
	if err != nil {
		_ = writeFUSEMsg(fuseCtlFD, fuseMsg{Op: "ready", Err: err.Error()})
		return 1
	}
	if err := writeFUSEMsg(fuseCtlFD, fuseMsg{Op: "ready"}); err != nil {
		return 1
	}
	if err := s.serve(); err != nil {
		log.Error("control channel", "err", err)
		return 1
	}
	// The agent is gone: exiting releases the devices, which ends every
	// mount and every request waiting on one.
	return 0
}

// fuseServer is the server process's state.
type fuseServer struct {
	cfg     fuseServerConfig
	log     *slog.Logger
	devs    []*os.File
	conns   []net.Conn // nil once served
	servers []*vfsfuse.Server
}

func newFUSEServer(cfg fuseServerConfig, log *slog.Logger) (*fuseServer, error) {
	if len(cfg.Targets) == 0 || len(cfg.Targets) > maxFUSEMounts {
		return nil, fmt.Errorf("%d mounts to serve", len(cfg.Targets))
	}
	s := &fuseServer{cfg: cfg, log: log}
	for i := range cfg.Targets {
		fd := fuseFirstFD + 2*i
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR {
			return nil, fmt.Errorf("descriptor %d of mount %s is not a FUSE device (%v)", fd, cfg.Targets[i], err)
		}
		s.devs = append(s.devs, os.NewFile(uintptr(fd), "/dev/fuse"))
		f := os.NewFile(uintptr(fd+1), "vfs")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("the socket of mount %s: %w", cfg.Targets[i], err)
		}
		s.conns = append(s.conns, c)
	}
	return s, nil
}

// serve answers the agent's requests until it goes away.
func (s *fuseServer) serve() error {
	buf := make([]byte, maxFUSEMsg)
	for {
		m, err := readFUSEMsg(fuseCtlFD, buf)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if m.Op != "serve" {
			return fmt.Errorf("unknown request %q", m.Op)
		}
		r := fuseMsg{Op: "served", Target: m.Target}
		if err := s.serveMount(m.Target); err != nil {
			r.Err = err.Error()
		}
		if err := writeFUSEMsg(fuseCtlFD, r); err != nil {
			return err
		}
	}
}

// serveMount starts serving the mount at target with the provider at
// the other end of its socket. It returns once the kernel and the
// server agree.
func (s *fuseServer) serveMount(target string) error {
	i := slices.Index(s.cfg.Targets, target)
	if i < 0 || s.conns[i] == nil {
		return fmt.Errorf("no programmable mount %s was prepared, or it is served already", target)
	}
	conn := s.conns[i]
	s.conns[i] = nil
	// The server keeps a descriptor of its own; without one, a mount
	// that could not be served ends (ENOTCONN) rather than waits.
	defer s.devs[i].Close()
	client := vfsproto.NewClient(conn, vfsproto.ClientOptions{Logger: s.log, Serial: s.cfg.Serial})
	srv, err := vfsfuse.Serve(s.devs[i], client, vfsfuse.Options{Logger: s.log.With("mount", target), Writeback: s.cfg.Writeback})
	if err != nil {
		client.Close()
		return err
	}
	client.OnInvalidate(srv.Invalidate)
	s.servers = append(s.servers, srv)
	return nil
}

// fuseClient is the agent's end of its FUSE server: the control socket,
// and the process's life.
type fuseClient struct {
	log *slog.Logger
	ctl int
	pid int
	// mu keeps one request in flight.
	mu      sync.Mutex
	replies chan fuseMsg
	// gone is closed once the server's control socket ends: it exited.
	gone chan struct{}
}

// startFUSEServer starts the FUSE server for the mounts at targets,
// whose devices are devs (the caller closes its own afterwards), and
// returns it with the agent's end of each mount's socket, in the order
// of targets.
func startFUSEServer(targets []string, devs []*os.File, writeback, serial, sentry bool, log *slog.Logger) (*fuseClient, []*os.File, error) {
	if len(targets) > maxFUSEMounts {
		return nil, nil, fmt.Errorf("%d programmable mounts: at most %d", len(targets), maxFUSEMounts)
	}
	cfg := fuseServerConfig{Parent: os.Getpid(), Targets: targets, Writeback: writeback, Serial: serial, Sentry: sentry}
	b, err := cbor.Marshal(cfg)
	if err != nil {
		return nil, nil, err
	}
	var theirs, ours []*os.File
	closeAll := func() {
		for _, f := range theirs {
			f.Close()
		}
		for _, f := range ours {
			f.Close()
		}
	}
	ctl, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("FUSE server control socket: %w", err)
	}
	theirs = append(theirs, os.NewFile(uintptr(ctl[1]), "fuse-server"))
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		unix.Close(ctl[0])
		closeAll()
		return nil, nil, err
	}
	defer devnull.Close()
	files := []*os.File{devnull, os.Stderr, os.Stderr, theirs[0]}
	for i := range targets {
		sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			unix.Close(ctl[0])
			closeAll()
			return nil, nil, fmt.Errorf("socket of programmable mount %s: %w", targets[i], err)
		}
		ours = append(ours, os.NewFile(uintptr(sp[0]), "vfs"))
		theirs = append(theirs, os.NewFile(uintptr(sp[1]), "vfs"))
		files = append(files, devs[i], theirs[len(theirs)-1])
	}
	env := []string{fmt.Sprintf("GOMAXPROCS=%d", fuseServerProcs)}
	if v := os.Getenv("AIRLOCK_AGENT_DEBUG"); v != "" {
		env = append(env, "AIRLOCK_AGENT_DEBUG="+v)
	}
	c := &fuseClient{log: log, ctl: ctl[0], replies: make(chan fuseMsg, 1), gone: make(chan struct{})}
	started := make(chan error, 1)
	// The server's parent-death signal comes when the thread that
	// started it exits, not the agent: this goroutine keeps that thread
	// to itself for as long as the server lives, so that it exits only
	// with the agent, and is never one that waits on a mount.
	go func() {
		runtime.LockOSThread()
		p, err := os.StartProcess("/proc/self/exe", []string{"airlock-guest", agentproto.FUSEServerArg, base64.StdEncoding.EncodeToString(b)}, &os.ProcAttr{
			Dir:   "/",
			Env:   env,
			Files: files,
			Sys:   &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
		})
		if err != nil {
			started <- err
			return
		}
		c.pid = p.Pid
		_ = p.Release() // reaped by reapOrphans
		started <- nil
		c.readLoop()
	}()
	err = <-started
	// The server's ends are its own now: the control socket then ends
	// when the server does.
	for _, f := range theirs {
		f.Close()
	}
	theirs = nil
	if err != nil {
		unix.Close(ctl[0])
		closeAll()
		return nil, nil, fmt.Errorf("start the FUSE server: %w", err)
	}
	return c, ours, nil
}

// readLoop delivers the server's messages until its socket ends.
func (c *fuseClient) readLoop() {
	defer close(c.gone)
	buf := make([]byte, maxFUSEMsg)
	for {
		m, err := readFUSEMsg(c.ctl, buf)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				c.log.Warn("FUSE server control socket", "err", err)
			}
			c.log.Warn("the FUSE server exited: programmable mounts are gone", "pid", c.pid)
			return
		}
		select {
		case c.replies <- m:
		default:
			c.log.Warn("unexpected message from the FUSE server", "op", m.Op)
		}
	}
}

// ready waits until the server reports that it can serve, for at most
// timeout.
func (c *fuseClient) ready(timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case m := <-c.replies:
		if m.Op != "ready" {
			return fmt.Errorf("the FUSE server said %q before it was ready", m.Op)
		}
		if m.Err != "" {
			return fmt.Errorf("the FUSE server cannot serve the mounts: %s", m.Err)
		}
		return nil
	case <-c.gone:
		return errors.New("the FUSE server exited during its setup")
	case <-t.C:
		return fmt.Errorf("the FUSE server did not finish its setup within %s", timeout)
	}
}

// serve has the server serve the mount at target over its socket. It
// returns once the kernel and the server agree.
func (c *fuseClient) serve(target string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.gone:
		return errors.New("the FUSE server is gone")
	default:
	}
	if err := writeFUSEMsg(c.ctl, fuseMsg{Op: "serve", Target: target}); err != nil {
		return fmt.Errorf("ask the FUSE server to serve %s: %w", target, err)
	}
	select {
	case m := <-c.replies:
		if m.Op != "served" || m.Target != target {
			return fmt.Errorf("the FUSE server answered %q for %q to the request to serve %s", m.Op, m.Target, target)
		}
		if m.Err != "" {
			return errors.New(m.Err)
		}
		return nil
	case <-c.gone:
		return fmt.Errorf("the FUSE server exited while it set up the mount %s", target)
	}
}

// tasks is the number of the server's threads, 0 if unknown.
func (c *fuseClient) tasks() int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", c.pid))
	if err != nil {
		return 0
	}
	return len(ents)
}

// relay copies bytes both ways between a and b until either ends, and
// then closes both.
func relay(a, b net.Conn) {
	var once sync.Once
	copyTo := func(dst, src net.Conn) {
		buf := make([]byte, relayBuffer)
		_, _ = io.CopyBuffer(dst, src, buf)
		once.Do(func() {
			a.Close()
			b.Close()
		})
	}
	go copyTo(a, b)
	go copyTo(b, a)
}
