package cli

// Warm pools on the command line.
//
// `airlock pool create` starts a pool supervisor as `run --detach` starts
// a sandbox supervisor: the same executable run again with a hidden
// command (__pool) in a session of its own, given its instructions on
// descriptor 3 and saying on descriptor 4 that it is ready or why it is
// not. The supervisor holds an airlock.Pool and lives until `airlock pool
// rm` sends it SIGTERM. There is no daemon: its folder,
// <home>/pools/<name>/, holds pool.json (who supervises the pool, its
// size and its configuration), ctl.sock (its control socket) and
// supervisor.log, and pool ls reads the folders and asks each live
// supervisor for its counts.
//
// A client of ctl.sock sends one JSON line and reads JSON lines back.
// {"op":"stats"} is answered with the pool's counts. {"op":"take"} takes a
// ready sandbox from the pool, records it in the state directory (kind
// "pool") and serves its control socket, as `airlock rpc` does for the
// sandboxes it creates, then answers its id. With "detach" (run -d
// --pool) the sandbox is from then on a detached sandbox like any other,
// which ps, exec, logs, kill and rm reach, until it is closed or its pool
// ends. Without it (run --pool -- CMD) the sandbox lasts as long as the
// connection: the client runs the command through the sandbox's control
// socket, as exec does, then closes its side of the connection, and the
// supervisor closes the sandbox, removes its record and says so; a client
// that dies closes the connection too, so nothing is left behind.
//
// The sandboxes handed out are served by the pool's supervisor: pool rm
// stops those still running with the pool, and a supervisor killed with
// SIGKILL takes them with it, as every supervisor does.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/image/store"
	"github.com/airlock-sandbox/airlock/internal/lifecycle"
	"github.com/airlock-sandbox/airlock/internal/rpc"
	"github.com/airlock-sandbox/airlock/internal/state"
	"github.com/airlock-sandbox/airlock/internal/unixsock"
)

const (
	poolsDir             = "pools"
	poolFile             = "pool.json"
	poolSocket           = "ctl.sock"
	poolLog              = "supervisor.log"
	poolSuperviseCmdName = "__pool"
	// poolStopWait is how long pool rm waits for a supervisor to close
	// its sandboxes (VMs take their time) before it kills it.
	poolStopWait = 30 * time.Second
	// poolEndWait bounds how long run --pool waits for the supervisor to
	// remove the sandbox once the command has ended.
	poolEndWait = 30 * time.Second
)

// poolRecord is a pool's pool.json.
type poolRecord struct {
	Name       string           `json:"name"`
	Size       int              `json:"size"`
	Isolation  string           `json:"isolation,omitempty"`
	Image      string           `json:"image,omitempty"`
	CreatedAt  time.Time        `json:"created_at"`
	Supervisor state.Supervisor `json:"supervisor"`
	// Config is the configuration asked for, secrets redacted.
	Config json.RawMessage `json:"config,omitempty"`
}

// poolSpec is what pool create hands the pool supervisor on descriptor 3.
type poolSpec struct {
	Name string `json:"name"`
	Size int    `json:"size"`
	// Config is what was asked, without the program's built-in
	// configuration, which the supervisor has as its own.
	Config airlock.Config `json:"config"`
}

// poolReady is the pool supervisor's one-line report on descriptor 4.
type poolReady struct {
	Name  string `json:"name,omitempty"`
	Error string `json:"error,omitempty"`
}

// poolRequest is a request on a pool's control socket.
type poolRequest struct {
	// Op is "take" or "stats".
	Op string `json:"op"`
	// Detach leaves a sandbox taken running after the connection ends;
	// Name is then its name, and Main, when given, its main command,
	// which it runs until that ends (run -d --pool -- CMD).
	Detach bool         `json:"detach,omitempty"`
	Name   string       `json:"name,omitempty"`
	Main   *poolCommand `json:"main,omitempty"`
}

// poolCommand is the main command of a detached sandbox taken from a pool.
type poolCommand struct {
	Argv    []string          `json:"argv"`
	Env     map[string]string `json:"env,omitempty"`
	Dir     string            `json:"dir,omitempty"`
	User    string            `json:"user,omitempty"`
	TTY     bool              `json:"tty,omitempty"`
	Timeout time.Duration     `json:"timeout,omitempty"`
}

// poolReply is an answer on a pool's control socket.
type poolReply struct {
	SandboxID string             `json:"sandbox_id,omitempty"`
	Stats     *airlock.PoolStats `json:"stats,omitempty"`
	// Removed says that the sandbox of a take without Detach is closed
	// and its record removed.
	Removed bool   `json:"removed,omitempty"`
	Error   string `json:"error,omitempty"`
	// ExitCode goes with Error when the main command could not start.
	ExitCode int `json:"exit_code,omitempty"`
	// Entrypoint is the taken sandbox's image's: run --pool puts it
	// before the command's words, as run does.
	Entrypoint []string `json:"entrypoint,omitempty"`
}

