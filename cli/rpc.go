package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/rpc"
)

func (a *app) newRPCCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rpc",
		Short: "Serve the JSON-RPC 2.0 API on stdin and stdout",
		Long: `Serve airlock's JSON-RPC 2.0 API on stdin and stdout, one message per line.

Requests create sandboxes and run commands and file operations in them;
responses may come out of order and carry their request's id. create and
the requests that name no sandbox_id run one after another, in the order
they were read, so that a file of requests runs as a script; requests
that name their sandbox run at once. When stdin ends, the requests in
flight run to their end and are answered, then the sandboxes created in
the session are closed and airlock exits 0; a client that stops reading
stdout, SIGTERM or Ctrl-C end it at once. Diagnostics go to stderr;
stdout carries only the protocol.`,
		Example: `  airlock rpc
  airlock rpc < requests.jsonl
  airlock rpc --max-message-mb 512 --log-level warn`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkRPCFlags(cmd); err != nil {
				return err
			}
			return runRPC(cmd, a.rpcOptions(cmd))
		},
	}
	fl := cmd.Flags()
	fl.Int64("max-message-mb", rpc.DefaultMaxMessage>>20, "largest request line in MiB (a write_file of N MiB takes about 4N/3 in base64)")
	fl.String("log-level", "info", "diagnostics on stderr: debug, info, warn or error")
	return cmd
}

// checkRPCFlags validates the flags of `airlock rpc`.
func checkRPCFlags(cmd *cobra.Command) error {
	if mb, _ := cmd.Flags().GetInt64("max-message-mb"); mb < 1 || mb > 4096 {
		return fmt.Errorf("--max-message-mb %d: give a size from 1 to 4096", mb)
	}
	if _, err := logLevel(cmd); err != nil {
		return err
	}
	return nil
}

func logLevel(cmd *cobra.Command) (slog.Level, error) {
	s, _ := cmd.Flags().GetString("log-level")
	var level slog.Level
	if err := level.UnmarshalText([]byte(strings.ToLower(s))); err != nil {
		return level, fmt.Errorf("--log-level %q: give debug, info, warn or error", s)
	}
	return level, nil
}

// rpcOptions builds the server's options from the command line (flags
// already checked by checkRPCFlags).
func (a *app) rpcOptions(cmd *cobra.Command) rpc.Options {
	mb, _ := cmd.Flags().GetInt64("max-message-mb")
	level, _ := logLevel(cmd)
	opts := rpc.Options{
		Version:     a.version,
		MaxMessage:  mb << 20,
		AllowCreate: true,
		Configure:   a.withBase,
		Logger:      slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level})),
	}
	a.recordSandboxes(&opts)
	return opts
}

// runRPC serves one session on the command's stdin and stdout.
func runRPC(cmd *cobra.Command, opts rpc.Options) error {
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	// Clean up after earlier supervisors that were killed, off the
	// critical path.
	go airlock.Sweep()
	err := rpc.NewServer(opts).Serve(ctx, cmd.InOrStdin(), cmd.OutOrStdout())
	if errors.Is(err, context.Canceled) {
		// Stopped by a signal: the sandboxes are closed; not a failure.
		return nil
	}
	return err
}
