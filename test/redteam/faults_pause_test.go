package redteam_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
)

// A slow peer is not a dead one. A supervisor or an agent that is stopped
// (SIGSTOP, a swapped-out or throttled host) and then continues finds every
// request as it left it: a command that finished meanwhile has its whole
// output and its result, a command killed meanwhile says so, and the
// sandbox goes on.

// pause is how long a process is stopped: longer than any timer airlock
// ever had on the channel to its agent.
const pause = 10 * time.Second

// finishesDuringPause prints a line, and ends while the test has its
// supervisor stopped.
const finishesDuringPause = "echo started; sleep 3; echo done"

// fillProgram prints a line, then writes to its stdout without blocking
// until every buffer between it and a supervisor that has stopped reading
// is full (no write goes through for a second), and exits: what it wrote
// is then in its pipe, not yet read, and must all arrive. It reports on
// stderr how many bytes it wrote after the line.
const fillProgram = `
import fcntl, os, sys, time
print("started", flush=True)
fcntl.fcntl(1, fcntl.F_SETFL, fcntl.fcntl(1, fcntl.F_GETFL) | os.O_NONBLOCK)
total, idle, chunk = 0, 0, b"x" * 65536
while idle < 50 and total < 64 << 20:
    try:
        total += os.write(1, chunk)
        idle = 0
    except BlockingIOError:
        idle += 1
        time.sleep(0.02)
sys.stderr.write(str(total))
`

// checkFilled checks the output of fillProgram.
func checkFilled(t *testing.T, via string, stdout []byte, stderr string) {
	t.Helper()
	n, err := strconv.Atoi(strings.TrimSpace(stderr))
	if err != nil {
		t.Fatalf("%s: the filling command reported %q", via, stderr)
	}
	if want := len("started\n") + n; len(stdout) != want || bytes.Count(stdout, []byte("x")) != n {
		t.Errorf("%s: %d bytes of output arrived, want %d", via, len(stdout), want)
	}
}

// TestFaultSupervisorPausedRPC stops `airlock rpc` while a command
// finishes, then while one fills its output and exits.
func TestFaultSupervisorPausedRPC(t *testing.T) {
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		s := startRPC(t, nil)
		s.create(1, string(lv))
		res, stdout, stderr := s.pausedExec(2, map[string]any{"command": finishesDuringPause})
		if res.ExitCode != 0 || string(stdout) != "started\ndone\n" {
			t.Errorf("the command that finished during the pause: exit %d, output %q, %s", res.ExitCode, stdout, stderr)
		}
		res, stdout, stderr = s.pausedExec(3, map[string]any{"argv": []string{"python3", "-c", fillProgram}})
		if res.ExitCode != 0 {
			t.Errorf("the filling command: exit %d: %s", res.ExitCode, stderr)
		} else {
			checkFilled(t, "airlock rpc", stdout, string(stderr))
		}
		s.send(4, "exec", map[string]any{"command": "echo after"})
		if res, out, _ := s.decodeExec(s.response(4)); res.ExitCode != 0 || string(out) != "after\n" {
			t.Errorf("exec after the pause: %+v %q", res, out)
		}
	})
}

// pausedExec runs exec_stream with params, stops the server for pause
// once the command has printed "started", and returns the result and the
// whole output.
func (s *rpcSession) pausedExec(id int, params map[string]any) (res execResult, stdout, stderr []byte) {
	s.t.Helper()
	params["mode"] = "notifications"
	s.send(id, "exec_stream", params)
	want := strconv.Itoa(id)
	paused := false
	for {
		m := s.next()
		switch {
		case m.Method == "exec.output":
			var chunk struct {
				ID     json.RawMessage `json:"id"`
				Stdout string          `json:"stdout"`
				Stderr string          `json:"stderr"`
			}
			if err := json.Unmarshal(m.Params, &chunk); err != nil {
				s.t.Fatal(err)
			}
			if string(chunk.ID) != want {
				continue
			}
			out, _ := base64.StdEncoding.DecodeString(chunk.Stdout)
			errb, _ := base64.StdEncoding.DecodeString(chunk.Stderr)
			stdout, stderr = append(stdout, out...), append(stderr, errb...)
			if !paused && bytes.HasPrefix(stdout, []byte("started\n")) {
				paused = true
				stopFor(s.t, s.cmd.Process.Pid, pause)
			}
		case m.Method == "" && string(m.ID) == want:
			res, _, _ = s.decodeExec(m)
			return res, stdout, stderr
		}
	}
}

