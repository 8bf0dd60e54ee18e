package airlock_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
)

// syncBuffer is a bytes.Buffer safe for a writer and a concurrent reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitProcess waits for p with a deadline.
func waitProcess(t *testing.T, p *airlock.Process, d time.Duration) (*airlock.ExecResult, error) {
	t.Helper()
	select {
	case <-p.Done():
		return p.Wait()
	case <-time.After(d):
		_ = p.Kill()
		t.Fatalf("command did not end within %s", d)
		return nil, nil
	}
}

func TestExecArgvAndShell(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	sb := newSandbox(t, airlock.Config{})

	// Argv is not interpreted by a shell.
	res, err := sb.Run(ctx, airlock.Command{Argv: []string{"echo", "a  b", "$HOME", "*", ";", "x"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(res.Stdout); got != "a  b $HOME * ; x\n" {
		t.Errorf("argv echo printed %q", got)
	}
	// Argv[0] found on PATH and given as an absolute path.
	res, err = sb.Run(ctx, airlock.Command{Argv: []string{"/bin/sh", "-c", "echo $0-$1", "zero", "one"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(res.Stdout); got != "zero-one\n" {
		t.Errorf("sh -c with args printed %q", got)
	}
	// Shell is interpreted.
	res, err = sb.Run(ctx, airlock.Command{Shell: "echo $HOME; echo a | tr a b; echo *"})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(res.Stdout); got != "/root\nb\n*\n" {
		t.Errorf("shell printed %q", got)
	}
	// Arguments, environment and names are bytes, not UTF-8.
	raw := "caf\xe9-\xff\xc0"
	res, err = sb.Run(ctx, airlock.Command{Argv: []string{"sh", "-c", `printf %s "$1$V" > "/tmp/$1"; cat "/tmp/$1"`, "sh", raw}, Env: map[string]string{"V": raw}})
	if err != nil {
		t.Fatalf("argv and env that are not UTF-8: %v", err)
	}
	if got := string(res.Stdout); got != raw+raw {
		t.Errorf("argv and env that are not UTF-8 came back as %q, want %q", got, raw+raw)
	}
	if data, err := sb.ReadFile(ctx, "/tmp/"+raw); err != nil || string(data) != raw+raw {
		t.Errorf("ReadFile of a name that is not UTF-8: %q, %v", data, err)
	}
	// An empty command is refused.
	if _, err := sb.Run(ctx, airlock.Command{}); err == nil {
		t.Error("an empty command was accepted")
	}
}

func TestExecEnvAndDir(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	sb := newSandbox(t, airlock.Config{Env: map[string]string{"SB_VAR": "sandbox", "SHARED": "from-sandbox"}})

	if got := mustRun(t, ctx, sb, "pwd"); got != "/workspace\n" {
		t.Errorf("default cwd = %q, want /workspace", got)
	}
	res, err := sb.Run(ctx, airlock.Command{
		Argv: []string{"sh", "-c", "pwd; echo $SB_VAR $SHARED $CMD_VAR; echo $PATH; echo $HOME; echo $AIRLOCK_SANDBOX_ID"},
		Env:  map[string]string{"SHARED": "from-command", "CMD_VAR": "a b=c"},
		Dir:  "/tmp",
	})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(res.Stdout), "\n")
	if len(lines) < 5 {
		t.Fatalf("output %q", res.Stdout)
	}
	if lines[0] != "/tmp" {
		t.Errorf("cwd = %q, want /tmp", lines[0])
	}
	if lines[1] != "sandbox from-command a b=c" {
		t.Errorf("env = %q, want %q", lines[1], "sandbox from-command a b=c")
	}
	if !strings.Contains(lines[2], "/usr/bin") {
		t.Errorf("PATH = %q", lines[2])
	}
	if lines[4] != sb.ID() {
		t.Errorf("AIRLOCK_SANDBOX_ID = %q, want %q", lines[4], sb.ID())
	}
	// Per-command env does not leak into the next command.
	if got := mustRun(t, ctx, sb, "echo ${CMD_VAR:-unset} $SHARED"); got != "unset from-sandbox\n" {
		t.Errorf("next command sees %q", got)
	}
	// The host's environment is not passed in.
	if got := mustRun(t, ctx, sb, "env"); strings.Contains(got, "AIRLOCK_HOME=") || strings.Contains(got, "AIRLOCK_AGENT=") {
		t.Errorf("host environment leaked:\n%s", got)
	}
	// A missing working directory is an error, not a silent fallback.
	res, err = sb.Run(ctx, airlock.Command{Argv: []string{"pwd"}, Dir: "/nonexistent"})
	if err == nil && res.ExitCode == 0 {
		t.Errorf("running in a missing directory succeeded: %q", res.Stdout)
	}
}

func TestExecExitCodes(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	sb := newSandbox(t, airlock.Config{})
	for _, code := range []int{0, 1, 3, 42, 127, 255} {
		res := run(t, ctx, sb, fmt.Sprintf("exit %d", code))
		if res.ExitCode != code || res.KilledBy != "" || res.Signal != 0 {
			t.Errorf("exit %d: got code %d killed_by %q signal %d", code, res.ExitCode, res.KilledBy, res.Signal)
		}
	}
	// A command that kills itself.
	res := run(t, ctx, sb, "kill -USR1 $$")
	if res.Signal != int(syscall.SIGUSR1) || res.ExitCode != 128+int(syscall.SIGUSR1) || res.KilledBy != airlock.KilledBySignal {
		t.Errorf("self-signalled: %+v", res)
	}
}

func TestExecSignal(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	sb := newSandbox(t, airlock.Config{})
	p, err := sb.Start(ctx, airlock.Command{Argv: []string{"sleep", "100"}})
	if err != nil {
		t.Fatal(err)
	}
	if p.Pid() <= 1 {
		t.Errorf("Pid() = %d", p.Pid())
	}
	select {
	case <-p.Done():
		t.Fatal("sleep 100 ended by itself")
	case <-time.After(100 * time.Millisecond):
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	res, err := waitProcess(t, p, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if res.Signal != int(syscall.SIGTERM) || res.KilledBy != airlock.KilledBySignal || res.ExitCode != 128+15 {
		t.Errorf("after SIGTERM: signal %d killed_by %q exit %d", res.Signal, res.KilledBy, res.ExitCode)
	}

	// A trapped signal is delivered to the whole process group and handled.
	var out syncBuffer
	p, err = sb.Start(ctx, airlock.Command{Shell: "trap 'echo got-usr1; exit 7' USR1; echo ready; while :; do sleep 0.05; done", Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	if !waitFor(20*time.Second, func() bool { return out.String() == "ready\n" }) {
		t.Fatalf("shell did not get ready: %q", out.String())
	}
	if err := p.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	res, err = waitProcess(t, p, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 7 || !strings.Contains(out.String(), "got-usr1") {
		t.Errorf("trapped USR1: exit %d stdout %q", res.ExitCode, out.String())
	}

	// Kill ends the command.
	p, err = sb.Start(ctx, airlock.Command{Argv: []string{"sleep", "100"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("Kill did not end the command")
	}
	if got := mustRun(t, ctx, sb, "ps -eo args | grep -c '^sleep 100' || true"); strings.TrimSpace(got) != "0" {
		waitFor(5*time.Second, func() bool {
			return strings.TrimSpace(mustRun(t, ctx, sb, "ps -eo args | grep -c '^sleep 100' || true")) == "0"
		})
		if got := mustRun(t, ctx, sb, "ps -eo stat,args"); strings.Contains(got, "sleep 100") {
			t.Errorf("sleep 100 still runs after Kill:\n%s", got)
		}
	}
}

func TestExecStdin(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	sb := newSandbox(t, airlock.Config{})

	// Interactive: WriteStdin and CloseStdin.
	p, err := sb.Start(ctx, airlock.Command{Argv: []string{"cat"}, OpenStdin: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"hello ", "world", "\n"} {
		if err := p.WriteStdin([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.CloseStdin(); err != nil {
		t.Fatal(err)
	}
	res, err := waitProcess(t, p, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Stdout) != "hello world\n" || res.ExitCode != 0 {
		t.Errorf("cat echoed %q (exit %d)", res.Stdout, res.ExitCode)
	}

	// From a reader, larger than any buffer on the way.
	data := bytes.Repeat([]byte("0123456789abcdef"), 256<<10) // 4 MiB
	res, err = sb.Run(ctx, airlock.Command{Argv: []string{"sha256sum"}, Stdin: bytes.NewReader(data)})
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("%x", sha256.Sum256(data)); !strings.HasPrefix(string(res.Stdout), want) {
		t.Errorf("sha256 of stdin = %q, want %s", res.Stdout, want)
	}

	// Without stdin the command reads /dev/null, so it does not block.
	res, err = sb.Run(ctx, airlock.Command{Argv: []string{"wc", "-c"}, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(res.Stdout)) != "0" || res.KilledBy != "" {
		t.Errorf("wc -c without stdin: %q killed_by %q", res.Stdout, res.KilledBy)
	}
}

func TestExecStreamingOutput(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	sb := newSandbox(t, airlock.Config{})
	var stdout, stderr syncBuffer
	p, err := sb.Start(ctx, airlock.Command{
		Shell:     "echo out1; echo err1 >&2; read x; echo out2 $x; echo err2 >&2",
		OpenStdin: true,
		Stdout:    &stdout,
		Stderr:    &stderr,
	})
	if err != nil {
		t.Fatal(err)
	}
	// Output arrives while the command still runs (it waits for stdin).
	if !waitFor(20*time.Second, func() bool { return stdout.String() == "out1\n" && stderr.String() == "err1\n" }) {
		t.Fatalf("before stdin: stdout %q stderr %q", stdout.String(), stderr.String())
	}
	select {
	case <-p.Done():
		t.Fatal("command ended before it got its input")
	default:
	}
	if err := p.WriteStdin([]byte("in\n")); err != nil {
		t.Fatal(err)
	}
	res, err := waitProcess(t, p, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if stdout.String() != "out1\nout2 in\n" || stderr.String() != "err1\nerr2\n" {
		t.Errorf("stdout %q stderr %q", stdout.String(), stderr.String())
	}
	if len(res.Stdout) != 0 || len(res.Stderr) != 0 {
		t.Errorf("streamed output was also buffered: %q %q", res.Stdout, res.Stderr)
	}
	// Buffered: stdout and stderr apart.
	r := run(t, ctx, sb, "echo o; echo e >&2; echo o2")
	if string(r.Stdout) != "o\no2\n" || string(r.Stderr) != "e\n" {
		t.Errorf("buffered stdout %q stderr %q", r.Stdout, r.Stderr)
	}
}

func TestExecTimeoutKillsTree(t *testing.T) {
	t.Parallel()
	testTimeoutKillsTree(t, "sleep %[1]s & sleep %[2]s & wait")
}

// TestExecTimeoutKillsDetached checks that "every process it started"
// includes one that left the command's session and process tree (setsid
// in a subshell that exits, so the sleep is reparented to PID 1).
func TestExecTimeoutKillsDetached(t *testing.T) {
	t.Parallel()
	testTimeoutKillsTree(t, "(setsid sleep %[1]s &); sleep %[2]s & wait")
}

func testTimeoutKillsTree(t *testing.T, script string) {
	ctx := testCtx(t, 60*time.Second)
	sb := newSandbox(t, airlock.Config{})
	m1, m2 := sleepMarker(100), sleepMarker(100)
	res, err := sb.Run(ctx, airlock.Command{
		Shell:   fmt.Sprintf(script, m1, m2),
		Timeout: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.KilledBy != airlock.KilledByTimeout {
		t.Errorf("killed_by = %q, want timeout (%+v)", res.KilledBy, res)
	}
	if res.ExitCode == 0 {
		t.Errorf("exit code 0 after a timeout")
	}
	left := func() string {
		out := mustRun(t, ctx, sb, "ps -eo pid,stat,args")
		var keep []string
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, m1) || strings.Contains(l, m2) {
				keep = append(keep, l)
			}
		}
		return strings.Join(keep, "\n")
	}
	if l := left(); l != "" {
		// Allow the kernel a moment to finish the kills, but no more.
		if !waitFor(3*time.Second, func() bool { return left() == "" }) {
			t.Errorf("processes of the timed-out command remain:\n%s", left())
		}
	}
	// The sandbox still works.
	if got := mustRun(t, ctx, sb, "echo ok"); got != "ok\n" {
		t.Errorf("after the timeout: %q", got)
	}
}

func TestExecContextCancelKills(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	sb := newSandbox(t, airlock.Config{})
	marker := sleepMarker(100)
	cctx, cancel := context.WithCancel(ctx)
	p, err := sb.Start(cctx, airlock.Command{Argv: []string{"sleep", marker}})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	res, err := waitProcess(t, p, 30*time.Second)
	if err == nil && (res == nil || res.ExitCode == 0 || res.KilledBy == "") {
		t.Errorf("Wait after the context was cancelled: no error and result %+v", res)
	}
	t.Logf("Wait after cancel: %+v %v", res, err)
	if !waitFor(5*time.Second, func() bool { return !strings.Contains(mustRun(t, ctx, sb, "ps -eo args"), marker) }) {
		t.Errorf("sleep %s still runs after its context was cancelled", marker)
	}
}

func TestExecNotFound(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	sb := newSandbox(t, airlock.Config{})
	_, err := sb.Run(ctx, airlock.Command{Argv: []string{"airlock-no-such-command"}})
	var se *airlock.StartError
	if !errors.As(err, &se) {
		t.Fatalf("err = %v (%T), want *airlock.StartError", err, err)
	}
	if se.ExitCode() != 127 || !se.NotFound {
		t.Errorf("ExitCode() = %d NotFound = %v, want 127 true", se.ExitCode(), se.NotFound)
	}
	_, err = sb.Run(ctx, airlock.Command{Argv: []string{"/no/such/path"}})
	if !errors.As(err, &se) || se.ExitCode() != 127 {
		t.Errorf("absolute missing path: %v", err)
	}
	// Start learns of the failure before returning, Run from the result.
	if p, err := sb.Start(ctx, airlock.Command{Argv: []string{"airlock-no-such-command"}}); p != nil || !errors.As(err, &se) || !se.NotFound {
		t.Errorf("Start of a missing command = %v, %v; want a StartError with NotFound", p, err)
	}
	// Not executable: 126.
	if err := sb.WriteFile(ctx, "/workspace/noexec.sh", []byte("#!/bin/sh\necho hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = sb.Run(ctx, airlock.Command{Argv: []string{"/workspace/noexec.sh"}})
	if !errors.As(err, &se) || se.ExitCode() != 126 {
		t.Errorf("non-executable file: err %v, want StartError with exit 126", err)
	}
	// Through a shell, the shell reports 127.
	if res := run(t, ctx, sb, "airlock-no-such-command"); res.ExitCode != 127 {
		t.Errorf("shell: exit %d, want 127", res.ExitCode)
	}
	// The sandbox is fine afterwards.
	mustRun(t, ctx, sb, "true")
}

func TestExecTTY(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	sb := newSandbox(t, airlock.Config{})
	res, err := sb.Run(ctx, airlock.Command{TTY: true, Rows: 40, Cols: 100, Argv: []string{"sh", "-c", "stty size; tty; echo err >&2; test -t 0 && test -t 1 && test -t 2 && echo all-tty; echo $TERM"}})
	if err != nil {
		t.Fatal(err)
	}
	out := strings.ReplaceAll(string(res.Stdout), "\r\n", "\n")
	if !strings.Contains(out, "40 100\n") {
		t.Errorf("stty size: %q, want 40 100", out)
	}
	if !regexp.MustCompile(`(?m)^/dev/pts/\d+$`).MatchString(out) {
		t.Errorf("tty: %q, want a /dev/pts path", out)
	}
	if !strings.Contains(out, "err\n") || len(res.Stderr) != 0 {
		t.Errorf("stderr should be merged into stdout on a tty: stdout %q stderr %q", out, res.Stderr)
	}
	if !strings.Contains(out, "all-tty") || !strings.Contains(out, "xterm") {
		t.Errorf("stdio not all on the tty or TERM unset: %q", out)
	}

	// Resize while running.
	var buf syncBuffer
	p, err := sb.Start(ctx, airlock.Command{TTY: true, Rows: 24, Cols: 80, OpenStdin: true, Stdout: &buf, Shell: "stty size; read x; stty size"})
	if err != nil {
		t.Fatal(err)
	}
	if !waitFor(20*time.Second, func() bool { return strings.Contains(buf.String(), "24 80") }) {
		t.Fatalf("initial size: %q", buf.String())
	}
	if err := p.Resize(50, 120); err != nil {
		t.Fatal(err)
	}
	if err := p.WriteStdin([]byte("\n")); err != nil {
		t.Fatal(err)
	}
	res, err = waitProcess(t, p, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "50 120") {
		t.Errorf("after Resize(50, 120): %q", buf.String())
	}
	if res.ExitCode != 0 {
		t.Errorf("exit %d", res.ExitCode)
	}

	// CloseStdin on a tty ends input (^D).
	p, err = sb.Start(ctx, airlock.Command{TTY: true, OpenStdin: true, Argv: []string{"cat"}})
	if err != nil {
		t.Fatal(err)
	}
	_ = p.WriteStdin([]byte("typed\n"))
	_ = p.CloseStdin()
	res, err = waitProcess(t, p, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 || !strings.Contains(string(res.Stdout), "typed") {
		t.Errorf("cat on a tty: exit %d output %q", res.ExitCode, res.Stdout)
	}
}

func TestExecParallel(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 120*time.Second)
	sb := newSandbox(t, airlock.Config{})
	const n = 50
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := sb.Run(ctx, airlock.Command{Argv: []string{"sh", "-c", "echo out-$0; echo err-$0 >&2; exit $(($0 % 7))", fmt.Sprint(i)}})
			if err != nil {
				errs <- fmt.Errorf("exec %d: %w", i, err)
				return
			}
			if string(res.Stdout) != fmt.Sprintf("out-%d\n", i) || string(res.Stderr) != fmt.Sprintf("err-%d\n", i) || res.ExitCode != i%7 {
				errs <- fmt.Errorf("exec %d: stdout %q stderr %q exit %d", i, res.Stdout, res.Stderr, res.ExitCode)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestExecResourceUsage(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	sb := newSandbox(t, airlock.Config{})
	res, err := sb.Run(ctx, airlock.Command{Argv: []string{"python3", "-c", `
b = bytearray(50 << 20)
for i in range(0, len(b), 4096): b[i] = 1
s = 0
for i in range(2000000): s += i
print(len(b))`}})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("python3: exit %d %s", res.ExitCode, res.Stderr)
	}
	if res.CPUTime <= 0 {
		t.Errorf("CPUTime = %v, want > 0", res.CPUTime)
	}
	if res.PeakMemoryBytes < 50<<20 {
		t.Errorf("PeakMemoryBytes = %d, want >= 50 MiB", res.PeakMemoryBytes)
	}
	if res.Duration <= 0 || res.Duration < res.CPUTime/4 {
		t.Errorf("Duration = %v with CPUTime %v", res.Duration, res.CPUTime)
	}
	// A command doing nothing uses far less.
	small := run(t, ctx, sb, "true")
	if small.PeakMemoryBytes >= res.PeakMemoryBytes/4 {
		t.Errorf("true peaked at %d bytes, python3 with 50 MiB at %d", small.PeakMemoryBytes, res.PeakMemoryBytes)
	}
}

func TestExecOutputTruncation(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	sb := newSandbox(t, airlock.Config{MaxOutputBytes: 1024})
	res := run(t, ctx, sb, "head -c 10240 /dev/zero | tr '\\0' x; echo short >&2")
	if len(res.Stdout) != 1024 || !res.StdoutTruncated {
		t.Errorf("len(Stdout) = %d truncated %v, want 1024 true", len(res.Stdout), res.StdoutTruncated)
	}
	if string(res.Stdout) != strings.Repeat("x", 1024) {
		t.Errorf("kept output is not the first 1024 bytes")
	}
	if string(res.Stderr) != "short\n" || res.StderrTruncated {
		t.Errorf("stderr %q truncated %v", res.Stderr, res.StderrTruncated)
	}
	if res.ExitCode != 0 {
		t.Errorf("exit %d: the command must not be hurt by truncation", res.ExitCode)
	}
	// Exactly at the limit is not truncated.
	res = run(t, ctx, sb, "head -c 1024 /dev/zero")
	if len(res.Stdout) != 1024 || res.StdoutTruncated {
		t.Errorf("1024 bytes: len %d truncated %v", len(res.Stdout), res.StdoutTruncated)
	}
	// Streaming is not bounded.
	var n countWriter
	r, err := sb.Run(ctx, airlock.Command{Shell: "head -c 100000 /dev/zero", Stdout: &n})
	if err != nil {
		t.Fatal(err)
	}
	if n.n != 100000 || r.StdoutTruncated {
		t.Errorf("streamed %d bytes (truncated %v), want 100000", n.n, r.StdoutTruncated)
	}
}

// countWriter counts bytes written to it.
type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

func TestExecAfterClose(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	sb := newSandbox(t, airlock.Config{})
	p, err := sb.Start(ctx, airlock.Command{Argv: []string{"sleep", "100"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("a running command did not end when its sandbox closed")
	}
	if _, err := p.Wait(); err == nil {
		t.Error("Wait of a command killed by Close returned no error")
	}
	if _, err := sb.Exec(ctx, "true"); !errors.Is(err, airlock.ErrClosed) {
		t.Errorf("Exec after Close: %v, want ErrClosed", err)
	}
	if _, err := sb.ReadFile(ctx, "/etc/hostname"); !errors.Is(err, airlock.ErrClosed) {
		t.Errorf("ReadFile after Close: %v, want ErrClosed", err)
	}
	select {
	case <-sb.Done():
	default:
		t.Error("Done() not closed after Close")
	}
	if err := sb.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	_ = io.Discard
}

// TestExecSignalEveryCommand signals many commands started concurrently,
// while the sandbox is busy: every one of them must get its signal,
// whichever of the spawner's threads started it or handles the request.
func TestExecSignalEveryCommand(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 90*time.Second)
	sb := newSandbox(t, airlock.Config{})
	busy, err := sb.Start(ctx, airlock.Command{Shell: "for i in 1 2; do (while :; do :; done) & done; wait", Timeout: 40 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { busy.Kill() })
	const n = 40
	procs := make([]*airlock.Process, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := sb.Start(ctx, airlock.Command{Argv: []string{"sleep", "100"}, Timeout: 60 * time.Second})
			if err != nil {
				t.Errorf("start %d: %v", i, err)
				return
			}
			procs[i] = p
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for i, p := range procs {
		if err := p.Signal(syscall.SIGTERM); err != nil {
			t.Errorf("signal %d: %v", i, err)
		}
		if i%8 == 0 {
			time.Sleep(20 * time.Millisecond)
		}
	}
	deadline := time.After(15 * time.Second)
	var stuck []int
	for i, p := range procs {
		select {
		case <-p.Done():
			res, err := p.Wait()
			if err != nil || res.Signal != int(syscall.SIGTERM) {
				t.Errorf("command %d: %v %+v", i, err, res)
			}
			continue
		case <-deadline:
		}
		select {
		case <-p.Done():
		default:
			stuck = append(stuck, i)
		}
	}
	if len(stuck) > 0 {
		t.Errorf("%d of %d commands did not end within 15 s of SIGTERM: %v", len(stuck), n, stuck)
	}
}

// TestExecKillAttribution checks that KilledBy names the cause: a command
// killed by the caller is not reported as killed by the OOM killer just
// because another command in the sandbox ran out of memory meanwhile.
func TestExecKillAttribution(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	sb := newSandbox(t, airlock.Config{Resources: airlock.Resources{MemoryMB: 64}})
	if !requireEnforced(t, sb) {
		t.Skip("unprivileged: no memory limit, so no OOM kill to confuse")
	}
	p, err := sb.Start(ctx, airlock.Command{Argv: []string{"sleep", "100"}})
	if err != nil {
		t.Fatal(err)
	}
	oom, err := sb.Run(ctx, airlock.Command{Argv: []string{"python3", "-c", "b = b'x' * (300 << 20)"}})
	if err != nil {
		t.Fatal(err)
	}
	if oom.KilledBy != airlock.KilledByOOM {
		t.Fatalf("python3 over the limit: killed_by %q, want oom", oom.KilledBy)
	}
	if err := p.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	res, err := waitProcess(t, p, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if res.KilledBy != airlock.KilledBySignal {
		t.Errorf("sleep killed with SIGKILL by the caller: killed_by %q, want signal", res.KilledBy)
	}
}

// TestExecOversizedRequest checks that a command line and environment too
// large for the spawner is refused with an error, and the sandbox goes on.
func TestExecOversizedRequest(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	sb := newSandbox(t, airlock.Config{})
	big := strings.Repeat("x", 400<<10)
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	res, err := sb.Run(sctx, airlock.Command{Argv: []string{"true"}, Env: map[string]string{"BIG": big}})
	if sctx.Err() != nil {
		t.Fatalf("a 400 KiB environment made Run hang: %v", err)
	}
	if err == nil && res.ExitCode == 0 {
		t.Logf("a 400 KiB environment was accepted")
	}
	// Writing to a command that has ended does not hang either.
	p, err := sb.Start(ctx, airlock.Command{Argv: []string{"true"}, OpenStdin: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := waitProcess(t, p, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		_ = p.WriteStdin([]byte("late"))
		_ = p.CloseStdin()
		_ = p.Resize(10, 10)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("WriteStdin after the command ended hangs")
	}
	if got := mustRun(t, ctx, sb, "echo ok"); got != "ok\n" {
		t.Errorf("afterwards: %q", got)
	}
}

// Start failures are classified by the spawner, not by their wording: a
// missing program is 127, anything else that stops it from running 126.
func TestExecStartErrorKinds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sb := newSandbox(t, airlock.Config{})
	for _, tc := range []struct {
		cmd  airlock.Command
		code int
	}{
		{airlock.Command{Argv: []string{"no-such-program"}}, 127},
		{airlock.Command{Argv: []string{"/no/such/path"}}, 127},
		{airlock.Command{Argv: []string{"true"}, Dir: "/no/such/dir"}, 126},
		{airlock.Command{Argv: []string{"/etc/hostname"}}, 126},
	} {
		_, err := sb.Run(ctx, tc.cmd)
		var se *airlock.StartError
		if !errors.As(err, &se) {
			t.Errorf("%v in %q: got %v, want a StartError", tc.cmd.Argv, tc.cmd.Dir, err)
			continue
		}
		if se.ExitCode() != tc.code {
			t.Errorf("%v in %q: exit code %d (%v), want %d", tc.cmd.Argv, tc.cmd.Dir, se.ExitCode(), se.Err, tc.code)
		}
	}
	if got := mustRun(t, ctx, sb, "echo ok"); got != "ok\n" {
		t.Errorf("after failed starts: %q", got)
	}
}

// TestExecOrphansReaped checks that processes left behind by a command are
// reaped when they exit, including after the sandbox had no process at
// all, and that commands started afterwards still report their exits.
func TestExecOrphansReaped(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	sb := newSandbox(t, airlock.Config{})
	for i := range 3 {
		// A double fork leaves "sleep" reparented to the sandbox's init.
		res, err := sb.Run(ctx, airlock.Command{Shell: "(sleep 0.2 &) ; exit 3"})
		if err != nil || res.ExitCode != 3 {
			t.Fatalf("round %d: run = %+v, %v; want exit 3", i, res, err)
		}
		time.Sleep(400 * time.Millisecond)
		// Zombies show state Z in /proc/PID/stat; the orphan must be gone.
		res, err = sb.Run(ctx, airlock.Command{Shell: `for f in /proc/[0-9]*/stat; do read -r line < "$f" 2>/dev/null && echo "$line"; done`})
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.SplitSeq(strings.TrimSpace(string(res.Stdout)), "\n") {
			j := strings.LastIndexByte(line, ')')
			if j < 0 || j+2 >= len(line) {
				continue
			}
			if state := line[j+2]; state == 'Z' || strings.Contains(line, "(sleep)") {
				t.Errorf("round %d: process left behind: %s", i, line)
			}
		}
	}
}

// TestExecLaunch checks the Run-like start: signals reach the command
// before Wait collects it, and a failure to start comes from Wait.
func TestExecLaunch(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	sb := newSandbox(t, airlock.Config{})
	p, err := sb.Launch(ctx, airlock.Command{Shell: "trap 'echo got TERM; exit 7' TERM; echo ready; while :; do sleep 0.05; done"})
	if err != nil {
		t.Fatal(err)
	}
	// Wait for the trap to be set, through the file system.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if res := run(t, ctx, sb, "ps -eo args | grep -c '[w]hile'"); strings.TrimSpace(string(res.Stdout)) != "0" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the launched command did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	res, err := p.Wait()
	if err != nil || res.ExitCode != 7 || string(res.Stdout) != "ready\ngot TERM\n" {
		t.Errorf("Wait = %+v (stdout %q), %v", res, res.Stdout, err)
	}
	p, err = sb.Launch(ctx, airlock.Command{Argv: []string{"airlock-no-such-command"}})
	if err != nil {
		t.Fatal(err)
	}
	var se *airlock.StartError
	if _, err := p.Wait(); !errors.As(err, &se) || !se.NotFound {
		t.Errorf("Wait of a missing command: %v", err)
	}
}

// TestExecDiscardOutput: a command started with DiscardOutput writes to
// /dev/null itself, at every level that works here, and nothing of its
// output comes back; with a TTY it is refused.
func TestExecDiscardOutput(t *testing.T) {
	t.Parallel()
	for _, lv := range []airlock.Isolation{airlock.IsolationProcess, airlock.IsolationGVisor, airlock.IsolationVM} {
		t.Run(string(lv), func(t *testing.T) {
			ctx := testCtx(t, 3*time.Minute)
			sb, err := airlock.Create(ctx, airlock.Config{Isolation: lv})
			if errors.Is(err, airlock.ErrUnavailable) {
				t.Skip(err)
			}
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { sb.Close() })
			p, err := sb.Start(ctx, airlock.Command{
				Shell:         `readlink /proc/$$/fd/1 /proc/$$/fd/2 | cat > /tmp/fds; echo out; echo err >&2; seq 100000`,
				DiscardOutput: true,
			})
			if err != nil {
				t.Fatal(err)
			}
			res, err := p.Wait()
			if err != nil || res.ExitCode != 0 || len(res.Stdout)+len(res.Stderr) != 0 {
				t.Fatalf("Wait: %v %+v (stdout %q, stderr %q)", err, res, res.Stdout, res.Stderr)
			}
			if b, err := sb.ReadFile(ctx, "/tmp/fds"); err != nil || string(b) != "/dev/null\n/dev/null\n" {
				t.Errorf("the command's stdout and stderr: %q, %v", b, err)
			}
			if _, err := sb.Start(ctx, airlock.Command{Shell: "true", DiscardOutput: true, TTY: true}); err == nil {
				t.Error("DiscardOutput with a TTY was accepted")
			}
		})
	}
}
