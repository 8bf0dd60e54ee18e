package cli

import (
	"fmt"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/state"
)

func (a *app) newTopCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "top ID",
		Short: "List the processes running in a sandbox",
		Long: `List the processes of a running sandbox's commands, as docker top does,
by pid as ps inside the sandbox would show them: parent, uid, state (R
running, S sleeping, D waiting on a device, Z zombie, T stopped), CPU time,
resident memory, time since it started and command line. airlock's own
process in the sandbox is left out. It works whatever the image holds (no
ps needed), at every isolation level; not while the sandbox is paused.

A sandbox with more than 512 processes (or whose command lines take more
than 48 KiB) lists the first, and says how many more there are.`,
		Example: "  " + a.name + " top web\n  " + a.name + " top --json web",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			store, err := openStore()
			if err != nil {
				return err
			}
			id, err := store.Resolve(args[0])
			if err != nil {
				return err
			}
			r, err := store.Get(id)
			if err != nil {
				return err
			}
			if r.Status != state.StatusRunning {
				return fmt.Errorf("sandbox %s is not running (%s)", id, r.Status)
			}
			c, err := dialSandbox(cmd.Context(), store, id)
			if err != nil {
				return err
			}
			defer c.Close()
			procs, more, err := c.Sandbox(id).Processes(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(api.ProcessesResult{Processes: procs, More: more})
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "PID\tPPID\tUID\tSTATE\tTIME\tRSS\tELAPSED\tCOMMAND")
			for _, p := range procs {
				fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n", p.PID, p.PPID, p.UID, termText(p.State),
					shortDuration(time.Duration(p.CPUNanos)), sizeText(uint64(p.RSSBytes)),
					shortDuration(time.Duration(p.ElapsedMs)*time.Millisecond), termText(argsText(p.Command)))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if more > 0 {
				a.warnf("%s more processes are not listed", strconv.Itoa(more))
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON: {processes: [{pid, ppid, uid, state, cpu_nanos, rss_bytes, elapsed_ms, command}], more}")
	return cmd
}

// shortDuration is d rounded for a column: 0s, 240ms, 1.5s, 2m3s, 4h5m.
func shortDuration(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	}
	return d.Round(time.Minute).String()
}
