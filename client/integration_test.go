package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
)

// logWriter sends the server's log to the test log.
type logWriter struct {
	mu sync.Mutex
	t  *testing.T
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.t != nil {
		w.t.Logf("server: %s", bytes.TrimRight(p, "\n"))
	}
	return len(p), nil
}

func (w *logWriter) stop() {
	w.mu.Lock()
	w.t = nil
	w.mu.Unlock()
}

// startReal starts the airlock built from this module in rpc mode, or
// skips the test when it cannot.
func startReal(t *testing.T, opts Options) *Client {
	t.Helper()
	if realBin == "" {
		t.Skipf("no airlock binary to test against: %v", buildErr)
	}
	bin := filepath.Join(realBin, "airlock")
	if out, err := exec.Command(bin, "rpc", "--help").CombinedOutput(); err != nil {
		t.Skipf("%s has no rpc command (%v: %s): no server to test against yet", bin, err, bytes.TrimSpace(out))
	}
	logs := &logWriter{t: t}
	opts.Binary = bin
	opts.Env = append(os.Environ(), "AIRLOCK_AGENT="+filepath.Join(realBin, "airlock-guest"))
	opts.Stderr = logs
	c, err := Start(testCtx(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		t0 := time.Now()
		defer func() { t.Logf("Close took %v", time.Since(t0)) }()
		// A server that has not exited shortly before Close gives up
		// on it prints where each of its goroutines waits (SIGQUIT),
		// into this test's log.
		dump := time.AfterFunc(DefaultCloseTimeout-5*time.Second, func() {
			t.Logf("the server has not exited %v after Close: its goroutines follow", DefaultCloseTimeout-5*time.Second)
			c.cmd.Process.Signal(syscall.SIGQUIT)
		})
		defer dump.Stop()
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		logs.stop()
	})
	return c
}