// poolsRoot returns <home>/pools, made (0700) when missing.
func poolsRoot() (string, error) {
	home, err := airlock.Home()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(home, poolsDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("create the pools directory: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return "", fmt.Errorf("open the pools directory: %w", err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%s is not a directory: remove it, or set AIRLOCK_HOME to another directory", dir)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return "", fmt.Errorf("%s belongs to uid %d, not to you: have its owner remove it, or set AIRLOCK_HOME to a directory of your own", dir, st.Uid)
	}
	return dir, nil
}

// validatePoolName checks a pool's name, which names its folder.
func validatePoolName(name string) error {
	if err := state.ValidateName(name); err != nil {
		return fmt.Errorf("invalid pool name: %w", err)
	}
	return nil
}

// readPool reads the record of pool name; an error matching fs.ErrNotExist
// says there is none.
func readPool(root, name string) (poolRecord, error) {
	var rec poolRecord
	if err := validatePoolName(name); err != nil {
		return rec, err
	}
	f, err := os.OpenFile(filepath.Join(root, name, poolFile), os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return rec, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		return rec, fmt.Errorf("read pool %s: %w", name, err)
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return rec, fmt.Errorf("pool %s: %s is damaged (%v): remove the pool with `airlock pool rm %s`", name, poolFile, err, name)
	}
	return rec, nil
}

// claimPool makes the folder of pool rec.Name and writes its record,
// replacing what a dead supervisor left under that name.
func claimPool(root string, rec poolRecord) (string, error) {
	dir := filepath.Join(root, rec.Name)
	for range 2 {
		err := os.Mkdir(dir, 0o700)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("create the folder of pool %s: %w", rec.Name, err)
		}
		old, rerr := readPool(root, rec.Name)
		if rerr == nil && old.Supervisor.Alive() {
			return "", fmt.Errorf("a pool named %q exists: remove it (`airlock pool rm %s`) or choose another name", rec.Name, rec.Name)
		}
		if rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			return "", rerr
		}
		if rerr != nil && time.Since(folderTime(dir)) < 10*time.Second {
			// Another pool create is writing its record.
			return "", fmt.Errorf("a pool named %q is being created: choose another name", rec.Name)
		}
		// Its supervisor died: what it left goes.
		if err := os.RemoveAll(dir); err != nil {
			return "", fmt.Errorf("remove what the dead supervisor of pool %s left: %w", rec.Name, err)
		}
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return "", err
	}
	tmp := filepath.Join(dir, "."+poolFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("record pool %s: %w", rec.Name, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, poolFile)); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("record pool %s: %w", rec.Name, err)
	}
	return dir, nil
}

func folderTime(dir string) time.Time {
	fi, err := os.Stat(dir)
	if err != nil {
		return time.Time{}
	}
	return fi.ModTime()
}

// newPoolName is the name of a pool created without --name.
func newPoolName() string {
	return "pool-" + strings.TrimPrefix(airlock.NewID(), "sb-")
}

func imageLabel(c airlock.Config) string {
	switch {
	case c.Image != "":
		return c.Image
	case c.RootFS != "":
		return "rootfs:" + c.RootFS
	}
	return "host"
}

func (a *app) newPoolCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pool",
		Short: "Keep sandboxes started and ready: run --pool takes one at once",
		Long: `A pool keeps a number of started sandboxes of one configuration ready, so
that taking one (run --pool) costs no start: milliseconds less at the
process level, seconds less at the vm level. Each sandbox is handed out
once; the pool starts another in its place.

A pool is served by a supervisor process of its own, as a detached
sandbox is, until pool rm stops it; the sandboxes taken from it and
still running stop with it.`,
		Example: `  airlock pool create --name py --size 4 --image python:3.12-slim
  airlock run --pool py -- python3 -c 'print(1)'
  airlock run -d --pool py        # prints an id; then airlock exec ID -- CMD
  airlock pool ls
  airlock pool rm py`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(a.newPoolCreateCmd(), a.newPoolListCmd(), a.newPoolRmCmd())
	return cmd
}

func (a *app) newPoolCreateCmd() *cobra.Command {
	var f runFlags
	var size int
	cmd := &cobra.Command{
		Use:   "create [flags] --size N",
		Short: "Start a pool of sandboxes kept ready, and print its name",
		Long: `Start a pool that keeps --size sandboxes of the configuration the flags
give (those of run) started and ready, and print its name once a first
one has started (or fail with the start's error). It starts them in the
background, two at a time, and replaces each one taken.
A sandbox's --timeout is given when it is taken (run --timeout).`,
		Example: `  airlock pool create --size 2
  airlock pool create --name vms --size 4 --isolation vm --memory 512m`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.createPool(cmd.Context(), &f, size)
		},
	}
	a.configFlags(cmd, &f)
	fl := cmd.Flags()
	fl.IntVar(&size, "size", 0, fmt.Sprintf("number of sandboxes to keep ready (1 to %d)", airlock.MaxPoolSize))
	fl.StringVar(&f.name, "name", "", "a name for the pool (default: a generated one)")
	fl.BoolVar(&f.asJSON, "json", false, "print a JSON object")
	fl.BoolVarP(&f.quiet, "quiet", "q", false, "do not print the image's progress")
	_ = cmd.MarkFlagRequired("size")
	return cmd
}

