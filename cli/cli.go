// Package cli is airlock's command line as a library: the airlock
// command is built on it, and so can be a program of your own, with
// every command of airlock under its own name and commands of its own.
//
//	func main() {
//		cli.Main(cli.Options{Name: "my-sandbox"})
//	}
//
// The state directory ($AIRLOCK_HOME) is airlock's own, so airlock list,
// exec, cp and kill reach the program's sandboxes too.
package cli

import (
	"context"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/internal/agent"
)

// Options describe a command line built on airlock. The zero value is
// airlock's own.
type Options struct {
	// Name is the program's name in usage lines, help and messages.
	// Default "airlock".
	Name string
	// Short is the program's one-line description at the top of its
	// help. Default: airlock's.
	Short string
	// Version is what the version command, JSON-RPC's info and the MCP
	// server report. Default "dev".
	Version string
	// Commands, when set, returns commands added beside the built-in
	// ones (a name already taken replaces nothing: cobra then runs the
	// first of the two). It is called once per Run. A command's RunE
	// may return Exit(code) to end the program with that code and no
	// message.
	Commands func() []*cobra.Command
}

// Main runs the program's command line on os.Args and exits with its
// code; it does not return. Before that it does what a whole program
// needs and Run leaves out:
//
//   - Started as "airlock-guest" (argv[0]), it is the sandboxes' agent
//     and nothing else.
//   - When no airlock-guest is found ($AIRLOCK_AGENT, beside the
//     program, on PATH), the program serves as its own agent, which
//     takes a static build (CGO_ENABLED=0).
//   - SIGTERM cancels the command's context: the sandbox is torn down
//     and the program exits.
func Main(o Options) {
	if filepath.Base(os.Args[0]) == "airlock-guest" {
		agent.Main(os.Args)
		os.Exit(0)
	}
	useSelfAsAgent()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	code := o.Run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}

// Run runs airlock's command line on args (without the program's name)
// and returns the exit code. It uses the process's standard input,
// output and error. Unlike Main, it finds the agent as the Go API does
// (Config.AgentPath, $AIRLOCK_AGENT, airlock-guest beside the
// executable, then on PATH).
func Run(ctx context.Context, args []string) int {
	return Options{}.Run(ctx, args)
}

// Run runs the command line o describes on args (without the program's
// name) and returns the exit code, as the package-level Run does.
func (o Options) Run(ctx context.Context, args []string) int {
	return newApp(o).run(ctx, args)
}

// Exit returns an error that makes Run return code without printing
// anything, for the RunE of a command in Options.Commands.
func Exit(code int) error { return exitError{code} }
