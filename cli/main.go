// Package cli is airlock's command line.
package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agent"
)

// useSelfAsAgent makes this binary the sandboxes' agent when no
// airlock-guest is found ($AIRLOCK_AGENT, beside airlock, on PATH), so
// that airlock alone is enough (go install, a single download). A
// separate airlock-guest is kept when there is one: being smaller, it
// starts a sandbox a few milliseconds sooner (measured: 52-59 ms against
// 56-63 ms for a whole run of true).
func useSelfAsAgent() {
	if os.Getenv("AIRLOCK_AGENT") != "" {
		return
	}
	exe, err := os.Executable()
	if err != nil {
		return
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(exe), "airlock-guest")); err == nil {
		return
	}
	if _, err := exec.LookPath("airlock-guest"); err == nil {
		return
	}
	os.Setenv("AIRLOCK_AGENT", exe)
}

// exitError carries a process exit code out of a command.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// Main runs airlock's command line on os.Args and exits; v is the
// version it reports.
func Main(v string) {
	version = v
	// The airlock binary doubles as the sandbox agent when started under
	// that name, so a single static binary is enough.
	if filepath.Base(os.Args[0]) == "airlock-guest" {
		agent.Main(os.Args)
		return
	}
	// A write to a stdout or stderr whose reader has gone fails with
	// EPIPE instead of killing airlock with SIGPIPE, as Go does unless
	// SIGPIPE is notified: a command that owns a sandbox then tears it
	// down in order and exits as if SIGPIPE had killed it. (A handler, not
	// SIG_IGN, which would be inherited by the processes airlock starts.)
	useSelfAsAgent()
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	root := newRootCmd()
	err := root.ExecuteContext(ctx)
	var ee exitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		os.Exit(ee.code)
	case errors.Is(err, syscall.EPIPE) && outputGone():
		// Nobody reads what would say so.
		os.Exit(exitOutputGone)
	default:
		fmt.Fprintf(os.Stderr, "airlock: %s\n", termText(err.Error()))
		os.Exit(125)
	}
}

// exitOutputGone is the exit code of a command whose output lost its
// reader: that of a process killed by SIGPIPE, as a shell reports it, so
// that `airlock run -- yes | head -1` ends as `yes | head -1` does.
const exitOutputGone = 128 + int(syscall.SIGPIPE)

// outputGone reports whether standard output or standard error is a pipe
// or socket whose reader has gone.
func outputGone() bool {
	fds := []unix.PollFd{{Fd: 1, Events: unix.POLLOUT}, {Fd: 2, Events: unix.POLLOUT}}
	if _, err := unix.Poll(fds, 0); err != nil {
		return false
	}
	for _, f := range fds {
		if f.Revents&(unix.POLLERR|unix.POLLHUP) != 0 {
			return true
		}
	}
	return false
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "airlock",
		Short:         "Run untrusted code in a sandbox that owns its egress, secrets and files",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	var rpcMode bool
	root.Flags().BoolVar(&rpcMode, "rpc", false, "serve JSON-RPC on stdin/stdout for one sandbox: as airlock rpc, but it exits once the sandbox it created is closed")
	rpcCmd := newRPCCmd()
	root.RunE = func(cmd *cobra.Command, args []string) error {
		if !rpcMode {
			return cmd.Help()
		}
		// One process serves one sandbox, as the protocol's example
		// clients expect: it ends once that sandbox is closed.
		rpcCmd.SetContext(cmd.Context())
		if err := checkRPCFlags(rpcCmd); err != nil {
			return err
		}
		opts := rpcOptions(rpcCmd)
		opts.EndWithLastSandbox = true
		return runRPC(rpcCmd, opts)
	}
	root.AddCommand(newRunCmd(), newExecCmd(), newAttachCmd(), newCpCmd(), newLogsCmd(),
		newListCmd(), newGetCmd(), newKillCmd(), newRmCmd(), newPruneCmd(), newPolicyCmd(),
		rpcCmd, newMCPCmd(), newSuperviseCmd(), newVersionCmd(), newDoctorCmd(), newImageCmd(), newPrefetchCmd())
	return root
}
