// Command airlock runs untrusted code in sandboxes.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/internal/agent"
)

// exitError carries a process exit code out of a command.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func main() {
	// The airlock binary doubles as the sandbox agent when started under
	// that name, so a single static binary is enough.
	if filepath.Base(os.Args[0]) == "airlock-guest" {
		agent.Main(os.Args)
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	root := newRootCmd()
	err := root.ExecuteContext(ctx)
	var ee exitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		os.Exit(ee.code)
	default:
		fmt.Fprintf(os.Stderr, "airlock: %v\n", err)
		os.Exit(125)
	}
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "airlock",
		Short:         "Run untrusted code in a sandbox that owns its egress, secrets and files",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	var rpcMode bool
	root.Flags().BoolVar(&rpcMode, "rpc", false, "serve JSON-RPC on stdin/stdout (same as airlock rpc)")
	rpcCmd := newRPCCmd()
	root.RunE = func(cmd *cobra.Command, args []string) error {
		if !rpcMode {
			return cmd.Help()
		}
		rpcCmd.SetContext(cmd.Context())
		return rpcCmd.RunE(rpcCmd, nil)
	}
	root.AddCommand(newRunCmd(), newExecCmd(), newAttachCmd(), newCpCmd(), newLogsCmd(),
		newListCmd(), newGetCmd(), newKillCmd(), newRmCmd(), newPruneCmd(), newPolicyCmd(),
		rpcCmd, newSuperviseCmd(), newVersionCmd(), newDoctorCmd())
	return root
}