// createPool starts a pool supervisor, waits until its pool is made and
// prints its name.
func (a *app) createPool(ctx context.Context, f *runFlags, size int) error {
	if size < 1 || size > airlock.MaxPoolSize {
		return fmt.Errorf("--size %d: give the number of sandboxes to keep ready, 1 to %d", size, airlock.MaxPoolSize)
	}
	name := f.name
	if name == "" {
		name = newPoolName()
	}
	if err := validatePoolName(name); err != nil {
		return fmt.Errorf("--name: %w", err)
	}
	root, err := poolsRoot()
	if err != nil {
		return err
	}
	if rec, err := readPool(root, name); err == nil && rec.Supervisor.Alive() {
		return fmt.Errorf("a pool named %q exists: remove it (`%s pool rm %s`) or choose another name", name, a.name, name)
	}
	asked, err := f.config()
	if err != nil {
		return err
	}
	cfg, err := a.withBase(asked)
	if err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	if size > 1 {
		for _, p := range cfg.Ports {
			if p.HostPort != 0 {
				return fmt.Errorf("-p with host port %d: the %d sandboxes of a pool cannot all bind it; give the sandbox port alone (-p %d), and each binds a free host port (airlock port ID shows it)", p.HostPort, size, p.SandboxPort)
			}
		}
	}
	// Got here, with progress, so that the supervisor finds it.
	if cfg.Image != "" {
		if !f.quiet {
			view := newProgressView(os.Stderr, f.asJSON)
			cfg.OnImageProgress = both(cfg.OnImageProgress, func(p airlock.ImageProgress) { view.Report(store.Progress(p)) })
			defer view.Close()
		}
		if _, err := airlock.PrepareImage(ctx, cfg); err != nil {
			return err
		}
	}
	spec := poolSpec{Name: name, Size: size, Config: asked}
	var ready poolReady
	if err := startHelper(ctx, poolSuperviseCmdName, spec, &ready); err != nil {
		return fmt.Errorf("the pool supervisor exited during start (%v): run `%s doctor`, or `%s run` with the same flags to see why a sandbox does not start", err, a.name, a.name)
	}
	if ready.Error != "" {
		return errors.New(ready.Error)
	}
	if f.asJSON {
		return writeJSON(map[string]any{"name": ready.Name, "size": size})
	}
	_, err = fmt.Println(ready.Name)
	return err
}

// startHelper starts this executable with the hidden command sub in a
// session of its own, hands it spec on descriptor 3 and reads its one-line
// report from descriptor 4 into ready.
func startHelper(ctx context.Context, sub string, spec, ready any) error {
	specR, specW, err := os.Pipe()
	if err != nil {
		return err
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		specR.Close()
		specW.Close()
		return err
	}
	defer readyR.Close()
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the airlock executable: %w", err)
	}
	cmd := exec.Command(exe, sub)
	cmd.ExtraFiles = []*os.File{specR, readyW}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	specR.Close()
	readyW.Close()
	if err != nil {
		specW.Close()
		return err
	}
	go func() {
		_ = json.NewEncoder(specW).Encode(spec)
		specW.Close()
	}()
	got := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(io.LimitReader(readyR, 1<<20)).ReadBytes('\n')
		if err == nil {
			err = json.Unmarshal(line, ready)
		}
		got <- err
	}()
	select {
	case err = <-got:
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return ctx.Err()
	}
	if err != nil {
		// It died before reporting; reap it so that it leaves no zombie.
		if werr := cmd.Wait(); werr != nil {
			return werr
		}
		return err
	}
	return cmd.Process.Release()
}

func (a *app) newPoolSuperviseCmd() *cobra.Command {
	return &cobra.Command{
		Use:    poolSuperviseCmdName,
		Short:  "Supervise a pool of sandboxes (started by airlock pool create)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE:   func(cmd *cobra.Command, _ []string) error { return a.supervisePool(cmd.Context()) },
	}
}

