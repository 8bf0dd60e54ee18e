package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testbin"
	"github.com/creack/pty"
)

// cliBin is the airlock binary under test; airlock-guest sits next to it.
var cliBin string

func TestMain(m *testing.M) {
	if spec := os.Getenv(rusageArgsEnv); spec != "" {
		os.Exit(rusageMain(spec))
	}
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := testbin.Dir("airlock-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "TestMain:", err)
		return 2
	}
	defer os.RemoveAll(dir)
	bins, err := testbin.Build(dir, "airlock", "airlock-guest")
	if err != nil {
		fmt.Fprintln(os.Stderr, "TestMain:", err)
		return 2
	}
	cliBin = bins[0]
	home, err := testbin.Dir("airlock-cli-home-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "TestMain:", err)
		return 2
	}
	defer os.RemoveAll(home)
	os.Setenv("AIRLOCK_HOME", home)
	// The CLI must find airlock-guest next to itself.
	os.Unsetenv("AIRLOCK_AGENT")
	return m.Run()
}

type cliResult struct {
	stdout, stderr string
	code           int
}

// runCLI runs the CLI with args and stdin, bounded in time.
func runCLI(t *testing.T, stdin io.Reader, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, cliBin, args...)
	cmd.Stdin = stdin
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("airlock %q did not finish in time; stderr: %s", args, errb.String())
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("airlock %q: %v", args, err)
	}
	return cliResult{out.String(), errb.String(), code}
}

func TestRunStreamsAndExitCode(t *testing.T) {
	t.Parallel()
	r := runCLI(t, nil, "run", "--", "sh", "-c", "echo out; echo err >&2; exit 3")
	if r.stdout != "out\n" {
		t.Errorf("stdout %q, want %q", r.stdout, "out\n")
	}
	if !strings.Contains(r.stderr, "err") {
		t.Errorf("stderr %q, want it to contain err", r.stderr)
	}
	if r.code != 3 {
		t.Errorf("exit code %d, want 3", r.code)
	}
	if r := runCLI(t, nil, "run", "--", "true"); r.code != 0 || r.stdout != "" {
		t.Errorf("true: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	// A command killed by a signal: 128+N.
	if r := runCLI(t, nil, "run", "--", "sh", "-c", "kill -TERM $$"); r.code != 128+15 {
		t.Errorf("self-killed with SIGTERM: exit %d, want 143", r.code)
	}
}

func TestRunStdin(t *testing.T) {
	t.Parallel()
	r := runCLI(t, strings.NewReader("abc\n"), "run", "--", "cat")
	if r.stdout != "abc\n" || r.code != 0 {
		t.Errorf("echo abc | airlock run -- cat: stdout %q exit %d stderr %q", r.stdout, r.code, r.stderr)
	}
	big := strings.Repeat("0123456789", 100000)
	r = runCLI(t, strings.NewReader(big), "run", "--", "wc", "-c")
	if strings.TrimSpace(r.stdout) != fmt.Sprint(len(big)) {
		t.Errorf("wc -c of %d bytes: %q", len(big), r.stdout)
	}
}

func TestRunFlags(t *testing.T) {
	t.Parallel()
	r := runCLI(t, nil, "run", "-e", "FOO=bar baz", "-w", "/tmp", "--hostname", "clihost", "--", "sh", "-c", "echo $FOO; pwd; hostname")
	if r.stdout != "bar baz\n/tmp\nclihost\n" || r.code != 0 {
		t.Errorf("flags: stdout %q exit %d stderr %q", r.stdout, r.code, r.stderr)
	}
	if r := runCLI(t, nil, "run", "--nofile-limit", "64", "--", "sh", "-c", "ulimit -n"); strings.TrimSpace(r.stdout) != "64" {
		t.Errorf("--nofile-limit 64: %q %q", r.stdout, r.stderr)
	}
	if r := runCLI(t, nil, "run", "--memory", "banana", "--", "true"); r.code != 125 || !strings.Contains(r.stderr, "--memory") {
		t.Errorf("bad --memory: exit %d stderr %q, want 125 naming the flag", r.code, r.stderr)
	}
	if r := runCLI(t, nil, "run", "--isolation", "banana", "--", "true"); r.code != 125 || !strings.Contains(r.stderr, "banana") {
		t.Errorf("--isolation banana: exit %d stderr %q, want 125 naming it", r.code, r.stderr)
	}
}

func TestRunJSON(t *testing.T) {
	t.Parallel()
	r := runCLI(t, nil, "run", "--json", "--", "sh", "-c", "echo out; echo err >&2; exit 3")
	var m map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
		t.Fatalf("--json output does not parse: %v\n%s", err, r.stdout)
	}
	for _, k := range []string{"exit_code", "stdout", "stderr", "duration_ms", "cpu_time_ms", "peak_memory_bytes", "killed_by", "signal"} {
		if _, ok := m[k]; !ok {
			t.Errorf("--json output lacks %q: %s", k, r.stdout)
		}
	}
	if m["exit_code"] != float64(3) {
		t.Errorf("exit_code = %v, want 3", m["exit_code"])
	}
	if m["stdout"] != "out\n" || m["stderr"] != "err\n" {
		t.Errorf("stdout %q stderr %q", m["stdout"], m["stderr"])
	}
	if m["killed_by"] != nil || m["signal"] != nil {
		t.Errorf("killed_by %v signal %v, want null for a normal exit", m["killed_by"], m["signal"])
	}
	for _, k := range []string{"duration_ms", "cpu_time_ms", "peak_memory_bytes"} {
		if v, ok := m[k].(float64); !ok || v < 0 {
			t.Errorf("%s = %v, want a number >= 0", k, m[k])
		}
	}
	if v, _ := m["peak_memory_bytes"].(float64); v <= 0 {
		t.Errorf("peak_memory_bytes = %v, want > 0", m["peak_memory_bytes"])
	}
	if id, _ := m["sandbox_id"].(string); id == "" {
		t.Errorf("sandbox_id missing: %s", r.stdout)
	}
	// Nothing but the JSON document on stdout.
	if strings.Count(strings.TrimSpace(r.stdout), "\n") != 0 {
		t.Errorf("--json printed more than one line:\n%s", r.stdout)
	}
	// Binary output is base64 encoded, not mangled.
	r = runCLI(t, nil, "run", "--json", "--", "sh", "-c", "printf '\\377\\000\\001'")
	if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
		t.Fatal(err)
	}
	if m["stdout"] != "/wAB" || m["stdout_encoding"] != "base64" {
		t.Errorf("binary stdout: %v (%v), want /wAB base64", m["stdout"], m["stdout_encoding"])
	}
}

