package cli

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/state"
)

type execFlags struct {
	interactive bool
	tty         bool
	detach      bool
	asJSON      bool
	env         []string
	envFiles    []string
	workdir     string
	user        string
	timeout     time.Duration
}

func (a *app) newExecCmd() *cobra.Command {
	var f execFlags
	cmd := &cobra.Command{
		Use:   "exec [flags] ID -- COMMAND [ARG...]",
		Short: "Run a command in a running sandbox",
		Long: `Run a command in a running sandbox (one started with airlock run --detach,
or by an airlock rpc session), through its control socket. Exit codes are
those of airlock run.`,
		Example: `  airlock exec sb-1a2b -- ls /workspace
  airlock exec -it sb-1a2b bash
  echo data | airlock exec sb-1a2b -- wc -c
  airlock exec -d sb-1a2b -- python3 -m http.server 8000`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			command := args[1:]
			if command[0] == "--" {
				command = command[1:]
			}
			if len(command) == 0 {
				return errors.New("give the command to run after the sandbox id")
			}
			return a.runExec(cmd.Context(), &f, args[0], command)
		},
	}
	fl := cmd.Flags()
	fl.SetInterspersed(false)
	fl.BoolVarP(&f.interactive, "interactive", "i", false, "keep stdin open even when it is a terminal")
	fl.BoolVarP(&f.tty, "tty", "t", false, "allocate a pseudo-terminal")
	fl.BoolVarP(&f.detach, "detach", "d", false, "start the command and return: it runs on, its output discarded, until it exits or the sandbox stops")
	fl.BoolVar(&f.asJSON, "json", false, "print one JSON result instead of streaming output")
	fl.StringArrayVarP(&f.env, "env", "e", nil, "set an environment variable (KEY=VALUE, or KEY to copy it from here)")
	fl.StringArrayVar(&f.envFiles, "env-file", nil, "read environment variables from a file, a KEY=VALUE (or KEY) per line, # for comments, as docker reads it; -e wins; repeatable")
	fl.StringVarP(&f.workdir, "workdir", "w", "", "working directory inside the sandbox (default: the image's, else /workspace)")
	fl.StringVarP(&f.user, "user", "u", "", "run as USER, UID, USER:GROUP or UID:GID of the sandbox (default: the image's user, else root)")
	durationVar(fl, &f.timeout, "timeout", 0, "kill the command and its processes after this long (30 or 30s, 5m; a bare number is seconds)")
	return cmd
}

// runningSandbox resolves an id prefix to a running sandbox and connects to
// its control socket.
func (a *app) runningSandbox(ctx context.Context, prefix string) (*client.Client, *client.Sandbox, error) {
	store, id, err := resolveSandbox(prefix)
	if err != nil {
		return nil, nil, err
	}
	r, err := store.Get(id)
	if err != nil {
		return nil, nil, err
	}
	// A damaged record does not keep a running sandbox out of reach: its
	// control socket works all the same.
	a.warnDamaged(r)
	if r.Status != state.StatusRunning {
		return nil, nil, fmt.Errorf("sandbox %s is %s, not running: start a new one with airlock run --detach", id, r.Status)
	}
	c, err := dialSandbox(ctx, store, id)
	if err != nil {
		return nil, nil, err
	}
	return c, c.Sandbox(id), nil
}

func (a *app) runExec(ctx context.Context, f *execFlags, prefix string, args []string) error {
	if err := checkTTY(f.tty, f.interactive); err != nil {
		return err
	}
	fromFiles, err := readEnvFiles(f.envFiles)
	if err != nil {
		return err
	}
	f.env = append(fromFiles, f.env...)
	if f.tty && f.asJSON {
		return errors.New("--tty and --json cannot be combined: a terminal session has no single result")
	}
	if f.detach && (f.tty || f.interactive) {
		return errors.New("--detach cannot be combined with --tty or --interactive: nobody reads a detached command's terminal or writes its stdin")
	}
	c, sb, err := a.runningSandbox(ctx, prefix)
	if err != nil {
		return err
	}
	defer c.Close()
	return a.execIn(ctx, sb, f, args)
}

