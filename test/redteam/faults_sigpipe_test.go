package redteam_test

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock"
)

// A closed output is a client gone. The CLI that owns a sandbox (run, and
// the rpc server) tears it down in order, leaving no process or cgroup,
// records it stopped rather than crashed, and exits as a process killed
// by SIGPIPE would (141): it is never itself killed by SIGPIPE. A CLI
// reaching a sandbox through its control socket (exec, attach, logs)
// stops its request and leaves the sandbox running.

// TestFaultRunOutputClosed is `airlock run -- yes | head -1`, with the
// output lost on stdout, then on stderr.
func TestFaultRunOutputClosed(t *testing.T) {
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		for _, stream := range []string{"stdout", "stderr"} {
			t.Run(stream, func(t *testing.T) {
				// The sandbox's hostname is its id.
				script := "hostname; exec yes"
				if stream == "stderr" {
					script = "hostname; exec yes >&2"
				}
				cmd := exec.Command(bins.cli, "run", "--isolation", string(lv), "--", "sh", "-c", script)
				out, err := cmd.StdoutPipe()
				if err != nil {
					t.Fatal(err)
				}
				errR, errW, err := os.Pipe()
				if err != nil {
					t.Fatal(err)
				}
				cmd.Stderr = errW
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				errW.Close()
				if stream == "stderr" {
					errR.Close() // nobody reads stderr
				} else {
					go io.Copy(io.Discard, errR)
				}
				id, err := bufio.NewReader(out).ReadString('\n')
				if err != nil {
					t.Fatalf("read the sandbox id: %v", err)
				}
				id = strings.TrimSpace(id)
				if stream == "stdout" {
					out.Close() // head -1 exits
				} else {
					go io.Copy(io.Discard, out)
				}
				if got := waitExit(t, cmd); got != "exit 141" {
					t.Errorf("airlock run whose %s closed ended with %s, want exit 141 (not killed by SIGPIPE)", stream, got)
				}
				if left := leftBehind(id); len(left) > 0 {
					t.Errorf("sandbox %s left behind: %v", id, left)
				}
				if r := getRecord(t, id); r != nil && r.Status != "stopped" {
					t.Errorf("sandbox %s recorded as %+v", id, r)
				}
			})
		}
	})
}

// TestFaultRPCOutputClosed closes the stdout of `airlock rpc` after create:
// the server notices at its next write, closes the session's sandbox in
// order and exits.
func TestFaultRPCOutputClosed(t *testing.T) {
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		s := startRPC(t, nil)
		id := s.create(1, string(lv))
		if r := getRecord(t, id); r == nil || r.Status != "running" {
			t.Fatalf("sandbox %s recorded as %+v", id, r)
		}
		s.out.Close()
		s.send(2, "exec", map[string]any{"command": "echo hello"})
		if got := waitExit(t, s.cmd); got != "exit 141" {
			t.Errorf("airlock rpc whose stdout closed ended with %s, want exit 141 (not killed by SIGPIPE)", got)
		}
		if left := leftBehind(id); len(left) > 0 {
			t.Errorf("sandbox %s left behind: %v", id, left)
		}
		if r := getRecord(t, id); r == nil || r.Status != "stopped" {
			t.Errorf("sandbox %s recorded as %+v, want stopped", id, r)
		}
	})
}

// TestFaultRPCStderrClosed closes the stderr of `airlock rpc`, where its
// diagnostics go: the session goes on, and ends in order with its input.
func TestFaultRPCStderrClosed(t *testing.T) {
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		errR, errW, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		// At debug level every request writes a diagnostic line.
		s := startRPC(t, errW, "--log-level", "debug")
		errW.Close()
		errR.Close()
		id := s.create(1, string(lv))
		s.send(2, "exec", map[string]any{"command": "echo hello"})
		res, stdout, _ := s.decodeExec(s.response(2))
		if res.ExitCode != 0 || string(stdout) != "hello\n" {
			t.Errorf("exec with stderr closed: %+v %q", res, stdout)
		}
		s.in.Close()
		if got := waitExit(t, s.cmd); got != "exit 0" {
			t.Errorf("airlock rpc whose stderr closed ended with %s at the end of its input, want exit 0", got)
		}
		if left := leftBehind(id); len(left) > 0 {
			t.Errorf("sandbox %s left behind: %v", id, left)
		}
		if r := getRecord(t, id); r == nil || r.Status != "stopped" {
			t.Errorf("sandbox %s recorded as %+v, want stopped", id, r)
		}
	})
}

// TestFaultControlOutputClosed closes the output of the commands that reach
// a detached sandbox through its control socket: exec stops its command,
// attach detaches, logs -f stops; each exits 141 and the sandbox runs on.
func TestFaultControlOutputClosed(t *testing.T) {
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		out, errOut, code := cli(t, "run", "-d", "--isolation", string(lv), "--", "sh", "-c", "while :; do echo tick; sleep 0.05; done")
		if code != 0 {
			t.Fatalf("run -d: exit %d: %s", code, errOut)
		}
		id := strings.TrimSpace(out)
		t.Cleanup(func() { cli(t, "rm", "-f", id) })
		for _, args := range [][]string{
			{"exec", id, "--", "sh", "-c", "echo $$ > /tmp/exec.pid; exec yes"},
			{"attach", "--no-stdin", id},
			{"logs", "-f", id},
		} {
			t.Run(args[0], func(t *testing.T) {
				cmd := exec.Command(bins.cli, args...)
				stdout, err := cmd.StdoutPipe()
				if err != nil {
					t.Fatal(err)
				}
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				if _, err := bufio.NewReader(stdout).ReadString('\n'); err != nil {
					t.Fatalf("first line of output: %v", err)
				}
				stdout.Close()
				if got := waitExit(t, cmd); got != "exit 141" {
					t.Errorf("airlock %s whose stdout closed ended with %s, want exit 141", args[0], got)
				}
			})
		}
		if r := getRecord(t, id); r == nil || r.Status != "running" {
			t.Fatalf("sandbox %s after its clients went: %+v, want running", id, r)
		}
		// The exec whose client went was stopped: its command goes.
		out, errOut, code = cli(t, "exec", id, "--", "sh", "-c",
			`for i in $(seq 1200); do kill -0 "$(cat /tmp/exec.pid)" 2>/dev/null || { echo gone; exit; }; sleep 0.1; done; echo alive`)
		if code != 0 || strings.TrimSpace(out) != "gone" {
			t.Errorf("the command of an exec whose client went: %q (exit %d, %s), want gone", out, code, errOut)
		}
	})
}