// supervisePool is the supervisor of one pool: it makes the pool, serves
// its control socket and, told to stop, closes the pool and the sandboxes
// it handed out that still run.
func (a *app) supervisePool(ctx context.Context) error {
	readyFile := os.NewFile(4, "ready")
	report := func(r poolReady) {
		_ = json.NewEncoder(readyFile).Encode(r)
		readyFile.Close()
	}
	fail := func(err error) error {
		report(poolReady{Error: err.Error()})
		return exitError{125}
	}
	var spec poolSpec
	if err := json.NewDecoder(io.LimitReader(os.NewFile(3, "spec"), maxSpecBytes)).Decode(&spec); err != nil {
		return fail(fmt.Errorf("read the pool supervisor's instructions: %w", err))
	}
	stopped, stop := signal.NotifyContext(context.WithoutCancel(ctx), syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer stop()
	work := context.WithoutCancel(ctx)

	home, err := airlock.Home()
	if err != nil {
		return fail(err)
	}
	sbStore, err := state.Open(home)
	if err != nil {
		return fail(err)
	}
	root, err := poolsRoot()
	if err != nil {
		return fail(err)
	}
	asked, err := a.withBase(spec.Config)
	if err != nil {
		return fail(err)
	}
	askedJSON, _ := json.Marshal(spec.Config)
	self := os.Getpid()
	start, err := state.ProcessStartTime(self)
	if err != nil {
		return fail(fmt.Errorf("record pool %s: %w", spec.Name, err))
	}
	rec := poolRecord{
		Name: spec.Name, Size: spec.Size, Isolation: string(asked.Isolation), Image: imageLabel(asked),
		CreatedAt: time.Now(), Supervisor: state.Supervisor{PID: self, StartTime: start},
		Config: state.Redact(askedJSON),
	}
	if rec.Isolation == "" {
		rec.Isolation = string(airlock.IsolationProcess)
	}
	dir, err := claimPool(root, rec)
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(dir)
	log := slog.New(slog.DiscardHandler)
	if lf, err := os.OpenFile(filepath.Join(dir, poolLog), os.O_WRONLY|os.O_CREATE|os.O_APPEND|syscall.O_NOFOLLOW, 0o600); err == nil {
		defer lf.Close()
		_ = unix.Dup2(int(lf.Fd()), 2)
		log = slog.New(slog.NewTextHandler(lf, nil)).With("pool", spec.Name)
	}

	s := &poolServer{
		name: spec.Name, store: sbStore, asked: askedJSON, log: log,
		control: rpc.NewServer(rpc.Options{Version: a.version, Logger: log}),
		hubs:    map[string]*rpc.Hub{}, taken: map[string]*takenSandbox{},
	}
	s.ctx, s.cancel = context.WithCancel(work)
	cfg := asked
	if cfg.Logger == nil {
		// The built-in configuration's logger wins, as for run.
		cfg.Logger = log
	}
	cfg.OnEvent = both(cfg.OnEvent, s.publish)
	pool, err := airlock.NewPool(work, cfg, spec.Size)
	if err != nil {
		return fail(err)
	}
	s.pool = pool
	if err := firstStart(stopped, pool); err != nil {
		_ = pool.Close()
		return fail(fmt.Errorf("start pool %s: %w", spec.Name, err))
	}
	ln, err := lifecycle.Listen(dir, poolSocket)
	if err != nil {
		_ = pool.Close()
		return fail(fmt.Errorf("open the control socket of pool %s: %w", spec.Name, err))
	}
	s.wg.Go(func() { s.serve(ln) })
	log.Info("pool started", "size", spec.Size, "isolation", rec.Isolation)
	report(poolReady{Name: spec.Name})

	<-stopped.Done()
	ln.Close()
	s.shutdown()
	log.Info("pool removed")
	return nil
}

// firstStart waits until a start of the pool has ended, and returns the
// error of the last when none succeeded: a configuration that cannot
// start a sandbox fails pool create, not every run --pool after it.
func firstStart(ctx context.Context, pool *airlock.Pool) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		st := pool.Stats()
		if st.Started > 0 {
			return nil
		}
		if st.Failed > 0 {
			// Get with a context already done answers at once: with the
			// last start's error when no start is under way.
			done, cancel := context.WithCancel(ctx)
			cancel()
			sb, err := pool.Get(done)
			switch {
			case err == nil:
				// A retry succeeded meanwhile; the pool replaces it.
				_ = sb.Close()
				return nil
			case !errors.Is(err, context.Canceled):
				return err
			}
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-t.C:
		}
	}
}

// poolServer serves a pool's control socket.
type poolServer struct {
	name    string
	pool    *airlock.Pool
	store   *state.Store
	control *rpc.Server
	asked   json.RawMessage
	log     *slog.Logger
	// ctx ends when the pool is removed.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu sync.Mutex
	// hubs deliver each pooled sandbox's events to the sessions on its
	// control socket: made by its first event, dropped by its last.
	hubs    map[string]*rpc.Hub
	taken   map[string]*takenSandbox
	closing bool
}

// takenSandbox is a sandbox handed out and served by the pool supervisor.
type takenSandbox struct {
	sb  *airlock.Sandbox
	sup *lifecycle.Supervision
	// detached: it runs on after its taker's connection ends.
	detached bool
}

// publish delivers an event of a pooled sandbox to its hub.
func (s *poolServer) publish(e airlock.Event) {
	s.mu.Lock()
	hub := s.hubs[e.SandboxID]
	if hub == nil {
		hub = &rpc.Hub{}
		s.hubs[e.SandboxID] = hub
	}
	if e.Type == airlock.EventLifecycle && e.Lifecycle != nil && e.Lifecycle.State != "started" {
		delete(s.hubs, e.SandboxID)
	}
	s.mu.Unlock()
	hub.Publish(e)
}

