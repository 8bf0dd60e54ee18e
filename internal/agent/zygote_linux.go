package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fxamacker/cbor/v2"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
	"github.com/airlock-sandbox/airlock/internal/fdpass"
)

// The spawner ("zygote") is a second copy of the agent binary that runs as
// PID 1 of a nested PID namespace, in its own mount namespace with a /proc
// that shows only user processes. It joins the limited cgroup, applies
// rlimits, landlock, the seccomp filter and the sandbox's capability
// bounds to itself, and then starts every user command with a plain
// fork+exec, so commands inherit all of it with no per-exec cost. The agent
// proper stays outside: invisible to user code, unlimited by the cgroup that
// user code can exhaust, and unreachable by signals or ptrace.

func durationNs(ns int64) time.Duration { return time.Duration(ns) }

// The spawner's main goroutine stays on the main thread, the thread group
// leader, from before main runs: its setup and every fork happen there,
// and per-thread state that the kernel reaches through /proc/PID (the
// time namespace for children) is the leader's.
//
// It runs on one P: it does nothing in parallel, and each P lets the
// runtime keep one more thread busy (see spareThreads).
func init() {
	if len(os.Args) > 1 && os.Args[1] == "zygote" {
		runtime.LockOSThread()
		runtime.GOMAXPROCS(1)
	}
}

// spawnerSpareThreads is how many idle OS threads the spawner keeps.
const spawnerSpareThreads = 2

// spareThreads makes the runtime create n OS threads now and keep them
// idle. Every thread of the spawner counts against the sandbox's pids
// limit, and the runtime treats a failed thread creation as fatal: a
// command that fills the limit at once (a fork bomb) would kill the
// spawner, and with it every process of the sandbox, the first time the
// runtime needs a thread it has not made yet (to hand its P to the reaper's
// locked thread, say). With one P, at most one unlocked thread runs Go code
// at a time, besides the signal receiver's, which blocks; threads are never
// destroyed once made, so spares made during set-up cover every later need.
// Each helper goroutine holds a thread of its own until all have one, then
// unlocks and returns, leaving its thread in the runtime's idle list.
func spareThreads(n int) <-chan struct{} {
	done := make(chan struct{})
	var locked sync.WaitGroup
	release := make(chan struct{})
	var returned sync.WaitGroup
	for range n {
		locked.Add(1)
		returned.Add(1)
		go func() {
			defer returned.Done()
			runtime.LockOSThread()
			locked.Done()
			<-release
			runtime.UnlockOSThread()
		}()
	}
	go func() {
		locked.Wait()
		close(release)
		returned.Wait()
		close(done)
	}()
	return done
}

// ZygoteMain runs the spawner. fd 3 is its SEQPACKET socket to the agent;
// cgroup.procs descriptors, if any, follow from fd 4. It never returns.
func ZygoteMain(cfg ZygoteConfig, log *slog.Logger) {
	// Confinement that is per-thread is applied to this thread, and every
	// command is forked from it (serve runs spawn inline): never unlock.
	runtime.LockOSThread()
	// It dies with the agent. Were the agent already gone, so would be
	// its PID namespace, and this process with it.
	_ = unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0, 0, 0)
	// The socket is used with plain blocking system calls, never through
	// the runtime's poller: a read then wakes exactly the thread that
	// forks, rather than a poller thread that must hand over to it.
	if err := unix.SetNonblock(spawnerFD, false); err != nil {
		fmt.Fprintf(os.Stderr, "airlock spawner: socket: %v\n", err)
		os.Exit(1)
	}
	z := &zserver{fd: spawnerFD, live: map[uint64]int{}, byPid: map[int]uint64{}, spawned: make(chan struct{}, 1), log: log}
	caught := catchFatalSignals()
	spares := spareThreads(spawnerSpareThreads)
	notes, err := zygoteSetup(cfg)
	if err != nil {
		z.reply(zmsg{Op: "ready", Err: err.Error()})
		os.Exit(1)
	}
	<-caught
	<-spares
	z.reply(zmsg{Op: "ready", Notes: notes})
	z.serve()
	os.Exit(0)
}

