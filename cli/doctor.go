package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/cgroup"
	"github.com/airlock-sandbox/airlock/internal/doctor"
)

func (a *app) newDoctorCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Report which isolation levels work on this machine, and how to fix the rest",
		Long: `Check this machine for every isolation level airlock offers. A level is
reported as working only after a real sandbox of that level started and ran
a command. For a level that does not work, the exact reason and fix are given.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			kernels, _ := kernelCacheDir("")
			rep := doctor.Run(cmd.Context(), doctor.Options{
				KernelCacheDir: kernels,
				Try: map[string]doctor.Tryer{
					doctor.LevelProcess: trySandbox,
					doctor.LevelGVisor:  trySandbox,
					doctor.LevelVM:      trySandbox,
				},
				CgroupInfo: func() (string, []string, bool, string) {
					info := cgroup.Detect()
					return info.Version.String(), info.Controllers, info.Writable, info.Reason
				},
			})
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			return rep.WriteText(cmd.OutOrStdout())
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

// trySandbox starts a real sandbox of the level and runs `true` in it.
func trySandbox(ctx context.Context, level string) error {
	sb, err := airlock.Create(ctx, airlock.Config{Isolation: airlock.Isolation(level)})
	if err != nil {
		return err
	}
	defer sb.Close()
	res, err := sb.Run(ctx, airlock.Command{Argv: []string{"true"}})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("`true` exited with %d inside the sandbox", res.ExitCode)
	}
	for _, n := range sb.Notes() {
		fmt.Fprintf(os.Stderr, "note: %s\n", termText(n))
	}
	return nil
}
