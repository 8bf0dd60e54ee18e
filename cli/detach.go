package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/lifecycle"
	"github.com/airlock-sandbox/airlock/internal/rpc"
	"github.com/airlock-sandbox/airlock/internal/state"
)

// supervisorSpec is what `airlock run --detach` hands the supervisor
// process it starts, on descriptor 3.
type supervisorSpec struct {
	ID string `json:"id"`
	// Name is --name: the supervisor's record claims it.
	Name string `json:"name,omitempty"`
	// Config is what was asked at run time, without the program's
	// built-in configuration, which the supervisor has as its own.
	Config  airlock.Config `json:"config"`
	Command []string       `json:"command,omitempty"`
	// Entrypoint is --entrypoint, nil when not given: the supervisor
	// puts the image's entrypoint, or this, before Command.
	Entrypoint *string       `json:"entrypoint,omitempty"`
	Dir        string        `json:"dir,omitempty"`
	User       string        `json:"user,omitempty"`
	TTY        bool          `json:"tty,omitempty"`
	Rows       uint16        `json:"rows,omitempty"`
	Cols       uint16        `json:"cols,omitempty"`
	Timeout    time.Duration `json:"timeout,omitempty"`
	// Remove is --rm: the record goes once the sandbox has stopped.
	Remove bool `json:"remove,omitempty"`
}

// supervisorReady is the supervisor's one-line report on descriptor 4.
type supervisorReady struct {
	ID    string   `json:"id,omitempty"`
	Notes []string `json:"notes,omitempty"`
	// Ports are the ports the sandbox publishes.
	Ports    []airlock.PublishedPort `json:"ports,omitempty"`
	Error    string                  `json:"error,omitempty"`
	ExitCode int                     `json:"exit_code,omitempty"`
}

// maxSpecBytes bounds the spec a supervisor reads.
const maxSpecBytes = 4 << 20

// runDetached starts a supervisor process for a new sandbox, waits until
// the sandbox runs, prints its id and returns. The supervisor keeps the
// sandbox until its main command ends, it is killed, or its timeout.
func (a *app) runDetached(ctx context.Context, f *runFlags, asked airlock.Config, args []string) error {
	spec := supervisorSpec{ID: airlock.NewID(), Name: f.name, Config: asked, Command: args, Entrypoint: f.entrypoint, Dir: f.workdir, User: f.user, TTY: f.tty, Timeout: f.timeout, Rows: 24, Cols: 80, Remove: f.rm}
	specR, specW, err := os.Pipe()
	if err != nil {
		return err
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the airlock executable to start the supervisor: %w", err)
	}
	cmd := exec.Command(exe, superviseCmdName)
	cmd.ExtraFiles = []*os.File{specR, readyW}
	// Its own session: the supervisor outlives this command and is not
	// reached by signals sent to this terminal's process group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	specR.Close()
	readyW.Close()
	if err != nil {
		return fmt.Errorf("start the sandbox supervisor: %w", err)
	}
	go func() {
		_ = json.NewEncoder(specW).Encode(spec)
		specW.Close()
	}()
	type result struct {
		r   supervisorReady
		err error
	}
	got := make(chan result, 1)
	go func() {
		line, err := bufio.NewReader(io.LimitReader(readyR, 1<<20)).ReadBytes('\n')
		var r supervisorReady
		if err == nil {
			err = json.Unmarshal(line, &r)
		}
		got <- result{r, err}
	}()
	var res result
	select {
	case res = <-got:
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		return ctx.Err()
	}
	readyR.Close()
	if res.err != nil {
		// It died before reporting; reap it so that it leaves no zombie.
		werr := cmd.Wait()
		return fmt.Errorf("the sandbox supervisor exited during start (%v): run `airlock doctor`, or run the command without --detach to see the error", werr)
	}
	_ = cmd.Process.Release()
	if res.r.Error != "" {
		if f.asJSON {
			_ = writeJSON(map[string]any{"error": res.r.Error, "sandbox_id": res.r.ID})
		} else {
			a.warnf("%s", termText(res.r.Error))
		}
		code := res.r.ExitCode
		if code == 0 {
			code = 125
		}
		return exitError{code}
	}
	if f.asJSON {
		out := map[string]any{"sandbox_id": res.r.ID, "notes": res.r.Notes}
		if len(res.r.Ports) > 0 {
			out["ports"] = res.r.Ports
		}
		return writeJSON(out)
	}
	if !f.quiet {
		for _, n := range res.r.Notes {
			a.warnf("warning: %s", termText(n))
		}
	}
	if _, err := fmt.Println(res.r.ID); err != nil {
		// The sandbox runs on, as asked; airlock list shows it.
		return fmt.Errorf("print the id of sandbox %s: %w", res.r.ID, err)
	}
	return nil
}