// execIn runs a command in a sandbox reached through its control socket,
// as exec does: its output streamed (or one JSON result), its exit code
// returned as the error.
func (a *app) execIn(ctx context.Context, sb *client.Sandbox, f *execFlags, args []string) error {
	params := api.ExecParams{Argv: args, WorkingDir: f.workdir, Env: envFlags(f.env), User: f.user, TTY: f.tty, TimeoutSeconds: f.timeout.Seconds()}
	if f.detach {
		return a.execDetached(ctx, sb, f, params)
	}
	stdinIsTTY := term.IsTerminal(int(os.Stdin.Fd()))
	useStdin := f.interactive || !stdinIsTTY
	if f.asJSON {
		if useStdin {
			in, err := io.ReadAll(io.LimitReader(os.Stdin, 64<<20))
			if err != nil {
				return fmt.Errorf("read stdin: %w", err)
			}
			params.Stdin = base64.StdEncoding.EncodeToString(in)
		}
		res, err := sb.Run(ctx, params)
		if err != nil {
			return jsonRemoteFailure(sb, err)
		}
		return writeResult(os.Stdout, jsonFromClient(sb.ID(), res), res.Stdout, res.Stderr)
	}
	var stdin io.Reader
	if useStdin {
		stdin = os.Stdin
		params.OpenStdin = true
	}
	fd := int(os.Stdout.Fd())
	if f.tty {
		if w, h, err := term.GetSize(fd); err == nil {
			params.Cols, params.Rows = uint16(w), uint16(h)
		}
		if f.interactive && stdinIsTTY {
			old, err := term.MakeRaw(int(os.Stdin.Fd()))
			if err != nil {
				return fmt.Errorf("put the terminal in raw mode: %w", err)
			}
			defer term.Restore(int(os.Stdin.Fd()), old)
		}
	}
	p, err := sb.StartWith(ctx, params, stdin, os.Stdout, os.Stderr)
	if err != nil {
		return a.remoteStartFailure(err)
	}
	rp := remoteProcess{ctx: ctx, p: p}
	defer a.forwardSignals(rp)()
	if f.tty {
		defer followResize(rp, fd)()
	}
	res, err := p.Wait()
	if err != nil {
		return a.remoteStartFailure(err)
	}
	return a.exitFor(execResultFromClient(res))
}

// execDetached starts a command that runs on after exec returns (docker's
// exec -d): it prints nothing, or the command's pid with --json.
func (a *app) execDetached(ctx context.Context, sb *client.Sandbox, f *execFlags, params api.ExecParams) error {
	pid, err := sb.StartDetached(ctx, params)
	if err != nil {
		if f.asJSON {
			return jsonRemoteFailure(sb, err)
		}
		return a.remoteStartFailure(err)
	}
	if f.asJSON {
		return writeJSON(struct {
			SandboxID string `json:"sandbox_id"`
			Pid       int    `json:"pid"`
		}{sb.ID(), pid})
	}
	return nil
}

// remoteProcess drives a command reached through a control socket.
type remoteProcess struct {
	ctx context.Context
	p   *client.Process
}

func (r remoteProcess) Signal(sig syscall.Signal) error {
	return r.p.Signal(r.ctx, strconv.Itoa(int(sig)))
}
func (r remoteProcess) Kill() error                    { return r.p.Cancel(r.ctx) }
func (r remoteProcess) Resize(rows, cols uint16) error { return r.p.Resize(r.ctx, rows, cols) }

// jsonRemoteFailure prints, as --json does, a command that could not
// start (its result, exit code 126 or 127) or any other failure.
func jsonRemoteFailure(sb *client.Sandbox, err error) error {
	var ce *client.Error
	if errors.As(err, &ce) && ce.Code == api.CodeCommandFailed {
		return writeResult(os.Stdout, jsonResult{SandboxID: sb.ID(), ExitCode: ce.ExitCode()}, nil, []byte(ce.Message+"\n"))
	}
	return writeJSONError(err)
}

func (a *app) remoteStartFailure(err error) error {
	var ce *client.Error
	if errors.As(err, &ce) && ce.Code == api.CodeCommandFailed {
		a.warnf("%s", termText(ce.Message))
		return exitError{ce.ExitCode()}
	}
	return err
}

// execResultFromClient gives a remote result the shape exitFor reads.
func execResultFromClient(r *client.Result) *airlock.ExecResult {
	return &airlock.ExecResult{ExitCode: r.ExitCode, KilledBy: airlock.KilledBy(r.KilledBy), LimitsHit: r.LimitsHit, Signal: r.Signal}
}

func jsonFromClient(id string, r *client.Result) jsonResult {
	out := jsonResult{
		SandboxID:       id,
		ExitCode:        r.ExitCode,
		StdoutTruncated: r.StdoutTruncated,
		StderrTruncated: r.StderrTruncated,
		DurationMs:      r.Duration.Milliseconds(),
		CPUTimeMs:       r.CPUTime.Milliseconds(),
		PeakMemoryBytes: r.PeakMemoryBytes,
		LimitsHit:       r.LimitsHit,
	}
	if r.KilledBy != "" {
		k := r.KilledBy
		out.KilledBy = &k
	}
	if r.Signal != 0 {
		s := r.Signal
		out.Signal = &s
	}
	return out
}

// envFlags reads -e flags: KEY=VALUE, or KEY to copy it from here.
func envFlags(kvs []string) map[string]string {
	env := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			if v, ok = os.LookupEnv(k); !ok {
				continue
			}
		}
		env[k] = v
	}
	return env
}
