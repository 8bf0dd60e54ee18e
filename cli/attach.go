package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/airlock-sandbox/airlock/client"
)

func (a *app) newAttachCmd() *cobra.Command {
	var (
		noStdin, sigProxy bool
		detachKeys        string
	)
	cmd := &cobra.Command{
		Use:   "attach ID",
		Short: "Attach to the main command of a detached sandbox",
		Long: `Stream the output of a detached sandbox's main command from now on and
pass this terminal's input to it, as docker attach does. Ctrl-P Ctrl-Q
(--detach-keys) detaches and leaves the command running; when the command
ends, attach exits with its exit code.

Signals that attach receives go to the command (--sig-proxy, the default):
Ctrl-C sends it SIGINT, and a third Ctrl-C detaches from a command that
ignores them. With --sig-proxy=false, Ctrl-C detaches. A command started
with run -d -t has a terminal: this one is put in raw mode, Ctrl-C reaches
it as a key, and size changes follow.`,
		Example: `  ` + a.name + ` attach web
  ` + a.name + ` attach --detach-keys ctrl-x,x web
  ` + a.name + ` attach --no-stdin --sig-proxy=false web     # watch only`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			keys, err := parseDetachKeys(detachKeys)
			if err != nil {
				return err
			}
			return a.attach(cmd.Context(), args[0], attachOptions{stdin: !noStdin, sigProxy: sigProxy, keys: keys})
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&noStdin, "no-stdin", false, "do not pass this terminal's input to the command")
	fl.BoolVar(&sigProxy, "sig-proxy", true, "pass the signals attach receives (Ctrl-C: SIGINT) to the command")
	fl.StringVar(&detachKeys, "detach-keys", defaultDetachKeys, "the keys that detach: characters and ctrl-<key>, separated by commas")
	return cmd
}

type attachOptions struct {
	stdin, sigProxy bool
	keys            []byte
}

func (a *app) attach(ctx context.Context, prefix string, o attachOptions) error {
	store, id, err := resolveSandbox(prefix)
	if err != nil {
		return err
	}
	rec, err := store.Get(id)
	if err != nil {
		return err
	}
	c, sb, err := a.runningSandbox(ctx, prefix)
	if err != nil {
		return err
	}
	defer c.Close()
	inFd, outFd := int(os.Stdin.Fd()), int(os.Stdout.Fd())
	inTerm := o.stdin && term.IsTerminal(inFd)
	raw := inTerm && rec.TTY
	if raw {
		old, err := term.MakeRaw(inFd)
		if err != nil {
			return fmt.Errorf("put the terminal in raw mode: %w", err)
		}
		defer term.Restore(inFd, old)
	}
	p, err := sb.Attach(ctx)
	if err != nil {
		return err
	}

	// Detaching: the detach keys, a write to an output whose reader has
	// gone, Ctrl-C without --sig-proxy or a third one with it. The
	// command goes on.
	var (
		detachOnce sync.Once
		why        error
	)
	detach := func(reason error) {
		detachOnce.Do(func() {
			why = reason
			_ = p.Cancel(context.WithoutCancel(ctx))
		})
	}
	if o.stdin {
		var in io.Reader = os.Stdin
		if inTerm {
			in = &escapeReader{r: os.Stdin, keys: o.keys}
		}
		go func() {
			_, err := io.Copy(p.Stdin(), in)
			if errors.Is(err, errDetachKeys) {
				detach(errDetachKeys)
				return
			}
			_ = p.Stdin().Close()
		}()
	}
	if rec.TTY {
		if w, h, err := term.GetSize(outFd); err == nil {
			_ = p.Resize(ctx, uint16(h), uint16(w))
		}
		defer followResize(attachResizer{ctx, p}, outFd)()
	}
	defer a.attachSignals(ctx, p, o.sigProxy, detach)()

	var copies sync.WaitGroup
	copyOut := func(w io.Writer, r io.Reader) {
		if _, err := io.Copy(w, r); err != nil {
			detach(fmt.Errorf("write the output of sandbox %s: %w", sb.ID(), err))
		}
	}
	copies.Go(func() { copyOut(os.Stdout, p.Stdout()) })
	copies.Go(func() { copyOut(os.Stderr, p.Stderr()) })
	res, err := p.Wait()
	// Print everything that arrived before the end.
	copies.Wait()
	detachOnce.Do(func() {}) // no detaching from here on
	switch {
	case errors.Is(why, errDetachKeys), errors.Is(why, errInterruptDetach):
		return nil
	case why != nil:
		return why
	case err != nil:
		return err
	}
	return a.exitFor(execResultFromClient(res))
}

// errInterruptDetach: Ctrl-C detached (without --sig-proxy, or a third).
var errInterruptDetach = errors.New("interrupt detached")

// attachSignals passes the signals this process receives to the main
// command, as docker attach does with --sig-proxy; a third SIGINT detaches
// from a command that ignores them. Without sigProxy, SIGINT detaches and
// other signals act as they would.
func (a *app) attachSignals(ctx context.Context, p *client.Process, sigProxy bool, detach func(error)) func() {
	ch := make(chan os.Signal, 4)
	if sigProxy {
		signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	} else {
		signal.Notify(ch, syscall.SIGINT)
	}
	go func() {
		interrupts := 0
		for sig := range ch {
			if sig == syscall.SIGINT {
				interrupts++
				if !sigProxy || interrupts == 3 {
					if sigProxy {
						a.warnf("third interrupt: detached; the command goes on (airlock stop stops it)")
					}
					detach(errInterruptDetach)
					continue
				}
			}
			_ = p.Signal(ctx, strconv.Itoa(int(sig.(syscall.Signal))))
		}
	}()
	return func() { signal.Stop(ch); close(ch) }
}

// attachResizer resizes an attached main command's terminal.
type attachResizer struct {
	ctx context.Context
	p   *client.Process
}

func (r attachResizer) Resize(rows, cols uint16) error { return r.p.Resize(r.ctx, rows, cols) }