func (s *poolServer) serve(ln net.Listener) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				s.log.Warn("control socket stopped accepting", "err", err)
			}
			return
		}
		if err := lifecycle.CheckPeer(conn); err != nil {
			s.log.Warn("refused a control connection", "err", err)
			conn.Close()
			continue
		}
		s.wg.Go(func() {
			defer conn.Close()
			// When the pool is removed, a connection that has sent
			// nothing, or waits to end its sandbox, stops reading.
			stop := context.AfterFunc(s.ctx, func() { _ = conn.SetReadDeadline(time.Now()) })
			defer stop()
			s.handle(conn)
		})
	}
}

// handle answers one connection's request.
func (s *poolServer) handle(conn net.Conn) {
	br := bufio.NewReader(conn)
	enc := json.NewEncoder(conn)
	line, err := br.ReadSlice('\n')
	if err != nil {
		return
	}
	var req poolRequest
	if err := json.Unmarshal(line, &req); err != nil {
		_ = enc.Encode(poolReply{Error: fmt.Sprintf("pool %s: a request is one JSON object on a line: %v", s.name, err)})
		return
	}
	switch req.Op {
	case "stats":
		st := s.pool.Stats()
		_ = enc.Encode(poolReply{Stats: &st})
		return
	case "take":
	default:
		_ = enc.Encode(poolReply{Error: fmt.Sprintf("pool %s: unknown request %q: give take or stats", s.name, req.Op)})
		return
	}
	// gone is closed once the client has closed its side (or died).
	gone := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, br)
		close(gone)
	}()
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	go func() {
		select {
		case <-gone:
			cancel()
		case <-ctx.Done():
		}
	}()
	t, err := s.take(ctx, req)
	if err != nil {
		code := 0
		if se, ok := errors.AsType[*airlock.StartError](err); ok {
			code = se.ExitCode()
		}
		_ = enc.Encode(poolReply{Error: err.Error(), ExitCode: code})
		return
	}
	if err := enc.Encode(poolReply{SandboxID: t.sb.ID(), Entrypoint: t.sb.Image().Entrypoint}); err != nil {
		// Nobody learnt its id.
		s.remove(t, "taker gone")
		return
	}
	if req.Detach {
		return
	}
	// Run --pool: the sandbox lasts as long as the connection.
	select {
	case <-gone:
	case <-s.ctx.Done():
	}
	s.remove(t, "removed")
	_ = enc.Encode(poolReply{SandboxID: t.sb.ID(), Removed: true})
}

// remove ends a taken sandbox and removes its record.
func (s *poolServer) remove(t *takenSandbox, reason string) {
	s.end(t, reason)
	if err := s.store.Remove(t.sb.ID()); err != nil {
		s.log.Warn("could not remove the record of a sandbox taken from the pool", "sandbox", t.sb.ID(), "err", err)
	}
}