// ZygoteConfig is passed to the spawner on its command line (CBOR, base64)
// because it must be applied before anything else runs.
type ZygoteConfig struct {
	CgroupFDs   int     `cbor:"cg"`
	NoFile      uint64  `cbor:"nofile"`
	FSize       uint64  `cbor:"fsize"`
	NProc       uint64  `cbor:"nproc"`
	AS          uint64  `cbor:"as"`
	MsgQueue    *uint64 `cbor:"msgqueue,omitempty"`
	Seccomp     bool    `cbor:"seccomp"`
	Landlock    bool    `cbor:"landlock"`
	AllowPtrace bool    `cbor:"ptrace"`
	NoRootCaps  bool    `cbor:"norootcaps,omitempty"`
	MountProc   bool    `cbor:"proc"`
	// KillableByOOM undoes the agent's exemption from the OOM killer,
	// which the spawner inherits (a micro-VM's agent has one), so that
	// the OOM killer takes commands.
	KillableByOOM bool `cbor:"oomable,omitempty"`
	// Mask, when set, replaces the host's identity for commands (see
	// HostMask); it needs MountProc.
	Mask *HostMask `cbor:"mask,omitempty"`
	// Sentry says the spawner runs inside gVisor's Sentry, whose kernel
	// lacks some of what confinement uses elsewhere (securebits).
	Sentry bool `cbor:"sentry,omitempty"`
	// Root, when set, makes this a container's spawner: its commands'
	// root is this directory of the sandbox, with Binds bound in it
	// (see enterRoot).
	Root  string            `cbor:"root,omitempty"`
	Binds []agentproto.Bind `cbor:"binds,omitempty"`
}

func zygoteSetup(cfg ZygoteConfig) ([]string, error) {
	// No one may ptrace or read the spawner's memory, even with the same uid.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("make spawner non-dumpable: %w", err)
	}
	if cfg.KillableByOOM {
		if err := os.WriteFile("/proc/self/oom_score_adj", []byte("0"), 0); err != nil {
			return nil, fmt.Errorf("make commands killable by the OOM killer: %w", err)
		}
	}
	switch {
	case cfg.Root != "":
		// A container's spawner: its commands' root is the container's.
		if !cfg.MountProc {
			return nil, errors.New("a container's spawner needs its own /proc")
		}
		if err := enterRoot(cfg.Root, cfg.Binds); err != nil {
			return nil, err
		}
		if err := protectProc(); err != nil {
			return nil, err
		}
	case cfg.MountProc:
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			return nil, fmt.Errorf("make mounts private: %w", err)
		}
		// Mount over the agent's /proc rather than unmounting it first:
		// the kernel only allows a new proc mount while a fully visible
		// one exists. The old one is left shadowed and unreachable.
		if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return nil, fmt.Errorf("mount /proc for user processes: %w", err)
		}
		if err := protectProc(); err != nil {
			return nil, err
		}
	}
	var notes []string
	if cfg.Mask != nil {
		if !cfg.MountProc {
			return nil, errors.New("masking the host's identity needs the spawner's own /proc")
		}
		n, err := applyHostMask(cfg.Mask)
		if err != nil {
			return nil, err
		}
		notes = append(notes, n...)
	}
	for i := 0; i < cfg.CgroupFDs; i++ {
		f := os.NewFile(uintptr(4+i), "cgroup.procs")
		_, err := f.Write([]byte("0"))
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("join the sandbox cgroup: %w", err)
		}
	}
	// The Sentry has no cgroup namespaces; its cgroups are its own,
	// and name nothing of the host's.
	if cfg.CgroupFDs > 0 && !cfg.Sentry {
		if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
			return nil, fmt.Errorf("new cgroup namespace: %w", err)
		}
	}
	if err := applyRlimits(cfg); err != nil {
		return nil, err
	}
	n, err := confine(cfg)
	return append(notes, n...), err
}

// procReadOnly are /proc paths that reach host-wide kernel state. Root in
// the sandbox may map to root on the host (when airlock runs as root), and
// some of these check only the uid, so they are made read-only.
var procReadOnly = []string{"sys", "sysrq-trigger", "irq", "bus", "fs"}

// procMasked are /proc files that leak host kernel internals; an empty
// read-only file is bound over each one that exists.
var procMasked = []string{"kcore", "kmsg", "keys", "key-users", "timer_list", "sched_debug", "latency_stats", "kallsyms", "acpi", "scsi", "asound"}

