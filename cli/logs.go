package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/internal/state"
)

func (a *app) newLogsCmd() *cobra.Command {
	var follow bool
	cmd := &cobra.Command{
		Use:   "logs ID",
		Short: "Print the output of a detached sandbox's main command",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			store, id, err := resolveSandbox(args[0])
			if err != nil {
				return err
			}
			f, err := os.Open(store.LogPath(id))
			if errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("sandbox %s has no log: only sandboxes started with a command by airlock run --detach have one", id)
			}
			if err != nil {
				return err
			}
			defer f.Close()
			if _, err := io.Copy(os.Stdout, f); err != nil {
				return err
			}
			if !follow {
				return nil
			}
			// Follow while the sandbox runs, then print what came last.
			ctx := cmd.Context()
			for {
				r, err := store.Get(id)
				if err != nil {
					return err
				}
				if _, err := io.Copy(os.Stdout, f); err != nil {
					return err
				}
				if r.Status != state.StatusRunning {
					return nil
				}
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(200 * time.Millisecond):
				}
			}
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing output until the sandbox stops")
	return cmd
}