// take takes a ready sandbox from the pool, records it and serves its
// control socket.
func (s *poolServer) take(ctx context.Context, req poolRequest) (*takenSandbox, error) {
	sb, err := s.pool.Get(ctx)
	if err != nil {
		return nil, fmt.Errorf("pool %s: %w", s.name, err)
	}
	s.mu.Lock()
	hub := s.hubs[sb.ID()]
	if hub == nil {
		// Stopped already: no more events.
		hub = &rpc.Hub{}
	}
	s.mu.Unlock()
	opts := lifecycle.Options{
		Store: s.store, Name: req.Name, Kind: state.KindPool, Config: s.asked,
		Server: s.control, Events: hub, Logger: s.log,
	}
	var main *lifecycle.MainCommand
	if req.Main != nil && req.Detach {
		// As run -d: the image's entrypoint, then the command's words.
		req.Main.Argv = imageCommand(sb.Image(), nil, req.Main.Argv)
		main = lifecycle.NewMainCommand()
		opts.Main, opts.Command, opts.TTY = main, req.Main.Argv, req.Main.TTY
	}
	sup, err := lifecycle.Begin(context.WithoutCancel(ctx), sb, opts)
	if err != nil {
		_ = sb.Close()
		return nil, err
	}
	t := &takenSandbox{sb: sb, sup: sup, detached: req.Detach}
	if main != nil {
		if err := s.startMain(sb, sup, main, req.Main); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	closing := s.closing
	if !closing {
		s.taken[sb.ID()] = t
	}
	s.mu.Unlock()
	if closing {
		s.end(t, "pool removed")
		return nil, fmt.Errorf("pool %s is being removed", s.name)
	}
	// It may also stop by itself (its lifetime, a crash) or through its
	// control socket (kill, rm -f).
	s.wg.Go(func() {
		<-sb.Done()
		sup.EndFor(sb.Err(), "closed")
		s.mu.Lock()
		delete(s.taken, sb.ID())
		s.mu.Unlock()
	})
	s.log.Info("sandbox taken", "sandbox", sb.ID(), "detached", req.Detach)
	return t, nil
}

// startMain starts the main command of a detached sandbox taken from the
// pool, as the supervisor of run -d does, and ends the sandbox when the
// command ends.
func (s *poolServer) startMain(sb *airlock.Sandbox, sup *lifecycle.Supervision, main *lifecycle.MainCommand, c *poolCommand) error {
	fail := func(err error, code int) error {
		main.Failed(err)
		sup.End("failed to start", &code)
		_ = sb.Close()
		return err
	}
	if err := main.SetLog(s.store.LogPath(sb.ID())); err != nil {
		return fail(err, 125)
	}
	p, err := sb.Start(context.WithoutCancel(s.ctx), airlock.Command{
		Argv: c.Argv, Env: c.Env, Dir: c.Dir, User: c.User, TTY: c.TTY, Rows: 24, Cols: 80,
		OpenStdin: true, Stdout: main.Stdout(), Stderr: main.Stderr(), Timeout: c.Timeout,
	})
	if err != nil {
		code := 125
		if se, ok := errors.AsType[*airlock.StartError](err); ok {
			code = se.ExitCode()
		}
		return fail(err, code)
	}
	main.Started(p)
	s.wg.Go(func() {
		select {
		case <-main.Done():
		case <-sb.Done():
			return
		}
		res, err := main.Wait()
		reason, code := "", (*int)(nil)
		switch {
		case err != nil:
			reason = "main command failed: " + err.Error()
		case res.KilledBy == airlock.KilledByTimeout:
			reason, code = "timeout", &res.ExitCode
		default:
			reason, code = "exited", &res.ExitCode
		}
		if sb.Err() != nil {
			sup.EndFor(sb.Err(), reason)
			return
		}
		sup.End(reason, code)
		_ = sb.Close()
	})
	return nil
}

// end records why a taken sandbox stops, stops serving it and closes it.
func (s *poolServer) end(t *takenSandbox, reason string) {
	t.sup.End(reason, nil)
	if err := t.sb.Close(); err != nil && !errors.Is(err, airlock.ErrClosed) {
		s.log.Warn("close a sandbox taken from the pool", "sandbox", t.sb.ID(), "err", err)
	}
}

// shutdown closes the pool, with the sandboxes waiting in it and those
// it handed out that still run, and waits for the connections to end.
func (s *poolServer) shutdown() {
	s.mu.Lock()
	s.closing = true
	var detached []*takenSandbox
	for _, t := range s.taken {
		if t.detached {
			detached = append(detached, t)
		}
	}
	s.mu.Unlock()
	// The connections of run --pool end their own sandboxes.
	s.cancel()
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := s.pool.Close(); err != nil {
			s.log.Warn("close the pool", "err", err)
		}
	})
	for _, t := range detached {
		wg.Go(func() { s.end(t, "pool removed") })
	}
	wg.Wait()
	s.wg.Wait()
}