func protectProc() error {
	for _, name := range procReadOnly {
		p := "/proc/" + name
		if _, err := os.Lstat(p); err != nil {
			continue
		}
		if err := unix.Mount(p, p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("protect %s: %w", p, err)
		}
		attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC}
		if err := mountSetattr(unix.AT_FDCWD, p, unix.AT_RECURSIVE, attr); err != nil {
			return fmt.Errorf("make %s read-only: %w", p, err)
		}
	}
	for _, name := range procMasked {
		p := "/proc/" + name
		fi, err := os.Lstat(p)
		if err != nil {
			continue
		}
		if fi.IsDir() {
			err = unix.Mount("tmpfs", p, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=0,mode=0555")
		} else {
			err = unix.Mount("/dev/null", p, "", unix.MS_BIND, "")
		}
		if err != nil {
			return fmt.Errorf("mask %s: %w", p, err)
		}
	}
	return nil
}

// fatalSignals are the signals whose default action ends a process and
// that the Go runtime would act on (by exiting) unless they are notified.
var fatalSignals = []os.Signal{
	unix.SIGHUP, unix.SIGINT, unix.SIGQUIT, unix.SIGILL, unix.SIGTRAP, unix.SIGABRT,
	unix.SIGBUS, unix.SIGFPE, unix.SIGSEGV, unix.SIGUSR1, unix.SIGUSR2, unix.SIGPIPE,
	unix.SIGALRM, unix.SIGTERM, unix.SIGSTKFLT, unix.SIGXCPU, unix.SIGXFSZ,
	unix.SIGVTALRM, unix.SIGIO, unix.SIGPWR, unix.SIGSYS,
}

// catchFatalSignals routes those signals to a channel nobody acts on, so
// user processes cannot kill the spawner. Leaving them at SIG_DFL is not
// enough: the kernel's protection of a PID namespace's init is checked
// when a signal is sent, and is skipped while the main thread has signals
// blocked (as the runtime does around every fork); another thread then
// takes the fatal default action. Caught signals reset to SIG_DFL in
// exec'd commands. Notify costs a runtime hand-off per signal, so this runs
// concurrently with the rest of the set-up.
func catchFatalSignals() <-chan struct{} {
	done := make(chan struct{})
	go func() {
		signal.Notify(make(chan os.Signal, 1), fatalSignals...)
		close(done)
	}()
	return done
}

func applyRlimits(cfg ZygoteConfig) error {
	set := func(res int, v uint64, name string) error {
		if err := syscall.Setrlimit(res, &syscall.Rlimit{Cur: v, Max: v}); err != nil {
			return fmt.Errorf("set %s limit to %d: %w", name, v, err)
		}
		return nil
	}
	if err := set(unix.RLIMIT_CORE, 0, "core size"); err != nil {
		return err
	}
	if cfg.NoFile > 0 {
		if err := set(unix.RLIMIT_NOFILE, cfg.NoFile, "open files"); err != nil {
			return err
		}
	}
	if cfg.FSize > 0 {
		if err := set(unix.RLIMIT_FSIZE, cfg.FSize, "file size"); err != nil {
			return err
		}
	}
	if cfg.NProc > 0 {
		if err := set(unix.RLIMIT_NPROC, cfg.NProc, "process count"); err != nil {
			return err
		}
	}
	if cfg.AS > 0 {
		if err := set(unix.RLIMIT_AS, cfg.AS, "address space"); err != nil {
			return err
		}
	}
	if cfg.MsgQueue != nil {
		// Lowered only: raising a hard limit needs a capability the
		// sandbox does not have.
		var cur syscall.Rlimit
		if err := syscall.Getrlimit(unix.RLIMIT_MSGQUEUE, &cur); err != nil {
			return fmt.Errorf("read the POSIX message queue limit: %w", err)
		}
		if err := set(unix.RLIMIT_MSGQUEUE, min(*cfg.MsgQueue, cur.Max), "POSIX message queue bytes"); err != nil {
			return err
		}
	}
	return nil
}

// spawnerFD is the spawner's SEQPACKET socket to the agent.
const spawnerFD = 3

type zserver struct {
	fd  int
	wmu sync.Mutex
	log *slog.Logger
	// spawned wakes the reaper after a fork when it found no children.
	spawned chan struct{}

	// mu serialises fork+record against reaping, so an exit is never
	// reaped before its pid is recorded.
	mu    sync.Mutex
	live  map[uint64]int
	byPid map[int]uint64
}

func (z *zserver) reply(m zmsg) {
	b, err := cbor.Marshal(m)
	if err != nil {
		return
	}
	z.wmu.Lock()
	defer z.wmu.Unlock()
	for {
		err = unix.Sendmsg(z.fd, b, nil, nil, 0)
		if err != unix.EINTR {
			return
		}
	}
}

