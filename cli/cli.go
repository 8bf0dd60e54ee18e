// Package cli is airlock's command line as a library: the airlock
// command is built on it, and so can be a program of your own that
// runs sandboxes with a configuration built in, including what JSON and
// flags cannot carry: Go providers mounted in the sandbox's tree (package
// vfs), Go hooks on its files and on its HTTP requests, and secrets read
// from the program's own environment.
//
//	func main() {
//		cli.Main(cli.Options{
//			Name: "my-sandbox",
//			Config: airlock.Config{
//				Network: &policy.Config{
//					AllowedHosts: []string{"api.example.com"},
//					Secrets: map[string]policy.Secret{
//						"API_KEY": {Value: os.Getenv("API_KEY"), Hosts: []string{"api.example.com"}},
//					},
//				},
//				// data is a vfs.Provider: a tree served from this program.
//				VFS: airlock.VFSConfig{Providers: map[string]vfs.Provider{"/data": data}},
//			},
//		})
//	}
//
// The program has every command of airlock (run, exec, cp, rpc, mcp,
// list, ...), under its own name, and commands of its own
// (Options.Commands). Every sandbox it creates starts from
// Options.Config: those of run (with or without --detach), of the
// JSON-RPC create of rpc and --rpc, and of the MCP tool sandbox_create.
// The state directory ($AIRLOCK_HOME) is airlock's own, so airlock list,
// exec, cp and kill reach the program's sandboxes too.
//
// # Merge rules
//
// What is given when a sandbox is created (flags, the JSON of a create
// request, an MCP tool call) is laid over the built-in configuration
// as follows.
//
//   - Plain values are the run-time value when one is given (not zero),
//     else the built-in one: Isolation, Hostname, Resources (each of
//     CPUs, MemoryMB, TimeoutSeconds), PidsLimit, NofileLimit, DiskMB,
//     MaxFileSizeMB, MaxOutputBytes, ImageCacheDir, AgentPath and
//     HookTimeout. The flags of run that have defaults (--isolation,
//     --pids-limit, --nofile-limit, --timeout) take the built-in value
//     as their default, and their help shows it.
//   - The root: an Image or RootFS given at run time replaces the
//     built-in Image and RootFS both; otherwise the built-in ones apply.
//   - AllowPtrace is on when either turns it on.
//   - Env is the built-in environment with the run-time variables added
//     on top (a run-time value wins for the same name). A run-time
//     variable may not have the name of a built-in secret (but for the
//     value "${NAME}", which JSON-RPC's create allows, and which is
//     what the variable holds anyway).
//   - Network: none when neither gives one. Otherwise the lists of the
//     built-in policy come first and the run-time entries not already
//     in them are added (AllowedHosts, DeniedHosts, AllowedCIDRs,
//     Egress, ExtraRootCAs): a denied host stays denied, whatever is
//     allowed at run time. Secrets are both sets; a run-time secret with
//     the name of a built-in one is an error, so that a built-in secret
//     can be neither replaced nor removed. A PolicyScript is the
//     built-in one; a run-time one is taken only when none is built in,
//     and given with one it is an error. ScrubResponses is on when
//     either turns it on. DNSServers, BlockPrivateIPs and
//     ResponseHeaderTimeoutSeconds are plain values: the run-time ones
//     when given.
//   - VFS: the mounts of both (Mounts, DirectMounts, Providers); a
//     target that both give is an error. BlockedPaths are both lists.
//     The built-in Hooks apply to every programmable mount, those
//     given at run time included (a host directory bound with -v or
//     type=bind has no provider in between, hence no hooks).
//   - Ports: the built-in ports to publish, then the run-time ones (-p).
//   - OnRequest, OnResponse and the VFS Hooks are the built-in ones:
//     nothing given at run time removes them.
//   - OnEvent and OnImageProgress: the built-in function is called as
//     well as the command's own (the JSON-RPC session's events, a
//     progress bar). Logger: the built-in one when set, else the
//     command's.
//
// A Go provider of the built-in configuration is one value: every
// sandbox the program creates mounts that same provider, which is what
// one run does once, but rpc, --rpc and mcp may do several times in
// one process, and the sandboxes then share its files.
//
// run --detach starts the sandbox's supervisor, and pool create a pool's,
// by running the program again (os.Executable) with a hidden command: the
// program must build the same Options each time it starts, as a main
// function does.
package cli

import (
	"context"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock"
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
	// Config is the configuration every sandbox the program creates
	// starts from (see the package documentation for how what is given
	// at run time is laid over it).
	Config airlock.Config
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

// RunWithConfig is Run with cfg built in: every sandbox the command line
// creates starts from it (see the package documentation).
func RunWithConfig(ctx context.Context, cfg airlock.Config, args []string) int {
	return Options{Config: cfg}.Run(ctx, args)
}

// Run runs the command line o describes on args (without the program's
// name) and returns the exit code, as the package-level Run does.
func (o Options) Run(ctx context.Context, args []string) int {
	return newApp(o).run(ctx, args)
}

// Exit returns an error that makes Run return code without printing
// anything, for the RunE of a command in Options.Commands.
func Exit(code int) error { return exitError{code} }