// dialPool connects to the control socket of pool name.
func (a *app) dialPool(ctx context.Context, name string) (net.Conn, error) {
	root, err := poolsRoot()
	if err != nil {
		return nil, err
	}
	rec, err := readPool(root, name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("no pool named %q: `%s pool ls` lists the pools, `%s pool create --name %s --size N` makes one", name, a.name, a.name, name)
	}
	if err != nil {
		return nil, err
	}
	if !rec.Supervisor.Alive() {
		return nil, fmt.Errorf("pool %s is gone: its supervisor (pid %d) died; `%s pool rm %s` removes what it left", name, rec.Supervisor.PID, a.name, name)
	}
	addr, release, err := unixsock.Addr(filepath.Join(root, name, poolSocket))
	if err != nil {
		return nil, fmt.Errorf("reach pool %s: %w", name, err)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", addr)
	release()
	if err != nil {
		return nil, fmt.Errorf("reach pool %s (is it starting or being removed? see `%s pool ls`): %w", name, a.name, err)
	}
	return conn, nil
}

// poolCall sends req on conn and reads one reply.
func poolCall(ctx context.Context, conn net.Conn, br *bufio.Reader, req poolRequest) (poolReply, error) {
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()
	var rep poolReply
	if err := json.NewEncoder(conn).Encode(req); err != nil {
		return rep, err
	}
	line, err := br.ReadBytes('\n')
	if err != nil {
		if ctx.Err() != nil {
			return rep, context.Cause(ctx)
		}
		return rep, fmt.Errorf("the pool supervisor closed the connection: %w", err)
	}
	if err := json.Unmarshal(line, &rep); err != nil {
		return rep, fmt.Errorf("the pool supervisor's answer: %w", err)
	}
	if rep.Error != "" {
		return rep, errors.New(rep.Error)
	}
	return rep, nil
}

// runFromPool is run --pool: it takes a sandbox from the pool and runs
// the command in it as run does, or with --detach leaves it running.
func (a *app) runFromPool(ctx context.Context, cmd *cobra.Command, f *runFlags, args []string) error {
	// The flags of run that go with --pool: the others configure a new
	// sandbox.
	withPool := []string{"pool", "detach", "rm", "name", "workdir", "user", "timeout", "interactive", "tty", "json", "quiet", "env", "env-file"}
	var bad []string
	cmd.Flags().Visit(func(fl *pflag.Flag) {
		if !slices.Contains(withPool, fl.Name) {
			bad = append(bad, "--"+fl.Name)
		}
	})
	if len(bad) > 0 {
		return fmt.Errorf("%s configures a new sandbox, and a sandbox taken from pool %s has the pool's configuration: drop it, or give it to `%s pool create`", strings.Join(bad, ", "), f.pool, a.name)
	}
	if err := checkTTY(f.tty, f.interactive); err != nil {
		return err
	}
	if f.detach && f.rm {
		return fmt.Errorf("--rm with --detach --pool: a sandbox taken from a pool keeps its record until it is removed (`%s rm ID` once it stops); drop --rm", a.name)
	}
	if f.detach {
		return a.takeDetached(ctx, f, args, cmd.Flags().Changed("timeout"))
	}
	if f.name != "" {
		return errors.New("--name needs --detach: a sandbox run in the foreground leaves no record to name")
	}
	if len(args) == 0 {
		return fmt.Errorf("give the command to run after --, or --detach for a sandbox that waits for %s exec", a.name)
	}
	if f.tty && f.asJSON {
		return errors.New("--tty and --json cannot be combined: a terminal session has no single result")
	}
	fromFiles, err := readEnvFiles(f.envFiles)
	if err != nil {
		return err
	}
	conn, err := a.dialPool(ctx, f.pool)
	if err != nil {
		return err
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	rep, err := poolCall(ctx, conn, br, poolRequest{Op: "take"})
	if err != nil {
		return err
	}
	id := rep.SandboxID
	args = imageCommand(airlock.ImageInfo{Entrypoint: rep.Entrypoint}, nil, args)
	runErr := a.runInTaken(ctx, f, id, append(fromFiles, f.env...), args)
	// The command has ended: the supervisor removes the sandbox once
	// this side of the connection is closed, and says so.
	if uc, ok := conn.(*net.UnixConn); ok {
		_ = uc.CloseWrite()
	}
	_ = conn.SetReadDeadline(time.Now().Add(poolEndWait))
	if line, err := br.ReadBytes('\n'); err != nil || !strings.Contains(string(line), `"removed":true`) {
		a.warnf("warning: sandbox %s may not be removed yet: its pool's supervisor did not confirm it", id)
	}
	return runErr
}

// runInTaken runs the command of run --pool in sandbox id through its
// control socket, as exec does.
func (a *app) runInTaken(ctx context.Context, f *runFlags, id string, env, args []string) error {
	sbStore, err := openStore()
	if err != nil {
		return err
	}
	c, err := dialSandbox(ctx, sbStore, id)
	if err != nil {
		return err
	}
	defer c.Close()
	ef := execFlags{interactive: f.interactive, tty: f.tty, asJSON: f.asJSON, env: env, workdir: f.workdir, user: f.user, timeout: f.timeout}
	return a.execIn(ctx, c.Sandbox(id), &ef, args)
}

// takeDetached is run -d --pool: it takes a sandbox that runs on, with
// the main command given if any, prints its id and returns.
func (a *app) takeDetached(ctx context.Context, f *runFlags, args []string, timeoutGiven bool) error {
	if f.interactive {
		return errors.New("--detach and --interactive cannot be combined: use airlock attach to reach a detached command's input")
	}
	var main *poolCommand
	if len(args) > 0 {
		fromFiles, err := readEnvFiles(f.envFiles)
		if err != nil {
			return err
		}
		main = &poolCommand{Argv: args, Env: envFlags(append(fromFiles, f.env...)), Dir: f.workdir, User: f.user, TTY: f.tty, Timeout: f.timeout}
	} else {
		for _, only := range []struct {
			set  bool
			flag string
		}{{f.tty, "--tty"}, {f.workdir != "", "--workdir"}, {f.user != "", "--user"}, {len(f.env)+len(f.envFiles) > 0, "--env"}, {timeoutGiven, "--timeout"}} {
			if only.set {
				return fmt.Errorf("%s applies to a command, and none was given after --: give it to %s exec", only.flag, a.name)
			}
		}
	}
	if f.name != "" {
		if err := state.ValidateName(f.name); err != nil {
			return fmt.Errorf("--name: %w", err)
		}
		if sbStore, id, err := resolveSandbox(f.name); err == nil {
			if rec, err := sbStore.Get(id); err == nil && rec.Name == f.name {
				return fmt.Errorf("the name %q is taken by sandbox %s: remove it (`%s rm %s`) or choose another name", f.name, id, a.name, f.name)
			}
		}
	}
	conn, err := a.dialPool(ctx, f.pool)
	if err != nil {
		return err
	}
	defer conn.Close()
	rep, err := poolCall(ctx, conn, bufio.NewReader(conn), poolRequest{Op: "take", Detach: true, Name: f.name, Main: main})
	if err != nil {
		code := 125
		if rep.ExitCode != 0 {
			code = rep.ExitCode
		}
		if f.asJSON {
			_ = writeJSON(map[string]string{"error": err.Error()})
		} else {
			a.warnf("%s", termText(err.Error()))
		}
		return exitError{code}
	}
	if f.asJSON {
		return writeJSON(map[string]any{"sandbox_id": rep.SandboxID, "pool": f.pool})
	}
	_, err = fmt.Println(rep.SandboxID)
	return err
}

// poolListed is a pool as pool ls shows it.
type poolListed struct {
	Name      string    `json:"name"`
	Status    string    `json:"status"`
	Isolation string    `json:"isolation,omitempty"`
	Image     string    `json:"image,omitempty"`
	Size      int       `json:"size"`
	Ready     int       `json:"ready"`
	Starting  int       `json:"starting"`
	Started   int       `json:"started"`
	Failed    int       `json:"failed"`
	Discarded int       `json:"discarded"`
	CreatedAt time.Time `json:"created_at"`
	PID       int       `json:"pid"`
}

// listPools reads every pool and asks the live ones for their counts.
func (a *app) listPools(ctx context.Context) ([]poolListed, error) {
	root, err := poolsRoot()
	if err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("list pools: %w", err)
	}
	out := []poolListed{}
	for _, e := range ents {
		if !e.IsDir() || validatePoolName(e.Name()) != nil {
			continue
		}
		rec, err := readPool(root, e.Name())
		if errors.Is(err, fs.ErrNotExist) {
			continue // being created
		}
		l := poolListed{Name: e.Name(), Status: "running"}
		if err != nil {
			l.Status = "damaged: " + err.Error()
			out = append(out, l)
			continue
		}
		l.Isolation, l.Image, l.Size, l.CreatedAt, l.PID = rec.Isolation, rec.Image, rec.Size, rec.CreatedAt, rec.Supervisor.PID
		if !rec.Supervisor.Alive() {
			l.Status = "dead: " + state.ReasonSupervisorDied
			out = append(out, l)
			continue
		}
		if st, err := a.poolStats(ctx, rec.Name); err != nil {
			l.Status = "unreachable: " + err.Error()
		} else {
			l.Ready, l.Starting, l.Started, l.Failed, l.Discarded = st.Ready, st.Starting, st.Started, st.Failed, st.Discarded
		}
		out = append(out, l)
	}
	slices.SortFunc(out, func(x, y poolListed) int { return x.CreatedAt.Compare(y.CreatedAt) })
	return out, nil
}

func (a *app) poolStats(ctx context.Context, name string) (airlock.PoolStats, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := a.dialPool(ctx, name)
	if err != nil {
		return airlock.PoolStats{}, err
	}
	defer conn.Close()
	rep, err := poolCall(ctx, conn, bufio.NewReader(conn), poolRequest{Op: "stats"})
	if err != nil {
		return airlock.PoolStats{}, err
	}
	if rep.Stats == nil {
		return airlock.PoolStats{}, errors.New("the pool supervisor sent no counts")
	}
	return *rep.Stats, nil
}

func (a *app) newPoolListCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List pools, with their size and the sandboxes ready in them",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			pools, err := a.listPools(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(map[string]any{"pools": pools})
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 3, ' ', 0)
			fmt.Fprintln(tw, "NAME\tISOLATION\tIMAGE\tSIZE\tREADY\tSTARTING\tFAILED\tCREATED\tSTATUS")
			now := time.Now()
			for _, p := range pools {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\n", termText(p.Name), p.Isolation, termText(p.Image),
					p.Size, p.Ready, p.Starting, p.Failed, state.HumanAge(now.Sub(p.CreatedAt)), termText(p.Status))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func (a *app) newPoolRmCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "rm NAME...",
		Short: "Stop pools: the sandboxes waiting in them, and those taken that still run, are closed",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			root, err := poolsRoot()
			if err != nil {
				return err
			}
			return a.forEach(args, nil, asJSON, "removed", func(name string) error {
				return a.removePool(root, name)
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// removePool stops pool name's supervisor and removes its folder.
func (a *app) removePool(root, name string) error {
	if err := validatePoolName(name); err != nil {
		return err
	}
	rec, err := readPool(root, name)
	if errors.Is(err, fs.ErrNotExist) {
		if _, serr := os.Lstat(filepath.Join(root, name)); serr != nil {
			return fmt.Errorf("no pool named %q: `%s pool ls` lists the pools", name, a.name)
		}
		// A folder without a record: a supervisor that died starting.
	} else if err == nil && rec.Supervisor.Alive() {
		sup := rec.Supervisor
		if err := syscall.Kill(sup.PID, syscall.SIGTERM); err != nil {
			return fmt.Errorf("signal the pool's supervisor (pid %d): %w", sup.PID, err)
		}
		if !waitGone(sup.PID, sup.StartTime, poolStopWait) {
			// It did not stop: kill it, which takes its sandboxes with
			// it, and clean up after it.
			_ = syscall.Kill(sup.PID, syscall.SIGKILL)
			waitGone(sup.PID, sup.StartTime, 2*time.Second)
			airlock.Sweep()
		}
	}
	if err := os.RemoveAll(filepath.Join(root, name)); err != nil {
		return fmt.Errorf("remove the folder of pool %s: %w", name, err)
	}
	return nil
}
