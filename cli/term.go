package cli

import (
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"
)

// controlled is a running command driven from this terminal: a command of
// a sandbox this process runs, or one reached through a control socket.
type controlled interface {
	Signal(sig syscall.Signal) error
	Kill() error
}

// resizable is a command with a terminal.
type resizable interface {
	Resize(rows, cols uint16) error
}

// forwardSignals passes signals to the command, as `docker run` does. A
// command may ignore SIGINT; the third Ctrl-C kills it and everything it
// started.
func (a *app) forwardSignals(p controlled) func() {
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	go func() {
		interrupts := 0
		for sig := range ch {
			if sig == syscall.SIGINT {
				interrupts++
				if interrupts == 3 {
					a.warnf("third interrupt: killing the command")
					_ = p.Kill()
					continue
				}
			}
			_ = p.Signal(sig.(syscall.Signal))
		}
	}()
	return func() { signal.Stop(ch); close(ch) }
}

// followResize passes this terminal's size changes to the command until
// the returned function is called.
func followResize(p resizable, fd int) func() {
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	go func() {
		for range winch {
			if w, h, err := term.GetSize(fd); err == nil {
				_ = p.Resize(uint16(h), uint16(w))
			}
		}
	}()
	return func() { signal.Stop(winch); close(winch) }
}