func (z *zserver) serve() {
	go z.reapLoop()
	buf := make([]byte, maxSpawnMsg+4096)
	oob := make([]byte, unix.CmsgSpace(3*4))
	for {
		n, oobn, _, _, err := unix.Recvmsg(z.fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			return // the agent is gone; the namespace dies with us
		}
		fds := fdpass.Rights(oob[:oobn])
		var m zmsg
		if err := agentproto.Unmarshal(buf[:n], &m); err != nil {
			closeAll(fds)
			continue
		}
		switch m.Op {
		case "spawn":
			z.spawn(m, fds)
		case "kill":
			closeAll(fds)
			z.kill(m)
		case "ps":
			closeAll(fds)
			go z.processes(m)
		default:
			closeAll(fds)
		}
	}
}

// reapLoop waits for children to exit on a thread of its own, blocked in
// waitid, so that an exit wakes it directly rather than through the
// runtime's signal hand-off. WNOWAIT only observes: reap collects under
// z.mu, which keeps a fork and the recording of its pid together. With no
// children at all (ECHILD), it sleeps until the next fork; every process in
// the namespace descends from one, and orphans are reparented here.
func (z *zserver) reapLoop() {
	runtime.LockOSThread()
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOWAIT, nil)
		switch err {
		case nil:
			z.reap()
		case unix.EINTR:
		case unix.ECHILD:
			<-z.spawned
		default:
			z.log.Error("wait for user processes", "err", err)
			<-z.spawned
		}
	}
}
func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

func (z *zserver) spawn(m zmsg, fds []int) {
	defer closeAll(fds)
	if len(fds) != 3 || len(m.Argv) == 0 {
		z.reply(zmsg{Op: "spawned", ID: m.ID, Err: "malformed spawn request"})
		return
	}
	path, err := lookPath(m.Argv[0], m.Env, m.Dir)
	if err != nil {
		z.reply(zmsg{Op: "spawned", ID: m.ID, Err: err.Error(), Code: string(agentproto.CodeNotFound)})
		return
	}
	dir := m.Dir
	if dir == "" {
		dir = "/"
	}
	attr := &syscall.ProcAttr{
		Dir:   dir,
		Env:   m.Env,
		Files: []uintptr{uintptr(fds[0]), uintptr(fds[1]), uintptr(fds[2])},
		Sys:   &syscall.SysProcAttr{Setsid: true, Setctty: m.TTY, Ctty: 0},
	}
	if m.Cred != nil {
		// The spawner holds CAP_SETUID and CAP_SETGID in the sandbox's
		// namespace (RootCaps); a command that is not root gets none of
		// root's capabilities across the change of ids.
		attr.Sys.Credential = &syscall.Credential{Uid: m.Cred.UID, Gid: m.Cred.GID, Groups: m.Cred.Groups}
	}
	z.mu.Lock()
	pid, err := syscall.ForkExec(path, m.Argv, attr)
	if err == nil {
		z.live[m.ID] = pid
		z.byPid[pid] = m.ID
	}
	z.mu.Unlock()
	if err == nil {
		select {
		case z.spawned <- struct{}{}:
		default:
		}
	}
	if err != nil && m.Cred != nil && (errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.EPERM)) {
		z.reply(zmsg{Op: "spawned", ID: m.ID, Err: fmt.Sprintf("cannot run %s as uid %d, gid %d: this sandbox does not map those ids (without a range of ids, only root runs in it; see airlock doctor)", m.Argv[0], m.Cred.UID, m.Cred.GID), Code: string(agentproto.CodeStart)})
		return
	}
	if err != nil {
		code, msg := describeStartErr(m.Argv[0], dir, err)
		z.reply(zmsg{Op: "spawned", ID: m.ID, Err: msg, Code: string(code)})
		return
	}
	z.reply(zmsg{Op: "spawned", ID: m.ID, Pid: pid})
}

// describeStartErr classifies a failed exec: a missing program is
// CodeNotFound (a shell's 127); anything else that stopped it from running
// is CodeStart (126).
func describeStartErr(name, dir string, err error) (agentproto.Code, string) {
	switch {
	case errors.Is(err, syscall.ENOENT):
		if _, serr := os.Stat(dir); serr != nil {
			return agentproto.CodeStart, fmt.Sprintf("working directory %s does not exist", dir)
		}
		return agentproto.CodeNotFound, fmt.Sprintf("%s: no such file or interpreter", name)
	case errors.Is(err, syscall.EACCES):
		return agentproto.CodeStart, fmt.Sprintf("%s: permission denied (is it executable?)", name)
	}
	return agentproto.CodeStart, fmt.Sprintf("start %s: %v", name, err)
}