func TestRunTimeout(t *testing.T) {
	t.Parallel()
	start := time.Now()
	r := runCLI(t, nil, "run", "--timeout", "1s", "--", "sleep", "10")
	if r.code != 124 {
		t.Errorf("--timeout 1s -- sleep 10: exit %d, want 124 (stderr %q)", r.code, r.stderr)
	}
	if el := time.Since(start); el > 9*time.Second {
		t.Errorf("the timeout did not cut sleep 10 short (%v)", el)
	}
	r = runCLI(t, nil, "run", "--json", "--timeout", "1s", "--", "sleep", "10")
	var m map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
		t.Fatalf("--json: %v\n%s", err, r.stdout)
	}
	if m["killed_by"] != "timeout" {
		t.Errorf("killed_by = %v, want timeout", m["killed_by"])
	}
	if m["signal"] != float64(9) {
		t.Errorf("signal = %v, want 9", m["signal"])
	}
}

func TestRunNotFound(t *testing.T) {
	t.Parallel()
	r := runCLI(t, nil, "run", "--", "airlock-nosuch-command")
	if r.code != 127 {
		t.Errorf("exit %d, want 127 (stderr %q)", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, "airlock-nosuch-command") {
		t.Errorf("stderr %q does not name the command", r.stderr)
	}
	r = runCLI(t, nil, "run", "--json", "--", "airlock-nosuch-command")
	var m map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
		t.Fatalf("--json: %v\n%s", err, r.stdout)
	}
	if m["exit_code"] != float64(127) {
		t.Errorf("--json exit_code = %v, want 127", m["exit_code"])
	}
	if strings.Contains(r.stdout+r.stderr, "--image") {
		t.Errorf("a program that is no image name got an image hint: %s%s", r.stdout, r.stderr)
	}
}

