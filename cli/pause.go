package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/state"
)

func (a *app) newPauseCmd() *cobra.Command {
	return a.pauseCmd(true)
}

func (a *app) newUnpauseCmd() *cobra.Command {
	return a.pauseCmd(false)
}

// pauseCmd is pause, or unpause (resume), as docker's.
func (a *app) pauseCmd(pause bool) *cobra.Command {
	var all, asJSON bool
	verb, use, short, long, done := "pause", "pause ID... | --all",
		"Stop every process of running sandboxes where it is, until unpause",
		`Stop every process of running sandboxes where it is, until unpause, as
docker pause does: they get no CPU and do not run; unpause lets them go
on from where they were. The sandbox's network stays (connections are
kept, what arrives waits), and so do its limits and timeout, which go on
counting. Meanwhile exec and cp fail, saying the sandbox is paused, and
what is typed into attach waits; port, policy, stop and kill work as on a
running sandbox (stop resumes it first, so that its main command gets
SIGTERM), and so does stats at the process level (at gvisor and vm the
sandbox's agent measures it, and stats says it is paused).

At the process level the sandbox's cgroup is frozen (this needs its
cgroup, and on cgroup v1 the freezer hierarchy), at gvisor the Sentry
stops its tasks, and a micro-VM's CPUs are stopped.`, "paused"
	sel := func(r state.Record) bool { return r.Status == state.StatusRunning && !r.Paused }
	if !pause {
		verb, use, short, long, done = "unpause", "unpause ID... | --all",
			"Let the processes of paused sandboxes run on",
			`Let the processes of paused sandboxes run on from where they were, as
docker unpause does.`, "unpaused"
		sel = func(r state.Record) bool { return r.Status == state.StatusRunning && r.Paused }
	}
	cmd := &cobra.Command{
		Use:     use,
		Short:   short,
		Long:    long,
		Example: "  " + a.name + " " + verb + " web",
		RunE: func(cmd *cobra.Command, args []string) error {
			if all == (len(args) > 0) {
				return errors.New("give sandbox ids or --all")
			}
			store, err := openStore()
			if err != nil {
				return err
			}
			ids, failed, err := pickIDs(store, args, all, sel)
			if err != nil {
				return err
			}
			return a.forEach(ids, failed, asJSON, done, func(id string) error {
				return pauseSandbox(cmd.Context(), store, id, pause)
			})
		},
	}
	what := "pause every running sandbox"
	if !pause {
		what = "unpause every paused sandbox"
	}
	cmd.Flags().BoolVarP(&all, "all", "a", false, what)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// pauseSandbox pauses (or resumes) running sandbox id through its
// control socket.
func pauseSandbox(ctx context.Context, store *state.Store, id string, pause bool) error {
	r, err := store.Get(id)
	if err != nil {
		return err
	}
	if r.Status != state.StatusRunning {
		return fmt.Errorf("not running (%s)", r.Status)
	}
	c, err := dialSandbox(ctx, store, id)
	if err != nil {
		return err
	}
	defer c.Close()
	sb := c.Sandbox(id)
	if pause {
		err = sb.Pause(ctx)
	} else {
		err = sb.Resume(ctx)
	}
	var ce *client.Error
	if errors.As(err, &ce) {
		// The server's message names the sandbox already.
		return errors.New(ce.Message)
	}
	return err
}
