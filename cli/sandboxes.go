package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"text/template"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/state"
)

func openStore() (*state.Store, error) {
	home, err := airlock.Home()
	if err != nil {
		return nil, err
	}
	return state.Open(home)
}

// resolveSandbox finds the sandbox an id or unique id prefix names.
func resolveSandbox(prefix string) (*state.Store, string, error) {
	store, err := openStore()
	if err != nil {
		return nil, "", err
	}
	id, err := store.Resolve(prefix)
	if err != nil {
		return nil, "", err
	}
	return store, id, nil
}

func statusText(r state.Record) string {
	switch {
	case r.Damaged != "":
		return r.Status + " (damaged record)"
	case r.Status == state.StatusStopped && r.ExitCode != nil:
		return fmt.Sprintf("stopped (%d)", *r.ExitCode)
	case r.Status == state.StatusCrashed && r.Reason != "":
		return "crashed: " + r.Reason
	case r.Status == state.StatusRunning && r.Paused:
		return "running (paused)"
	}
	return r.Status
}

// warnDamaged says, on standard error, which records could not be read
// and what to do about them.
func (a *app) warnDamaged(recs ...state.Record) {
	for _, r := range recs {
		if r.Damaged != "" {
			a.warnf("warning: sandbox %s: %s", termText(r.ID), termText(r.Damaged))
		}
	}
}

func commandText(r state.Record, whole bool) string {
	c := termText(strings.Join(r.Command, " "))
	switch {
	case c == "" && r.Kind == state.KindRPC:
		c = "(airlock rpc)"
	case c == "" && r.Kind == state.KindPool:
		c = "(from a pool)"
	case c == "":
		c = "-"
	}
	if r := []rune(c); len(r) > 40 && !whole {
		c = string(r[:39]) + "…"
	}
	return c
}

func (a *app) newGetCmd() *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:     "get ID",
		Aliases: []string{"inspect"},
		Short:   "Print everything recorded about a sandbox, as JSON (alias: inspect)",
		Long: `Print everything recorded about a sandbox, as JSON. The sandbox is named
by its id, any unique prefix of it, with or without its "sb-".

--format prints a Go template of the record instead, as docker inspect
does; its fields are the JSON's keys: {{.status}}, {{.supervisor.pid}},
{{json .config}}.`,
		Example: `  ` + a.name + ` get 4a1f
  ` + a.name + ` inspect --format '{{.status}} {{.exit_code}}' 4a1f`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var tmpl *template.Template
			if format != "" {
				t, err := parseRecordTemplate(format)
				if err != nil {
					return err
				}
				tmpl = t
			}
			store, id, err := resolveSandbox(args[0])
			if err != nil {
				return err
			}
			r, err := store.Get(id)
			if err != nil {
				return err
			}
			a.warnDamaged(r)
			if tmpl == nil {
				return writeJSON(r)
			}
			fields, err := recordFields(r)
			if err != nil {
				return err
			}
			var out bytes.Buffer
			if err := tmpl.Execute(&out, fields); err != nil {
				return fmt.Errorf("--format: %w", err)
			}
			_, err = fmt.Println(termText(out.String()))
			return err
		},
	}
	cmd.Flags().StringVarP(&format, "format", "f", "", "print this Go template of the record instead of JSON (fields are the JSON's keys: {{.status}})")
	return cmd
}

// templateJSON is --format's json function: its argument as JSON.
func templateJSON(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}

// killWait is how long kill waits for a supervisor to stop its sandbox
// before it forces it.
const killWait = 10 * time.Second