func TestRealServer(t *testing.T) {
	c := startReal(t, Options{})
	ctx := testCtx(t)
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Protocol != api.Version || info.MaxMessageBytes <= 0 {
		t.Errorf("info %+v", info)
	}
	if err := c.Subscribe(ctx); err != nil {
		t.Fatal(err)
	}
	sb, err := c.Create(ctx, api.CreateParams{})
	if err != nil {
		t.Fatal(err)
	}
	if sb.ID() == "" {
		t.Fatal("create returned no sandbox id")
	}
	for _, n := range sb.Notes() {
		t.Logf("note: %s", n)
	}

	t.Run("exec", func(t *testing.T) {
		res, err := sb.Exec(ctx, "echo hello")
		if err != nil {
			t.Fatal(err)
		}
		if string(res.Stdout) != "hello\n" || res.ExitCode != 0 || res.KilledBy != "" {
			t.Errorf("result %+v", res)
		}
		res, err = sb.Run(ctx, api.ExecParams{Command: "echo err >&2; exit 3"})
		if err != nil || res.ExitCode != 3 || string(res.Stderr) != "err\n" {
			t.Errorf("exit 3: %+v, %v", res, err)
		}
	})

	t.Run("timeout", func(t *testing.T) {
		res, err := sb.Run(ctx, api.ExecParams{Command: "sleep 10", TimeoutSeconds: 0.3})
		if err != nil {
			t.Fatal(err)
		}
		if res.KilledBy != "timeout" {
			t.Errorf("result %+v, want killed_by timeout", res)
		}
	})

	t.Run("command not found", func(t *testing.T) {
		_, err := sb.Run(ctx, api.ExecParams{Argv: []string{"/no/such/command"}})
		if !IsCommandNotFound(err) {
			t.Errorf("Run: %v, want command not found", err)
		}
	})

	t.Run("stdin streaming", func(t *testing.T) {
		p, err := sb.Start(ctx, api.ExecParams{Argv: []string{"cat"}, OpenStdin: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(p.Stdin(), "first\n"); err != nil {
			t.Fatal(err)
		}
		// cat answers before its input ends.
		buf := make([]byte, 6)
		if _, err := io.ReadFull(p.Stdout(), buf); err != nil || string(buf) != "first\n" {
			t.Fatalf("read %q, %v", buf, err)
		}
		if _, err := io.WriteString(p.Stdin(), "second\n"); err != nil {
			t.Fatal(err)
		}
		if err := p.Stdin().Close(); err != nil {
			t.Fatal(err)
		}
		rest, err := io.ReadAll(p.Stdout())
		if err != nil || string(rest) != "second\n" {
			t.Errorf("rest %q, %v", rest, err)
		}
		res, err := p.Wait()
		if err != nil || res.ExitCode != 0 {
			t.Errorf("Wait: %+v, %v", res, err)
		}
	})

	t.Run("StartWith", func(t *testing.T) {
		var out, errOut bytes.Buffer
		input := strings.Repeat("0123456789abcdef", 256<<10) // 4 MiB: several stdin requests
		p, err := sb.StartWith(ctx, api.ExecParams{Command: "wc -c; echo done >&2"}, strings.NewReader(input), &out, &errOut)
		if err != nil {
			t.Fatal(err)
		}
		res, err := p.Wait()
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("Wait: %+v, %v", res, err)
		}
		if strings.TrimSpace(out.String()) != fmt.Sprint(len(input)) || errOut.String() != "done\n" {
			t.Errorf("stdout %q, stderr %q", out.String(), errOut.String())
		}
	})

	t.Run("files", func(t *testing.T) {
		data := make([]byte, 1<<20)
		rand.Read(data)
		if err := sb.Mkdir(ctx, "/workspace/a/b", 0o755, true); err != nil {
			t.Fatal(err)
		}
		if err := sb.WriteFile(ctx, "/workspace/a/b/f", data, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := sb.ReadFile(ctx, "/workspace/a/b/f")
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("ReadFile: %d bytes (equal %v), %v", len(got), bytes.Equal(got, data), err)
		}
		files, err := sb.ListFiles(ctx, "/workspace/a/b")
		if err != nil || len(files) != 1 || files[0].Name != "f" || files[0].Size != 1<<20 {
			t.Errorf("ListFiles: %+v, %v", files, err)
		}
		info, err := sb.Stat(ctx, "/workspace/a/b/f")
		if err != nil || info.Size != 1<<20 || fs.FileMode(info.Mode).Perm() != 0o600 || info.IsDir {
			t.Errorf("Stat: %+v (mode %v), %v", info, fs.FileMode(info.Mode), err)
		}
		info, err = sb.Stat(ctx, "/workspace/a")
		if err != nil || !info.IsDir || !fs.FileMode(info.Mode).IsDir() {
			t.Errorf("Stat of a directory: %+v (mode %v), %v", info, fs.FileMode(info.Mode), err)
		}
		if err := sb.Mkdir(ctx, "/workspace/a", 0, false); !errors.Is(err, fs.ErrExist) {
			t.Errorf("Mkdir of an existing directory: %v, want fs.ErrExist", err)
		}
		if err := sb.Remove(ctx, "/workspace/a", true); err != nil {
			t.Fatal(err)
		}
		if _, err := sb.Stat(ctx, "/workspace/a"); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Stat after Remove: %v, want fs.ErrNotExist", err)
		}
		if _, err := sb.ReadFile(ctx, "/workspace/missing"); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("ReadFile of a missing file: %v, want fs.ErrNotExist", err)
		}
	})

	t.Run("concurrent", func(t *testing.T) {
		var wg sync.WaitGroup
		for i := range 50 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := sb.Exec(ctx, fmt.Sprintf("echo %d", i))
				if err != nil {
					t.Errorf("exec %d: %v", i, err)
				} else if string(res.Stdout) != fmt.Sprintf("%d\n", i) {
					t.Errorf("exec %d: stdout %q", i, res.Stdout)
				}
			}()
		}
		wg.Wait()
	})

	t.Run("cancel", func(t *testing.T) {
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		if _, err := sb.Exec(cctx, "sleep 30"); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Exec: %v, want context.DeadlineExceeded", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("Exec returned after %v", d)
		}
	})

	t.Run("events", func(t *testing.T) {
		if _, err := sb.Exec(ctx, "true"); err != nil {
			t.Fatal(err)
		}
		timeout := time.After(10 * time.Second)
		for {
			select {
			case ev, ok := <-c.Events():
				if !ok {
					t.Fatal("Events closed")
				}
				if ev.Type == EventExec {
					if ev.Exec == nil || ev.SandboxID != sb.ID() || len(ev.Exec.Command) == 0 {
						t.Errorf("exec event %+v (raw %s)", ev, ev.Raw.Exec)
					}
					return
				}
			case <-timeout:
				t.Fatalf("no exec event within 10s (%d dropped)", c.DroppedEvents())
			}
		}
	})

	t.Run("sandbox close", func(t *testing.T) {
		other, err := c.Create(ctx, api.CreateParams{})
		if err != nil {
			t.Fatal(err)
		}
		if err := other.Close(ctx); err != nil {
			t.Fatal(err)
		}
		_, err = other.Exec(ctx, "true")
		if !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrNotRunning) {
			t.Errorf("Exec after Close: %v, want ErrNotFound or ErrNotRunning", err)
		}
	})
}

