package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
)

func TestParseDetachKeys(t *testing.T) {
	for in, want := range map[string]string{
		"ctrl-p,ctrl-q": "\x10\x11",
		"ctrl-x,x":      "\x18x",
		"a":             "a",
		"ctrl-@,ctrl-_": "\x00\x1f",
		"CTRL-A":        "\x01",
	} {
		got, err := parseDetachKeys(in)
		if err != nil || string(got) != want {
			t.Errorf("%q: %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "ctrl-", "ctrl-1", "ab", "ctrl-p,,ctrl-q"} {
		if _, err := parseDetachKeys(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestEscapeReader(t *testing.T) {
	keys := []byte("\x10\x11")
	for _, tc := range []struct {
		in, out string
		detach  bool
	}{
		{"hello", "hello", false},
		{"ab\x10\x11cd", "ab", true},
		{"a\x10b", "a\x10b", false},      // a broken sequence is passed on
		{"a\x10\x10\x11", "a\x10", true}, // the second key restarts it
		{"tail\x10", "tail\x10", false},  // held keys come out at the end
	} {
		// One byte at a time too: a sequence may span reads.
		for _, r := range []io.Reader{strings.NewReader(tc.in), &oneByte{strings.NewReader(tc.in)}} {
			var out bytes.Buffer
			_, err := io.Copy(&out, &escapeReader{r: r, keys: keys})
			if out.String() != tc.out || errors.Is(err, errDetachKeys) != tc.detach || (!tc.detach && err != nil) {
				t.Errorf("%q: %q, %v; want %q, detach %v", tc.in, out.String(), err, tc.out, tc.detach)
			}
		}
	}
}

type oneByte struct{ r io.Reader }

func (o *oneByte) Read(p []byte) (int, error) { return o.r.Read(p[:1]) }

// terminal runs the CLI on a pseudo-terminal and collects what it prints.
type terminal struct {
	t    *testing.T
	cmd  *exec.Cmd
	pty  io.ReadWriteCloser
	mu   sync.Mutex
	out  bytes.Buffer
	done chan error
}

func (h *cliHome) onTerminal(rows, cols uint16, args ...string) *terminal {
	h.t.Helper()
	cmd := h.cmd(context.Background(), nil, args...)
	cmd.Stdin = nil
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: rows, Cols: cols})
	if err != nil {
		h.t.Fatal(err)
	}
	tm := &terminal{t: h.t, cmd: cmd, pty: ptmx, done: make(chan error, 1)}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			tm.mu.Lock()
			tm.out.Write(buf[:n])
			tm.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	go func() { tm.done <- cmd.Wait() }()
	h.t.Cleanup(func() { cmd.Process.Kill(); ptmx.Close() })
	return tm
}

// waitFor waits until the output holds s.
func (tm *terminal) waitFor(s string) {
	tm.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		tm.mu.Lock()
		got := tm.out.String()
		tm.mu.Unlock()
		if strings.Contains(got, s) {
			return
		}
		if time.Now().After(deadline) {
			tm.t.Fatalf("no %q in the terminal's output %q", s, got)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// exit waits for the CLI to end and returns its exit code.
func (tm *terminal) exit() int {
	tm.t.Helper()
	select {
	case err := <-tm.done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			tm.t.Fatal(err)
		}
		return 0
	case <-time.After(30 * time.Second):
		tm.t.Fatalf("airlock %q did not end", tm.cmd.Args[1:])
		return -1
	}
}

// TestAttachTerminal: attached to a main command with a terminal, input
// reaches it key by key, the size follows, Ctrl-P Ctrl-Q detaches and
// leaves it running, and Ctrl-C is a key that interrupts it.
func TestAttachTerminal(t *testing.T) {
	t.Parallel()
	h := newCLIHome(t)
	h.must(nil, "run", "-d", "-t", "--name", "tty", "--", "sh", "-c", `trap 'echo size:$(stty size)' WINCH; echo ready; while :; do if read l; then echo got:$l; fi; done`)
	h.waitLogs("tty", "ready") // the trap is set

	tm := h.onTerminal(33, 101, "attach", "tty")
	tm.waitFor("size:33 101")
	io.WriteString(tm.pty, "hello\r")
	tm.waitFor("got:hello")
	io.WriteString(tm.pty, "\x10\x11")
	if code := tm.exit(); code != 0 {
		t.Errorf("detach keys: exit %d", code)
	}
	if out := h.must(nil, "inspect", "--format", "{{.status}}", "tty"); out != "running\n" {
		t.Errorf("after detaching: %q", out)
	}

	// Other detach keys; then Ctrl-C, a key on the command's terminal,
	// ends it and attach exits as it did.
	tm = h.onTerminal(24, 80, "attach", "--detach-keys", "ctrl-x,x", "tty")
	tm.waitFor("size:24 80")
	io.WriteString(tm.pty, "\x10\x11again\r")
	tm.waitFor("got:")
	io.WriteString(tm.pty, "\x03")
	if code := tm.exit(); code != 130 {
		t.Errorf("Ctrl-C through attach: exit %d, want 130 (the command's SIGINT)", code)
	}
}

// TestAttachSignals: without a terminal, attach passes its signals to the
// main command; a third Ctrl-C detaches, and with --sig-proxy=false the
// first one does, without signalling it.
func TestAttachSignals(t *testing.T) {
	t.Parallel()
	h := newCLIHome(t)
	id := strings.TrimSpace(h.must(nil, "run", "-d", "--", "sh", "-c", `trap "echo got INT" INT; trap "echo got USR1" USR1; echo ready; while :; do echo tick; sleep 0.2; done`))
	h.waitStatus(id, "running", 5*time.Second)
	logHas := func(s string, n int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for strings.Count(h.must(nil, "logs", id), s) < n {
			if time.Now().After(deadline) {
				t.Fatalf("log has %d of %q, want %d: %q", strings.Count(h.must(nil, "logs", id), s), s, n, h.must(nil, "logs", id))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	logHas("ready", 1)

	// attach has its signal handlers before it copies output: once a
	// tick has come through it, a signal is passed on rather than ending it.
	attach := func(args ...string) (*exec.Cmd, *rpcSyncBuf) {
		cmd := h.cmd(context.Background(), nil, append([]string{"attach", "--no-stdin"}, append(args, id)...)...)
		out := new(rpcSyncBuf)
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(time.Minute)
		for !strings.Contains(out.String(), "tick") {
			if time.Now().After(deadline) {
				t.Fatalf("attach printed no output of the command in a minute: %q", out)
			}
			time.Sleep(50 * time.Millisecond)
		}
		return cmd, out
	}
	cmd, out := attach()
	cmd.Process.Signal(syscall.SIGUSR1)
	logHas("got USR1", 1)
	for i := 1; i <= 2; i++ {
		cmd.Process.Signal(syscall.SIGINT)
		logHas("got INT", i)
	}
	cmd.Process.Signal(syscall.SIGINT)
	if err := cmd.Wait(); err != nil {
		t.Errorf("third Ctrl-C: %v; output %q", err, out)
	}
	if !strings.Contains(out.String(), "got INT") || !strings.Contains(out.String(), "detached") {
		t.Errorf("attach printed %q", out)
	}

	cmd, out = attach("--sig-proxy=false")
	cmd.Process.Signal(syscall.SIGINT)
	if err := cmd.Wait(); err != nil {
		t.Errorf("Ctrl-C with --sig-proxy=false: %v; output %q", err, out)
	}
	time.Sleep(300 * time.Millisecond)
	if n := strings.Count(h.must(nil, "logs", id), "got INT"); n != 2 {
		t.Errorf("with --sig-proxy=false the command got SIGINT: %d in all", n)
	}
	if got := h.must(nil, "inspect", "--format", "{{.status}}", id); got != "running\n" {
		t.Errorf("after detaching: %q", got)
	}
}