const superviseCmdName = "__supervise"

// rmGrace is how long a record of a sandbox run with --rm outlives its
// end.
const rmGrace = 20 * waitPoll

func (a *app) newSuperviseCmd() *cobra.Command {
	return &cobra.Command{
		Use:    superviseCmdName,
		Short:  "Supervise a detached sandbox (started by airlock run --detach)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE:   func(cmd *cobra.Command, _ []string) error { return a.supervise(cmd.Context()) },
	}
}

// supervise is the supervisor of one detached sandbox: it creates it,
// records it, serves its control socket, runs its main command and, when
// that ends or the supervisor is told to stop, tears the sandbox down.
func (a *app) supervise(ctx context.Context) error {
	ready := os.NewFile(4, "ready")
	reported := false
	report := func(r supervisorReady) {
		if reported {
			return
		}
		reported = true
		_ = json.NewEncoder(ready).Encode(r)
		ready.Close()
	}
	fail := func(id string, code int, err error) error {
		report(supervisorReady{ID: id, Error: err.Error(), ExitCode: code})
		return exitError{code}
	}
	var spec supervisorSpec
	if err := json.NewDecoder(io.LimitReader(os.NewFile(3, "spec"), maxSpecBytes)).Decode(&spec); err != nil {
		return fail("", 125, fmt.Errorf("read the supervisor's instructions: %w", err))
	}
	// Stop on kill, interrupt or hang-up; the sandbox is torn down first.
	stopped, stop := signal.NotifyContext(context.WithoutCancel(ctx), syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer stop()
	work := context.WithoutCancel(ctx)

	home, err := airlock.Home()
	if err != nil {
		return fail(spec.ID, 125, err)
	}
	store, err := state.Open(home)
	if err != nil {
		return fail(spec.ID, 125, err)
	}
	// Events reach the sessions on the control socket through a hub. The
	// configuration recorded is the one asked for, over the program's
	// built-in one; the sandbox is made to outlive its main command's
	// timeout.
	hub := &rpc.Hub{}
	asked, err := a.withBase(spec.Config)
	if err != nil {
		return fail(spec.ID, 125, err)
	}
	cfg := asked
	// Without a command the sandbox waits for exec.
	hasMain := len(spec.Command) > 0 || spec.Entrypoint != nil
	if hasMain {
		cfg = withCommandMargin(cfg, spec.Timeout)
	}
	cfg.OnEvent = both(cfg.OnEvent, hub.Publish)
	sb, err := airlock.CreateWithID(work, spec.ID, cfg)
	if err != nil {
		return fail(spec.ID, 125, err)
	}
	defer sb.Close()
	if hasMain {
		// Never empty: run refuses --entrypoint "" without a command.
		spec.Command = imageCommand(sb.Image(), spec.Entrypoint, spec.Command)
	}

	lw := &lateWriter{}
	log := slog.New(slog.NewTextHandler(lw, nil))
	var main *lifecycle.MainCommand
	opts := lifecycle.Options{
		Store:   store,
		Name:    spec.Name,
		Kind:    state.KindDetached,
		Command: spec.Command,
		TTY:     spec.TTY && len(spec.Command) > 0,
		Server:  rpc.NewServer(rpc.Options{Version: a.version, Logger: log}),
		Events:  hub,
		Logger:  log,
	}
	opts.Config, _ = json.Marshal(asked)
	if len(spec.Command) > 0 {
		main = lifecycle.NewMainCommand()
		opts.Main = main
	}
	sup, err := lifecycle.Begin(work, sb, opts)
	if err != nil {
		return fail(spec.ID, 125, err)
	}
	logToFile(lw, store.Dir(spec.ID))
	if main != nil {
		if err := main.SetLog(store.LogPath(spec.ID)); err != nil {
			sup.End("failed", nil)
			return fail(spec.ID, 125, err)
		}
		p, err := sb.Start(work, airlock.Command{
			Argv: spec.Command, Dir: spec.Dir, User: spec.User, TTY: spec.TTY, Rows: spec.Rows, Cols: spec.Cols,
			OpenStdin: true, Stdout: main.Stdout(), Stderr: main.Stderr(), Timeout: spec.Timeout,
		})
		if err != nil {
			main.Failed(err)
			code := 125
			var se *airlock.StartError
			if errors.As(err, &se) {
				code = se.ExitCode()
				err = fmt.Errorf("start command: %s", withImageHint(se))
			}
			sup.End("failed to start", &code)
			return fail(spec.ID, code, err)
		}
		main.Started(p)
	}
	report(supervisorReady{ID: sb.ID(), Notes: sb.Notes(), Ports: sb.Ports()})

	var mainDone <-chan struct{}
	if main != nil {
		mainDone = main.Done()
	}
	reason, code := "", (*int)(nil)
	select {
	case <-mainDone:
		res, err := main.Wait()
		switch {
		case err != nil:
			reason = "main command failed: " + err.Error()
		case res.KilledBy == airlock.KilledByTimeout:
			reason, code = "timeout", &res.ExitCode
		default:
			reason, code = "exited", &res.ExitCode
		}
	case <-stopped.Done():
		reason = "killed"
		if main != nil {
			// Its main command dies with the sandbox, by SIGKILL: the
			// code docker reports for a container it killed.
			killed := 128 + int(syscall.SIGKILL)
			code = &killed
		}
	case <-sb.Done():
		reason = "stopped"
	}
	// With --rm the record goes once the end is recorded, as docker
	// removes a container run with it: a moment later, so that a wait
	// polling the record (every waitPoll) sees the exit code first.
	removeRecord := func() {
		if spec.Remove {
			time.Sleep(rmGrace)
			if err := store.Remove(spec.ID); err != nil {
				slog.Warn("remove the record of a sandbox run with --rm", "sandbox", spec.ID, "err", err)
			}
		}
	}
	if err := sb.Err(); err != nil {
		// It stopped by itself: it crashed (a main command that failed
		// for that ends after the sandbox has stopped, so this says so),
		// or reached its lifetime.
		sup.EndFor(err, reason)
		removeRecord()
		return nil
	}
	// The control socket goes first: requests under way (a stdin write
	// the main command has just consumed, an attach collecting its
	// result) are answered while the sandbox still runs; then it is
	// torn down.
	sup.End(reason, code)
	sb.Close()
	removeRecord()
	return nil
}

// lateWriter discards until it is pointed at a file: the supervisor's log
// lives in the sandbox's state folder, which exists only once the sandbox
// is recorded.
type lateWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lateWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.w == nil {
		return len(b), nil
	}
	return l.w.Write(b)
}

// logToFile sends the supervisor's diagnostics, and any crash report on
// standard error, to logs/supervisor.log in the sandbox's state folder: the
// supervisor has no terminal.
func logToFile(lw *lateWriter, dir string) {
	f, err := os.OpenFile(filepath.Join(dir, "logs", "supervisor.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return
	}
	_ = unix.Dup2(int(f.Fd()), 2)
	lw.mu.Lock()
	lw.w = f
	lw.mu.Unlock()
}
