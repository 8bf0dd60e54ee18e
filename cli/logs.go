package cli

import (
	"bytes"
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
	var tail int
	cmd := &cobra.Command{
		Use:   "logs ID",
		Short: "Print the output of a detached sandbox's main command",
		Long: `Print the output of a detached sandbox's main command, stdout and stderr
as they came, from its log (the first 64 MiB). --tail N prints only the
last N lines, as docker logs --tail does; -f then follows.`,
		Example: `  ` + a.name + ` logs web
  ` + a.name + ` logs --tail 20 -f web`,
		Args: cobra.ExactArgs(1),
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
			if tail >= 0 {
				err = copyTail(os.Stdout, f, tail)
			} else {
				_, err = io.Copy(os.Stdout, f)
			}
			if err != nil {
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
	cmd.Flags().IntVarP(&tail, "tail", "n", -1, "print only the last N lines of what is there (-1: all)")
	return cmd
}

// copyTail writes the last n lines of f, read from its start, to w, and
// leaves f at its end. A log is bounded (lifecycle.MaxLogBytes), so it
// is read whole, keeping the offsets of the last n line starts.
func copyTail(w io.Writer, f *os.File, n int) error {
	b, err := io.ReadAll(f)
	if err != nil {
		return err
	}
	start := len(b)
	// A last line without its newline counts as a line.
	end := len(b)
	if end > 0 && b[end-1] == '\n' {
		end--
	}
	for i := 0; i < n && start > 0; i++ {
		j := bytes.LastIndexByte(b[:min(start, end)], '\n')
		start = j + 1
		end = j
		if j < 0 {
			start = 0
			break
		}
	}
	if n == 0 {
		start = len(b)
	}
	_, err = w.Write(b[start:])
	return err
}