// TestRunImageAsCommand runs an image's name where the command goes, as
// `docker run IMAGE COMMAND` would: the error says how to name an image,
// in each way run can end.
func TestRunImageAsCommand(t *testing.T) {
	t.Parallel()
	const want = "if python:3.12-slim is an image, name it with --image: airlock run --image python:3.12-slim -- python3 -c 'print(1)'"
	r := runCLI(t, nil, "run", "python:3.12-slim", "python3", "-c", "print(1)")
	if r.code != 127 || !strings.Contains(r.stderr, want) {
		t.Errorf("exit %d, stderr %q; want 127 and %q", r.code, r.stderr, want)
	}
	r = runCLI(t, nil, "run", "--json", "python:3.12-slim", "python3", "-c", "print(1)")
	var m struct {
		ExitCode int    `json:"exit_code"`
		Stderr   string `json:"stderr"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &m); err != nil || m.ExitCode != 127 || !strings.Contains(m.Stderr, want) {
		t.Errorf("--json: %v, %s", err, r.stdout)
	}
	r = runCLI(t, nil, "run", "--rm", "alpine", "echo", "hi")
	if r.code != 127 || !strings.Contains(r.stderr, "if alpine is an image, name it with --image: airlock run --image alpine -- echo hi") {
		t.Errorf("a bare image name: exit %d, stderr %q", r.code, r.stderr)
	}
	r = runCLI(t, nil, "run", "-d", "minimal")
	if r.code != 127 || !strings.Contains(r.stderr, "if minimal is an image, name it with --image: airlock run --image minimal") {
		t.Errorf("run -d: exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestLooksLikeImage(t *testing.T) {
	for name, want := range map[string]bool{
		"host": true, "minimal": true, "full": true, "python:3.12-slim": true,
		"ghcr.io/org/app@sha256:0123": true, "localhost:5000/app": true,
		"alpine": true, "ubuntu": true, "python3": false, "./run:me": false, "/opt/a:b": false, "ls": false, "a b:c": false,
	} {
		if got := looksLikeImage(name); got != want {
			t.Errorf("looksLikeImage(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	r := runCLI(t, nil, "version")
	if r.code != 0 || !regexp.MustCompile(`^airlock \S+ \(commit \S+, go\S+, linux/\w+, agent protocol \d+\)\n$`).MatchString(r.stdout) {
		t.Errorf("version: exit %d %q", r.code, r.stdout)
	}
	r = runCLI(t, nil, "version", "--json")
	var v struct {
		Version  string `json:"version"`
		Go       string `json:"go"`
		Platform string `json:"platform"`
		Protocol int    `json:"agent_protocol"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatalf("version --json: %v\n%s", err, r.stdout)
	}
	if v.Version == "" || !strings.HasPrefix(v.Go, "go") || v.Platform != "linux/"+goarch() || v.Protocol <= 0 {
		t.Errorf("version --json = %+v", v)
	}
}

func goarch() string {
	out, err := exec.Command("go", "env", "GOARCH").Output()
	if err != nil {
		return "amd64"
	}
	return strings.TrimSpace(string(out))
}

func TestRunTTY(t *testing.T) {
	t.Parallel()
	checkTTYSession(t, exec.Command(cliBin, "run", "-it", "--", "sh", "-c", "tty; stty size"))
}

// checkTTYSession runs cmd, which must print `tty; stty size` from inside
// a sandbox, on a terminal of 30x90, and checks that the command saw a
// terminal of that size.
func checkTTYSession(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 30, Cols: 90})
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	var out bytes.Buffer
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			mu.Lock()
			out.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err := <-waited:
		if err != nil {
			t.Errorf("airlock %q: %v", cmd.Args[1:], err)
		}
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("airlock %q did not finish", cmd.Args[1:])
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
	mu.Lock()
	s := strings.ReplaceAll(out.String(), "\r\n", "\n")
	mu.Unlock()
	if !regexp.MustCompile(`/dev/pts/\d+`).MatchString(s) {
		t.Errorf("output %q shows no /dev/pts terminal", s)
	}
	if !strings.Contains(s, "30 90") {
		t.Errorf("output %q, want the terminal size 30 90", s)
	}
}

// Signals reach the command; a command that ignores SIGINT is killed by
// the third Ctrl-C, so the user is never stuck.
func TestRunInterruptEscalates(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, cliBin, "run", "--", "sh", "-c", `trap "echo got-int" INT; echo ready; while :; do sleep 0.1; done`)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(out)
	if line, _ := r.ReadString('\n'); line != "ready\n" {
		t.Fatalf("first line %q; stderr %s", line, errb.String())
	}
	for i := 0; i < 3; i++ {
		if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		if i < 2 {
			if line, _ := r.ReadString('\n'); line != "got-int\n" {
				t.Fatalf("interrupt %d: command printed %q, want got-int", i+1, line)
			}
		}
	}
	_, _ = io.Copy(io.Discard, r)
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 137 {
		t.Fatalf("after three interrupts: %v, want exit 137; stderr %s", err, errb.String())
	}
	if !strings.Contains(errb.String(), "third interrupt") {
		t.Errorf("stderr does not say why: %s", errb.String())
	}
}