// TestFaultSupervisorPausedDetached stops the supervisor of a detached
// sandbox while a command run through its control socket finishes, then
// while one fills its output and exits.
func TestFaultSupervisorPausedDetached(t *testing.T) {
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		out, errOut, code := cli(t, "run", "-d", "--isolation", string(lv))
		if code != 0 {
			t.Fatalf("run -d: exit %d: %s", code, errOut)
		}
		id := strings.TrimSpace(out)
		t.Cleanup(func() { cli(t, "rm", "-f", id) })
		sup := getRecord(t, id).Supervisor.PID

		type running struct {
			cmd    *exec.Cmd
			stdout *bufio.Reader
			stderr bytes.Buffer
		}
		start := func(args ...string) *running {
			r := &running{cmd: exec.Command(bins.cli, append([]string{"exec", id, "--"}, args...)...)}
			r.cmd.Stderr = &r.stderr
			pipe, err := r.cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := r.cmd.Start(); err != nil {
				t.Fatal(err)
			}
			r.stdout = bufio.NewReader(pipe)
			if line, err := r.stdout.ReadString('\n'); line != "started\n" {
				t.Fatalf("exec %q: first line %q, %v", args, line, err)
			}
			return r
		}
		short := start("sh", "-c", finishesDuringPause)
		stopFor(t, sup, pause)
		rest, _ := io.ReadAll(short.stdout)
		if got := waitExit(t, short.cmd); got != "exit 0" || string(rest) != "done\n" {
			t.Errorf("the command that finished during the pause: %s, rest of output %q; %s", got, rest, short.stderr.String())
		}

		fill := start("python3", "-c", fillProgram)
		stopFor(t, sup, pause)
		filled, _ := io.ReadAll(fill.stdout)
		if got := waitExit(t, fill.cmd); got != "exit 0" {
			t.Errorf("the filling command: %s: %s", got, fill.stderr.String())
		} else {
			checkFilled(t, "airlock exec", append([]byte("started\n"), filled...), fill.stderr.String())
		}
		if out, errOut, code := cli(t, "exec", id, "--", "echo", "after"); code != 0 || out != "after\n" {
			t.Errorf("exec after the pause: exit %d, %q, %s", code, out, errOut)
		}
	})
}

// TestFaultAgentPaused stops the sandbox's agent while the host kills one
// command, another ends, and a new one is asked for.
func TestFaultAgentPaused(t *testing.T) {
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		sb := box(t, lv, airlock.Config{})
		ctx, cancel := context.WithTimeout(context.Background(), hang)
		defer cancel()
		killed, err := sb.Start(ctx, airlock.Command{Shell: "sleep 300"})
		if err != nil {
			t.Fatal(err)
		}
		ends, err := sb.Start(ctx, airlock.Command{Shell: "sleep 2; echo done"})
		if err != nil {
			t.Fatal(err)
		}
		type outcome struct {
			res *airlock.ExecResult
			err error
		}
		cont := stopProcess(t, sb.PID())
		if err := killed.Kill(); err != nil {
			t.Errorf("kill while the agent is stopped: %v", err)
		}
		asked := make(chan outcome, 1)
		go func() {
			res, err := sb.Exec(ctx, "echo asked")
			asked <- outcome{res, err}
		}()
		time.Sleep(pause)
		cont()

		if res, err := killed.Wait(); err != nil || res.KilledBy != airlock.KilledBySignal {
			t.Errorf("the command killed while the agent was stopped: %+v, %v, want killed by signal", res, err)
		}
		if res, err := ends.Wait(); err != nil || res.ExitCode != 0 || string(res.Stdout) != "done\n" {
			t.Errorf("the command that ended while the agent was stopped: %+v, %v", res, err)
		}
		if o := <-asked; o.err != nil || string(o.res.Stdout) != "asked\n" {
			t.Errorf("the command asked for while the agent was stopped: %+v, %v", o.res, o.err)
		}
		if err := sb.Err(); err != nil {
			t.Errorf("the sandbox stopped: %v", err)
		}
		if out := ok(t, sb, "echo after"); out != "after\n" {
			t.Errorf("exec after the pause: %q", out)
		}
	})
}