func (a *app) newKillCmd() *cobra.Command {
	var all, asJSON bool
	var signal string
	cmd := &cobra.Command{
		Use:   "kill ID... | --all",
		Short: "Stop running sandboxes, or send a signal to their main commands (-s)",
		Long: `Stop running sandboxes: every process in them is killed and they are
torn down. A detached sandbox's supervisor is asked to stop; if it does
not within 10 seconds it is killed and what it left is removed. A sandbox
of an "airlock rpc" session is closed through its control socket.

With -s SIGNAL, as docker kill -s, the main command of each detached
sandbox gets that signal (HUP, USR1, TERM, 15, ...) and the sandbox is
left as the command's handling of it leaves it.`,
		Example: `  ` + a.name + ` kill web
  ` + a.name + ` kill -s HUP web`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if all == (len(args) > 0) {
				return errors.New("give sandbox ids or --all")
			}
			store, err := openStore()
			if err != nil {
				return err
			}
			ids, failed, err := pickIDs(store, args, all, func(r state.Record) bool { return r.Status == state.StatusRunning })
			if err != nil {
				return err
			}
			if signal != "" {
				return a.forEach(ids, failed, asJSON, "signalled", func(id string) error {
					r, err := store.Get(id)
					if err != nil {
						return err
					}
					if len(r.Command) == 0 {
						return fmt.Errorf("it has no main command to signal (only sandboxes started with a command by %s run -d have one)", a.name)
					}
					return a.signalMain(cmd.Context(), store, id, signal)
				})
			}
			return a.forEach(ids, failed, asJSON, "killed", func(id string) error {
				if r, err := store.Get(id); err == nil && !asJSON {
					a.warnDamaged(r)
				}
				return a.killSandbox(cmd.Context(), store, id)
			})
		},
	}
	cmd.Flags().BoolVarP(&all, "all", "a", false, "kill every running sandbox")
	cmd.Flags().StringVarP(&signal, "signal", "s", "", "send this signal to the main command instead of stopping the sandbox (HUP, USR1, TERM, 15, ...)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// pickIDs resolves the ids given, or selects every record matching sel.
// As docker does, a reference that names no sandbox fails alone: it is
// among the ids returned, with why in failed, and forEach reports it
// and goes on with the others.
func pickIDs(store *state.Store, args []string, all bool, sel func(state.Record) bool) (ids []string, failed map[string]error, err error) {
	if !all {
		for _, a := range args {
			id, err := store.Resolve(a)
			switch {
			case errors.Is(err, state.ErrNotFound), errors.Is(err, state.ErrAmbiguous):
				if failed == nil {
					failed = map[string]error{}
				}
				failed[a] = err
				id = a
			case err != nil:
				return nil, nil, err
			}
			ids = append(ids, id)
		}
		return ids, failed, nil
	}
	recs, err := store.List()
	if err != nil {
		return nil, nil, err
	}
	for _, r := range recs {
		if sel(r) {
			ids = append(ids, r.ID)
		}
	}
	return ids, nil, nil
}

// forEach applies op to every id but those failed already (pickIDs),
// reports each outcome and fails if any failed.
func (a *app) forEach(ids []string, unresolved map[string]error, asJSON bool, done string, op func(id string) error) error {
	type outcome struct {
		ID    string `json:"id"`
		Error string `json:"error,omitempty"`
	}
	var out []outcome
	failed := 0
	for _, id := range ids {
		o := outcome{ID: id}
		err, ok := unresolved[id]
		if !ok {
			err = op(id)
		}
		if err != nil {
			o.Error = err.Error()
			failed++
			if !asJSON {
				a.warnf("%s: %s", id, termText(err.Error()))
			}
		} else if !asJSON {
			fmt.Println(id)
		}
		out = append(out, o)
	}
	if asJSON {
		if out == nil {
			out = []outcome{}
		}
		_ = writeJSON(map[string]any{done: out})
	}
	if failed > 0 {
		return exitError{1}
	}
	return nil
}

func (a *app) killSandbox(ctx context.Context, store *state.Store, id string) error {
	r, err := store.Get(id)
	if err != nil {
		return err
	}
	if r.Status != state.StatusRunning {
		return fmt.Errorf("not running (%s)", r.Status)
	}
	if r.Kind != state.KindDetached {
		// Its supervisor serves other sandboxes too (or, the record
		// being damaged, it may): close just this one.
		if err := closeThroughSocket(ctx, store, id); err != nil {
			return err
		}
		// The supervisor records the end once the sandbox has stopped,
		// just after answering: rm -f removes the record then.
		waitRecorded(store, id, killWait)
		return nil
	}
	if err := syscall.Kill(r.Supervisor.PID, syscall.SIGTERM); err != nil {
		return fmt.Errorf("signal its supervisor (pid %d): %w", r.Supervisor.PID, err)
	}
	if waitGone(r.Supervisor.PID, r.Supervisor.StartTime, killWait) {
		return nil
	}
	// The supervisor did not stop: kill it and clean up after it.
	_ = syscall.Kill(r.Supervisor.PID, syscall.SIGKILL)
	waitGone(r.Supervisor.PID, r.Supervisor.StartTime, 2*time.Second)
	if err := airlock.Reclaim(id); err != nil {
		return fmt.Errorf("clean up after its supervisor: %w", err)
	}
	// The sandbox is gone whether or not this is recorded (the disk may
	// be full, the record damaged): it then reads as crashed.
	if err := store.Update(id, func(rec *state.Record) {
		rec.Status, rec.StoppedAt, rec.Reason = state.StatusStopped, time.Now(), "killed (supervisor did not stop in time)"
	}); err != nil {
		a.warnf("warning: sandbox %s was killed, but this could not be recorded: %v", id, err)
	}
	return nil
}

// waitRecorded waits until the record of sandbox id no longer says
// running, for at most d.
func waitRecorded(store *state.Store, id string, d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if r, err := store.Get(id); err != nil || r.Status != state.StatusRunning {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitGone waits until the process is gone, for at most d.
func waitGone(pid int, start uint64, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for state.Alive(pid, start) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

func closeThroughSocket(ctx context.Context, store *state.Store, id string) error {
	c, err := dialSandbox(ctx, store, id)
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Sandbox(id).Close(ctx)
}

// dialSandbox connects to a running sandbox's control socket.
func dialSandbox(ctx context.Context, store *state.Store, id string) (*client.Client, error) {
	c, err := client.Dial(ctx, store.SocketPath(id), client.Options{})
	if err != nil {
		return nil, fmt.Errorf("reach sandbox %s: %w", id, err)
	}
	return c, nil
}

func (a *app) newRmCmd() *cobra.Command {
	var stopped, force, asJSON bool
	cmd := &cobra.Command{
		Use:   "rm ID... | --stopped",
		Short: "Remove the records of stopped or crashed sandboxes",
		RunE: func(cmd *cobra.Command, args []string) error {
			if stopped == (len(args) > 0) {
				return errors.New("give sandbox ids or --stopped")
			}
			store, err := openStore()
			if err != nil {
				return err
			}
			ids, failed, err := pickIDs(store, args, stopped, func(r state.Record) bool { return r.Status != state.StatusRunning })
			if err != nil {
				return err
			}
			return a.forEach(ids, failed, asJSON, "removed", func(id string) error {
				r, err := store.Get(id)
				if err != nil {
					return err
				}
				if !asJSON {
					a.warnDamaged(r)
				}
				if r.Status == state.StatusRunning {
					if !force {
						return errors.New("it is running: `airlock kill` it first, or use --force")
					}
					if err := a.killSandbox(cmd.Context(), store, id); err != nil {
						return err
					}
					// How it ended decides what is left to clean.
					if r, err = store.Get(id); err != nil {
						return err
					}
				}
				return removeSandbox(store, r)
			})
		},
	}
	cmd.Flags().BoolVar(&stopped, "stopped", false, "remove every stopped or crashed sandbox")
	cmd.Flags().BoolVarP(&force, "force", "f", false, "kill running sandboxes first")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// removeSandbox deletes a stopped sandbox's record, first cleaning up
// after a supervisor that died.
func removeSandbox(store *state.Store, r state.Record) error {
	if r.Status == state.StatusCrashed {
		if err := airlock.Reclaim(r.ID); err != nil {
			return fmt.Errorf("clean up after its supervisor: %w", err)
		}
	}
	return store.Remove(r.ID)
}

func (a *app) newPruneCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "prune",
		Short: "Remove stopped and crashed sandboxes and whatever crashed ones left behind",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			store, err := openStore()
			if err != nil {
				return err
			}
			recs, err := store.List()
			if err != nil {
				return err
			}
			var ids []string
			for _, r := range recs {
				switch {
				case r.Status != state.StatusRunning:
					ids = append(ids, r.ID)
				case r.Damaged != "" && !asJSON:
					// Running, so kept; but its record needs attention.
					a.warnDamaged(r)
				}
			}
			err = a.forEach(ids, nil, asJSON, "removed", func(id string) error {
				r, err := store.Get(id)
				if err != nil {
					return err
				}
				return removeSandbox(store, r)
			})
			// Cgroups of sandboxes whose record is gone too.
			airlock.Sweep()
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// waitPoll is how often wait looks at the records it waits for.
const waitPoll = 100 * time.Millisecond

func (a *app) newWaitCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "wait ID...",
		Short: "Wait until sandboxes stop, and print each one's exit code",
		Long: `Block until each sandbox named has stopped (its main command ended, it was
killed, it timed out, or its supervisor died), then print its main
command's exit code, one line per sandbox, as docker wait does: -1 when
there is none (no main command, or killed before it ended). Exits 0 once
all have stopped.`,
		Example: `  ` + a.name + ` run -d --name job -- make test && ` + a.name + ` wait job`,
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			store, err := openStore()
			if err != nil {
				return err
			}
			ids := make([]string, len(args))
			for i, ref := range args {
				if ids[i], err = store.Resolve(ref); err != nil {
					return err
				}
			}
			t := time.NewTicker(waitPoll)
			defer t.Stop()
			for _, id := range ids {
				for {
					r, err := store.Get(id)
					if err != nil {
						return err
					}
					if r.Status != state.StatusRunning {
						code := -1
						if r.ExitCode != nil {
							code = *r.ExitCode
						}
						fmt.Println(code)
						break
					}
					select {
					case <-ctx.Done():
						return ctx.Err()
					case <-t.C:
					}
				}
			}
			return nil
		},
	}
}

// stopGrace is how long stop waits, by default, for a main command to
// end after SIGTERM.
const stopGrace = 10 * time.Second

func (a *app) newStopCmd() *cobra.Command {
	var all, asJSON bool
	var grace int
	cmd := &cobra.Command{
		Use:   "stop ID... | --all",
		Short: "Stop running sandboxes: SIGTERM to the main command, then kill after a grace period",
		Long: `Stop running sandboxes as docker stop does: the main command of a detached
sandbox gets SIGTERM, and the sandbox is killed (as by kill) if it has
not stopped within --time seconds (default 10). A sandbox without a main
command, or of an "airlock rpc" session, is killed at once.`,
		Example: `  ` + a.name + ` stop web
  ` + a.name + ` stop -t 30 web`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if all == (len(args) > 0) {
				return errors.New("give sandbox ids or --all")
			}
			if grace < 0 {
				return errors.New("--time must not be negative")
			}
			store, err := openStore()
			if err != nil {
				return err
			}
			ids, failed, err := pickIDs(store, args, all, func(r state.Record) bool { return r.Status == state.StatusRunning })
			if err != nil {
				return err
			}
			return a.forEach(ids, failed, asJSON, "stopped", func(id string) error {
				return a.stopSandbox(cmd.Context(), store, id, time.Duration(grace)*time.Second)
			})
		},
	}
	cmd.Flags().BoolVarP(&all, "all", "a", false, "stop every running sandbox")
	cmd.Flags().IntVarP(&grace, "time", "t", int(stopGrace/time.Second), "seconds to wait after SIGTERM before killing")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// stopSandbox sends SIGTERM to the main command of sandbox id, waits up
// to grace for the sandbox to stop, then kills it.
func (a *app) stopSandbox(ctx context.Context, store *state.Store, id string, grace time.Duration) error {
	r, err := store.Get(id)
	if err != nil {
		return err
	}
	if r.Status != state.StatusRunning {
		return nil // stopped already: as docker, not an error
	}
	if r.Paused {
		// Paused, its main command would get SIGTERM only once the
		// grace is over: it is resumed first, as it would be to stop.
		if err := pauseSandbox(ctx, store, id, false); err != nil {
			return a.killSandbox(ctx, store, id)
		}
	}
	if len(r.Command) > 0 && grace > 0 && a.signalMain(ctx, store, id, "TERM") == nil {
		deadline := time.Now().Add(grace)
		for time.Now().Before(deadline) {
			if r, err := store.Get(id); err == nil && r.Status != state.StatusRunning {
				return nil
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(waitPoll):
			}
		}
	}
	return a.killSandbox(ctx, store, id)
}

// signalMain sends sig to the main command of detached sandbox id,
// through an attach on its control socket.
func (a *app) signalMain(ctx context.Context, store *state.Store, id, sig string) error {
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := client.Dial(actx, store.SocketPath(id), client.Options{})
	if err != nil {
		return err
	}
	defer c.Close()
	p, err := c.Sandbox(id).Attach(actx)
	if err != nil {
		return err
	}
	return p.Signal(actx, sig)
}