// TestRealServerCloseTearsDown checks that closing the client ends the
// sandboxes of its session.
func TestRealServerCloseTearsDown(t *testing.T) {
	c := startReal(t, Options{})
	ctx := testCtx(t)
	sb, err := c.Create(ctx, api.CreateParams{})
	if err != nil {
		t.Fatal(err)
	}
	// A command that would outlive a leaky teardown.
	p, err := sb.Start(context.Background(), api.ExecParams{Command: "sleep 300"})
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	for _, s := range info.Sandboxes {
		if s.SandboxID == sb.ID() {
			pid = s.PID
		}
	}
	if pid <= 0 {
		t.Fatalf("info does not list sandbox %s with its pid: %+v", sb.ID(), info.Sandboxes)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := p.Wait(); err == nil {
		t.Error("the command finished normally after Close")
	}
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("sandbox process %d still exists 10s after Close", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := sb.Exec(ctx, "true"); !errors.Is(err, ErrClosed) {
		t.Errorf("Exec after Close: %v, want ErrClosed", err)
	}
}

// TestRealControlSocket drives a detached sandbox through its control
// socket: exec, files, and attach to its main command.
func TestRealControlSocket(t *testing.T) {
	if realBin == "" {
		t.Skipf("no airlock binary to test against: %v", buildErr)
	}
	bin := filepath.Join(realBin, "airlock")
	if err := exec.Command(bin, "attach", "--help").Run(); err != nil {
		t.Skipf("%s has no detached sandboxes (attach --help: %v)", bin, err)
	}
	run := exec.Command(bin, "run", "--detach", "--timeout", "2m", "--", "sh", "-c", `read line; echo "got $line"; exit 7`)
	run.Env = append(os.Environ(), "AIRLOCK_AGENT="+filepath.Join(realBin, "airlock-guest"))
	out, err := run.Output()
	if err != nil {
		t.Fatalf("airlock run --detach: %v", err)
	}
	id := strings.TrimSpace(string(out))
	t.Cleanup(func() { exec.Command(bin, "kill", id).Run() })

	ctx := testCtx(t)
	c, err := DialSandbox(ctx, id, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sb := c.Sandbox("")
	res, err := sb.Exec(ctx, "echo hi")
	if err != nil || string(res.Stdout) != "hi\n" {
		t.Fatalf("Exec: %+v, %v", res, err)
	}
	if err := sb.WriteFile(ctx, "/workspace/f", []byte("data"), 0); err != nil {
		t.Fatal(err)
	}
	if b, err := sb.ReadFile(ctx, "/workspace/f"); err != nil || string(b) != "data" {
		t.Fatalf("ReadFile: %q, %v", b, err)
	}
	if _, err := c.Create(ctx, api.CreateParams{}); !errors.Is(err, ErrPermissionDenied) {
		t.Errorf("Create on a control socket: %v, want ErrPermissionDenied", err)
	}

	p, err := sb.Attach(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(p.Stdin(), "ping\n"); err != nil {
		res, werr := p.Wait()
		t.Fatalf("write to the attached command: %v (the attach ended with %+v, %v)", err, res, werr)
	}
	got, err := io.ReadAll(p.Stdout())
	if err != nil || string(got) != "got ping\n" {
		t.Errorf("attach output %q, %v", got, err)
	}
	res, err = p.Wait()
	if err != nil || res.ExitCode != 7 {
		t.Errorf("Wait: %+v, %v; want exit code 7", res, err)
	}
}

// TestRealServerOutput streams a lot of output, read and not read.
func TestRealServerOutput(t *testing.T) {
	c := startReal(t, Options{MaxBufferedOutput: 1 << 20})
	ctx := testCtx(t)
	sb, err := c.Create(ctx, api.CreateParams{})
	if err != nil {
		t.Fatal(err)
	}
	const size = 32 << 20
	p, err := sb.Start(ctx, api.ExecParams{Command: fmt.Sprintf("head -c %d /dev/zero", size)})
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, p.Stdout())
	if err != nil || n != size {
		t.Errorf("read %d bytes, %v; want %d", n, err, size)
	}
	if res, err := p.Wait(); err != nil || res.ExitCode != 0 {
		t.Errorf("Wait: %+v, %v", res, err)
	}

	// Nobody reads: the command is cancelled past 1 MiB.
	p, err = sb.Start(ctx, api.ExecParams{Command: "cat /dev/zero"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the command did not end on overflow")
	}
	if _, err := p.Wait(); !errors.Is(err, ErrOutputOverflow) {
		t.Errorf("Wait: %v, want ErrOutputOverflow", err)
	}
	// The server killed it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := sb.Exec(ctx, "pgrep -x cat || true")
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Stdout) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cat still runs 10s after the overflow: pids %s", res.Stdout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A paused sandbox refuses execs and file reads with ErrPaused, says
// "paused" in info, and runs the same processes on once resumed.
func TestRealServerPause(t *testing.T) {
	c := startReal(t, Options{})
	ctx := testCtx(t)
	sb, err := c.Create(ctx, api.CreateParams{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.StartDetached(ctx, api.ExecParams{Command: "echo $$ > /tmp/pid; exec sleep 600"}); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Exec(ctx, "while [ ! -s /tmp/pid ]; do sleep 0.01; done"); err != nil {
		t.Fatal(err)
	}
	state := func() string {
		info, err := c.Info(ctx)
		if err != nil || len(info.Sandboxes) != 1 {
			t.Fatalf("info: %+v %v", info, err)
		}
		return info.Sandboxes[0].State
	}
	if err := sb.Pause(ctx); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	if s := state(); s != "paused" {
		t.Errorf("state while paused: %q", s)
	}
	if _, err := sb.Exec(ctx, "true"); !errors.Is(err, ErrPaused) || !strings.Contains(err.Error(), "resume it first") {
		t.Errorf("exec while paused: %v", err)
	}
	if _, err := sb.ReadFile(ctx, "/tmp/pid"); !errors.Is(err, ErrPaused) {
		t.Errorf("read_file while paused: %v", err)
	}
	if err := sb.Pause(ctx); !errors.Is(err, ErrPaused) {
		t.Errorf("Pause of a paused sandbox: %v", err)
	}
	if err := sb.Resume(ctx); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if s := state(); s != "running" {
		t.Errorf("state after resume: %q", s)
	}
	if res, err := sb.Exec(ctx, `kill -0 "$(cat /tmp/pid)" && echo still there`); err != nil || string(res.Stdout) != "still there\n" {
		t.Errorf("after resume: %+v %v", res, err)
	}
	if err := sb.Resume(ctx); !errors.Is(err, ErrPaused) || !strings.Contains(err.Error(), "not paused") {
		t.Errorf("Resume of a running sandbox: %v", err)
	}
}