// reap collects every exited child. As PID 1 it also reaps orphans.
func (z *zserver) reap() {
	for {
		var ws syscall.WaitStatus
		var ru syscall.Rusage
		z.mu.Lock()
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, &ru)
		if err != nil || pid <= 0 {
			z.mu.Unlock()
			return
		}
		id, ok := z.byPid[pid]
		if ok {
			delete(z.byPid, pid)
			delete(z.live, id)
		}
		z.mu.Unlock()
		if ok {
			cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
			z.reply(zmsg{Op: "exit", ID: id, Pid: pid, WS: uint32(ws), CPUNs: int64(cpu), RSS: ru.Maxrss * 1024})
		}
	}
}

func (z *zserver) kill(m zmsg) {
	z.mu.Lock()
	pid, ok := z.live[m.ID]
	z.mu.Unlock()
	if !ok || m.Sig <= 0 {
		return
	}
	sig := syscall.Signal(m.Sig)
	if !m.Tree {
		// The command leads its own process group (it called setsid).
		if err := syscall.Kill(-pid, sig); err != nil {
			_ = syscall.Kill(pid, sig)
		}
		return
	}
	z.killTree(pid)
}

// killTree kills the session led by root, every process descended from
// root, and orphans that root's tree left behind. An orphan is a process
// reparented to this PID 1 (it escaped with setsid and a double fork); it
// is taken to be root's when it started after root and after no other live
// command, so daemons of earlier or concurrent commands are spared. Scans
// repeat until none finds a victim, since forks can race the first pass.
func (z *zserver) killTree(root int) {
	// Start times are read now rather than at spawn, keeping them off the
	// exec path: live commands are not reaped yet, so their /proc entries
	// are still there (a zombie keeps its start time).
	z.mu.Lock()
	var rootStart uint64
	var others []uint64
	for _, p := range z.live {
		st, ok := readStat(p)
		if !ok {
			continue
		}
		if p == root {
			rootStart = st.start
		} else {
			others = append(others, st.start)
		}
	}
	z.mu.Unlock()
	_ = syscall.Kill(-root, syscall.SIGKILL)
	for round := 0; round < 50; round++ {
		victims := treeMembers(root, rootStart, others)
		if len(victims) == 0 {
			return
		}
		for _, p := range victims {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
	}
}

type procStat struct {
	ppid, sid int
	start     uint64
	zombie    bool
}

// readStat parses /proc/PID/stat: pid (comm) state ppid pgrp session ...
// with the start time as field 22. comm may contain spaces and parens.
func readStat(pid int) (procStat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return procStat{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	sid, _ := strconv.Atoi(f[3])
	start, _ := strconv.ParseUint(f[19], 10, 64)
	return procStat{ppid: ppid, sid: sid, start: start, zombie: f[0] == "Z"}, true
}

// treeMembers lists live processes that belong to root's tree, from /proc
// (which shows only this namespace's processes).
func treeMembers(root int, rootStart uint64, others []uint64) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	procs := map[int]procStat{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == 1 {
			continue
		}
		if st, ok := readStat(pid); ok && !st.zombie {
			procs[pid] = st
		}
	}
	heads := map[int]bool{root: true}
	for pid, p := range procs {
		if p.ppid != 1 || pid == root || p.start < rootStart {
			continue
		}
		mine := true
		for _, o := range others {
			if o <= p.start {
				mine = false // another live command may own it
				break
			}
		}
		if mine {
			heads[pid] = true
		}
	}
	var out []int
	for pid, p := range procs {
		if heads[pid] || p.sid == root {
			out = append(out, pid)
			continue
		}
		for a, hops := p.ppid, 0; a > 1 && hops < 4096; hops++ {
			if heads[a] {
				out = append(out, pid)
				break
			}
			pa, ok := procs[a]
			if !ok {
				break
			}
			a = pa.ppid
		}
	}
	return out
}

// lookPath resolves a command name against the command's own PATH.
func lookPath(name string, env []string, dir string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	path := lookupEnv(env, "PATH")
	if path == "" {
		path = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		if !filepath.IsAbs(d) {
			d = filepath.Join(dir, d)
		}
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: command not found in PATH (%s)", name, path)
}