// TestOneBinary: airlock alone, with no airlock-guest beside it, on
// PATH or in $AIRLOCK_AGENT, serves as its own agent.
func TestOneBinary(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	solo := filepath.Join(dir, "airlock")
	data, err := os.ReadFile(cliBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(solo, data, 0o755); err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AIRLOCK_AGENT=") && !strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	env = append(env, "PATH=/usr/bin:/bin")
	var out []byte
	for try := 0; ; try++ {
		cmd := exec.Command(solo, "run", "--", "sh", "-c", "echo alone")
		cmd.Env = env
		out, err = cmd.CombinedOutput()
		// A parallel test's fork may still hold the descriptor that
		// wrote the binary (go.dev/issue/22315) until its exec.
		if !errors.Is(err, syscall.ETXTBSY) || try == 20 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil || string(out) != "alone\n" {
		t.Errorf("airlock alone: %v: %q", err, out)
	}
}

// TestRunDockerHabits: -it without a terminal on stdin is refused at
// once, as docker refuses it; --env-file reads docker's format, and -e
// wins over it.
func TestRunDockerHabits(t *testing.T) {
	t.Parallel()
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	for _, cmd := range [][]string{{"run", "-it", "--", "true"}, {"exec", "-it", "sb-000000000000", "--", "true"}} {
		start := time.Now()
		r := runCLI(t, devNull, cmd...)
		if r.code == 0 || !strings.Contains(r.stderr, "the input device is not a TTY") {
			t.Errorf("airlock %q with stdin from /dev/null: exit %d, stderr %q", cmd, r.code, r.stderr)
		}
		if d := time.Since(start); d > 20*time.Second {
			t.Errorf("airlock %q took %s to refuse", cmd, d)
		}
	}
	env := filepath.Join(t.TempDir(), "env")
	if err := os.WriteFile(env, []byte("# a comment\n\nA=one two\nB=from-file\n  C=3=three\nHOME_COPY\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(cliBin, "run", "--env-file", env, "-e", "B=from-flag", "--", "sh", "-c", `echo "$A|$B|$C|$HOME_COPY"`)
	cmd.Env = append(os.Environ(), "HOME_COPY=copied")
	out, err := cmd.Output()
	if err != nil || string(out) != "one two|from-flag|3=three|copied\n" {
		t.Errorf("--env-file: %q %v", out, err)
	}
	// --network none is the default; a docker network is refused, saying
	// how a sandbox gets one.
	if r := runCLI(t, nil, "run", "--network", "none", "--", "sed", "-n", `s/^ *\([^:]*\):.*/\1/p`, "/proc/net/dev"); r.code != 0 || r.stdout != "lo\n" {
		t.Errorf("--network none: exit %d, stdout %q, stderr %q: want no interface but lo", r.code, r.stdout, r.stderr)
	}
	for _, args := range [][]string{{"--network", "host"}, {"--network", "none", "--allow-host", "example.com"}} {
		if r := runCLI(t, nil, append(append([]string{"run"}, args...), "--", "true")...); r.code != 125 || !strings.Contains(r.stderr, "--network") || !strings.Contains(r.stderr, "--allow-host") {
			t.Errorf("run %q: exit %d, stderr %q", args, r.code, r.stderr)
		}
	}
	bad := filepath.Join(t.TempDir(), "bad")
	os.WriteFile(bad, []byte("NOT A VAR=1\n"), 0o644)
	if r := runCLI(t, nil, "run", "--env-file", bad, "--", "true"); r.code == 0 || !strings.Contains(r.stderr, "line 1") {
		t.Errorf("a bad --env-file: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := runCLI(t, nil, "run", "--env-file", "/nonexistent/env", "--", "true"); r.code == 0 || !strings.Contains(r.stderr, "--env-file") {
		t.Errorf("a missing --env-file: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestRunTmpfs: docker's --tmpfs and --mount type=tmpfs,tmpfs-size are
// memory mounts of the size asked (docker's sizes are bytes unless a
// unit says otherwise); options a memory mount cannot honour are
// refused, never dropped.
func TestRunTmpfs(t *testing.T) {
	t.Parallel()
	r := runCLI(t, nil, "run", "--tmpfs", "/scratch:rw,size=8m,nosuid", "--tmpfs", "/ro:ro", "--mount", "type=tmpfs,destination=/big,tmpfs-size=16777216", "--",
		"sh", "-c", "echo x > /scratch/f && cat /scratch/f && stat -f -c '%b %S' /scratch /big && ! touch /ro/f 2>/dev/null && echo ro")
	if r.code != 0 {
		t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 4 || lines[0] != "x" || lines[3] != "ro" {
		t.Fatalf("stdout %q", r.stdout)
	}
	for i, want := range []int64{8 << 20, 16 << 20} {
		var blocks, size int64
		if _, err := fmt.Sscanf(lines[1+i], "%d %d", &blocks, &size); err != nil || blocks*size != want {
			t.Errorf("mount %d: stat -f %q, want %d bytes", i, lines[1+i], want)
		}
	}
	for _, c := range []struct{ flag, want string }{
		{"/x:noexec", "noexec is not supported"},
		{"/x:size=1000", "at least 1m"},
		{"/x:bogus", `unknown option "bogus"`},
		{":size=1m", "sandbox path is missing"},
	} {
		if r := runCLI(t, nil, "run", "--tmpfs", c.flag, "--", "true"); r.code != 125 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("--tmpfs %s: exit %d, stderr %q, want %q", c.flag, r.code, r.stderr, c.want)
		}
	}
}
