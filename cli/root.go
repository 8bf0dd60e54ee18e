package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock"
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

// app is one command line: the options it was made with, defaults
// filled in.
type app struct {
	name    string
	short   string
	version string
	// base is the built-in configuration every sandbox starts from.
	base  airlock.Config
	extra func() []*cobra.Command
	// wording puts the server's messages in the CLI's words.
	wording *cliWording
}

func newApp(o Options) *app {
	a := &app{name: o.Name, short: o.Short, version: o.Version, base: o.Config, extra: o.Commands, wording: newCLIWording()}
	if a.name == "" {
		a.name = "airlock"
	}
	if a.short == "" {
		a.short = "Run untrusted code in a sandbox that owns its egress, secrets and files"
	}
	if a.version == "" {
		a.version = "dev"
	}
	return a
}

// warnf prints a message on standard error, after the program's name.
func (a *app) warnf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s: %s\n", a.name, a.wording.words(fmt.Sprintf(format, args...)))
}

// run runs the command line on args and returns the exit code.
func (a *app) run(ctx context.Context, args []string) int {
	// A write to a stdout or stderr whose reader has gone fails with
	// EPIPE instead of killing the program with SIGPIPE, as Go does
	// unless SIGPIPE is notified: a command that owns a sandbox then
	// tears it down in order and exits as if SIGPIPE had killed it. (A
	// handler, not SIG_IGN, which would be inherited by the processes
	// the program starts.)
	pipe := make(chan os.Signal, 1)
	signal.Notify(pipe, syscall.SIGPIPE)
	defer signal.Stop(pipe)
	root := a.newRootCmd()
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	var ee exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	case errors.Is(err, syscall.EPIPE) && outputGone():
		// Nobody reads what would say so.
		return exitOutputGone
	default:
		a.warnf("%s", termText(oneLine(err.Error())))
		return 125
	}
}

// oneLine puts cobra's error for a command it does not know, whose
// suggestions follow on lines of their own, on one line: errors are
// printed with control characters escaped, a line break included.
func oneLine(msg string) string {
	first, rest, ok := strings.Cut(msg, "\n")
	if !ok || !strings.HasPrefix(first, "unknown command ") {
		return msg
	}
	var names []string
	for l := range strings.Lines(rest) {
		if l = strings.TrimSpace(l); l != "" && l != "Did you mean this?" && !slices.Contains(names, l) {
			names = append(names, l)
		}
	}
	if len(names) > 0 {
		first += "; did you mean " + strings.Join(names, " or ") + "?"
	}
	return first
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

func (a *app) newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           a.name,
		Short:         a.short,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(flagError)
	var rpcMode bool
	root.Flags().BoolVar(&rpcMode, "rpc", false, "serve JSON-RPC on stdin/stdout for one sandbox: as "+a.name+" rpc, but it exits once the sandbox it created is closed")
	rpcCmd := a.newRPCCmd()
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
		opts := a.rpcOptions(rpcCmd)
		opts.EndWithLastSandbox = true
		return runRPC(rpcCmd, opts)
	}
	root.AddCommand(a.newRunCmd(), a.newExecCmd(), a.newAttachCmd(), a.newCpCmd(), a.newLogsCmd(),
		a.newListCmd(), a.newGetCmd(), a.newWaitCmd(), a.newStopCmd(), a.newKillCmd(), a.newPauseCmd(), a.newUnpauseCmd(), a.newRenameCmd(), a.newRmCmd(), a.newPruneCmd(), a.newPolicyCmd(), a.newStatsCmd(), a.newTopCmd(), a.newEventsCmd(), a.newPortCmd(),
		rpcCmd, a.newMCPCmd(), a.newSuperviseCmd(), a.newPoolCmd(), a.newPoolSuperviseCmd(), a.newVersionCmd(), a.newDoctorCmd(), a.newImageCmd(), a.newKernelCmd(), a.newPrefetchCmd())
	root.AddCommand(a.dockerShortcuts()...)
	if a.name != "airlock" {
		renameInHelp(root, a.name)
	}
	if a.extra != nil {
		root.AddCommand(a.extra()...)
	}
	return root
}

// flagError words a flag's bad value for a user: "--cpus: "abc" is not
// a number", rather than the parser's own error. The subcommands inherit
// it.
func flagError(_ *cobra.Command, err error) error {
	var ive *pflag.InvalidValueError
	var ne *strconv.NumError
	if !errors.As(err, &ive) || !errors.As(err, &ne) {
		return err
	}
	name := "--" + ive.GetFlag().Name
	switch {
	case errors.Is(ne.Err, strconv.ErrRange):
		return fmt.Errorf("%s: %q is out of range", name, ive.GetValue())
	case ive.GetFlag().Value.Type() == "bool":
		return fmt.Errorf("%s: %q is not true or false", name, ive.GetValue())
	}
	return fmt.Errorf("%s: %q is not a number", name, ive.GetValue())
}

// renameInHelp writes name for airlock where the help of root's
// commands and flags shows a command line ("airlock run", "airlock
// exec").
func renameInHelp(root *cobra.Command, name string) {
	var subs []string
	for _, c := range root.Commands() {
		subs = append(subs, regexp.QuoteMeta(c.Name()))
	}
	re := regexp.MustCompile(`\bairlock (` + strings.Join(subs, "|") + `)\b`)
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Long = re.ReplaceAllString(c.Long, name+" $1")
		c.Example = re.ReplaceAllString(c.Example, name+" $1")
		for _, fs := range []*pflag.FlagSet{c.Flags(), c.PersistentFlags()} {
			fs.VisitAll(func(f *pflag.Flag) { f.Usage = re.ReplaceAllString(f.Usage, name+" $1") })
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}
