package redteam_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// What the fault tests share: the airlock CLI run as a user runs it
// (bins.cli, with the AIRLOCK_HOME and AIRLOCK_AGENT that TestMain set),
// a JSON-RPC session with `airlock rpc`, and what a sandbox leaves on the
// host.

// hang bounds a wait that only a defect makes long: it is not a measure
// of how fast anything is.
const hang = 2 * time.Minute

// cli runs the airlock CLI to its end and returns its stdout, stderr and
// exit code.
func cli(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	cmd := exec.CommandContext(ctx, bins.cli, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("airlock %q did not end; stderr: %s", args, e.String())
	}
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		return o.String(), e.String(), ee.ExitCode()
	} else if err != nil {
		t.Fatalf("airlock %q: %v", args, err)
	}
	return o.String(), e.String(), 0
}

// record is what `airlock get` says of a sandbox.
type record struct {
	ID         string `json:"id"`
	Status     string `json:"status"`
	Reason     string `json:"reason"`
	Supervisor struct {
		PID int `json:"pid"`
	} `json:"supervisor"`
}

// getRecord returns the record of sandbox id, or nil when there is none.
func getRecord(t *testing.T, id string) *record {
	t.Helper()
	out, errOut, code := cli(t, "get", id)
	if code != 0 {
		if strings.Contains(errOut, "no sandbox matches") {
			return nil
		}
		t.Fatalf("airlock get %s: exit %d: %s", id, code, errOut)
	}
	var r record
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("airlock get %s: %v\n%s", id, err, out)
	}
	return &r
}

// waitRecord waits until sandbox id's record leaves status "running" and
// returns it.
func waitRecord(t *testing.T, id string) *record {
	t.Helper()
	deadline := time.Now().Add(hang)
	for {
		r := getRecord(t, id)
		if r == nil {
			t.Fatalf("sandbox %s has no record", id)
		}
		if r.Status != "running" {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s still running: %+v", id, r)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// leftBehind lists what sandbox id still has on the host: its cgroups and
// the processes in them. Whoever tore the sandbox down has removed them
// before it returned (or exited), so this does not wait.
func leftBehind(id string) []string {
	var left []string
	for _, pattern := range []string{"/sys/fs/cgroup/*/airlock/" + id, "/sys/fs/cgroup/airlock/" + id} {
		m, _ := filepath.Glob(pattern)
		left = append(left, m...)
	}
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		if _, err := strconv.Atoi(d.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cgroup"))
		if err == nil && strings.Contains(string(b), "/airlock/"+id) {
			left = append(left, "process "+d.Name())
		}
	}
	return left
}

// agentOf returns the host pid of the agent (the sandbox's PID 1) started
// by the supervisor with pid sup; the supervisor must run one sandbox.
func agentOf(t *testing.T, sup int) int {
	t.Helper()
	// The agent, or the VM monitor a vm sandbox's agent runs in, or the
	// runsc whose Sentry a gvisor sandbox's agent runs in.
	pid := childOf(sup, func(cmdline, argv0 string) bool {
		return cmdline == "airlock-guest\x00" || strings.Contains(argv0, "qemu-system-") || strings.HasSuffix(argv0, "runsc")
	})
	if pid == 0 {
		t.Fatalf("no agent process under supervisor %d", sup)
	}
	return pid
}

// childOf is a host process whose parent is parent and whose command
// line (NUL-separated, and its first word) match says is the one, or 0.
func childOf(parent int, match func(cmdline, argv0 string) bool) int {
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil || !match(string(cmdline), strings.SplitN(string(cmdline), "\x00", 2)[0]) {
			continue
		}
		status, err := os.ReadFile(filepath.Join("/proc", d.Name(), "status"))
		if err == nil && strings.Contains(string(status), fmt.Sprintf("\nPPid:\t%d\n", parent)) {
			return pid
		}
	}
	return 0
}

// stopFor stops process pid with SIGSTOP for d, then continues it.
func stopFor(t *testing.T, pid int, d time.Duration) {
	t.Helper()
	cont := stopProcess(t, pid)
	time.Sleep(d)
	cont()
}

// stopProcess stops process pid with SIGSTOP and returns what continues
// it; the test continues it at its end if it has not.
func stopProcess(t *testing.T, pid int) (cont func()) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP %d: %v", pid, err)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGCONT) })
	return func() {
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			t.Errorf("SIGCONT %d: %v", pid, err)
		}
	}
}

// rpcSession is an `airlock rpc` process and its JSON-RPC lines.
type rpcSession struct {
	t     *testing.T
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   io.ReadCloser
	lines chan rpcMsg
	// notes keeps the notifications read while looking for responses.
	notes []rpcMsg
}

// rpcMsg is one line from the server.
type rpcMsg struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// startRPC starts `airlock rpc args...`. stderr, when not nil, is its
// standard error.
func startRPC(t *testing.T, stderr io.Writer, args ...string) *rpcSession {
	t.Helper()
	cmd := exec.Command(bins.cli, append([]string{"rpc"}, args...)...)
	cmd.Stderr = stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &rpcSession{t: t, cmd: cmd, in: in, out: out, lines: make(chan rpcMsg, 1024)}
	go func() {
		defer close(s.lines)
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, 64<<20)
		for sc.Scan() {
			var m rpcMsg
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				s.lines <- m
			}
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		in.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(hang):
			cmd.Process.Kill()
			<-done
		}
	})
	return s
}

// send sends a request.
func (s *rpcSession) send(id int, method string, params any) {
	s.t.Helper()
	b, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	if err != nil {
		s.t.Fatal(err)
	}
	if _, err := s.in.Write(append(b, '\n')); err != nil {
		s.t.Fatalf("send %s: %v", method, err)
	}
}

// next returns the next line, failing the test if the server stops.
func (s *rpcSession) next() rpcMsg {
	s.t.Helper()
	select {
	case m, ok := <-s.lines:
		if !ok {
			s.t.Fatal("airlock rpc closed its output")
		}
		return m
	case <-time.After(hang):
		s.t.Fatal("airlock rpc sent nothing")
	}
	return rpcMsg{}
}

// response reads lines until the response to request id, keeping the
// notifications in s.notes.
func (s *rpcSession) response(id int) rpcMsg {
	s.t.Helper()
	want := strconv.Itoa(id)
	for {
		m := s.next()
		if m.Method != "" {
			s.notes = append(s.notes, m)
			continue
		}
		if string(m.ID) == want {
			return m
		}
	}
}

// create creates a sandbox of isolation level lv and returns its id.
func (s *rpcSession) create(id int, lv string) string {
	s.t.Helper()
	s.send(id, "create", map[string]any{"isolation": lv})
	m := s.response(id)
	var res struct {
		SandboxID string `json:"sandbox_id"`
	}
	if m.Error != nil || json.Unmarshal(m.Result, &res) != nil || res.SandboxID == "" {
		s.t.Fatalf("create: %+v %s", m.Error, m.Result)
	}
	return res.SandboxID
}

// execResult is the part of an exec result the tests read.
type execResult struct {
	ExitCode int     `json:"exit_code"`
	Stdout   string  `json:"stdout"`
	Stderr   string  `json:"stderr"`
	KilledBy *string `json:"killed_by"`
	Done     bool    `json:"done"`
}

// decodeExec decodes an exec result, failing the test on an error.
func (s *rpcSession) decodeExec(m rpcMsg) (res execResult, stdout, stderr []byte) {
	s.t.Helper()
	if m.Error != nil {
		s.t.Fatalf("exec failed: %d %s", m.Error.Code, m.Error.Message)
	}
	if err := json.Unmarshal(m.Result, &res); err != nil {
		s.t.Fatalf("exec result: %v: %s", err, m.Result)
	}
	stdout, _ = base64.StdEncoding.DecodeString(res.Stdout)
	stderr, _ = base64.StdEncoding.DecodeString(res.Stderr)
	return res, stdout, stderr
}

// waitExit waits for the process to end and says how it ended: "exit N"
// or "signal N".
func waitExit(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(hang):
		cmd.Process.Kill()
		t.Fatalf("%s did not exit", cmd.Path)
	}
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	switch {
	case !ok:
		return cmd.ProcessState.String()
	case ws.Signaled():
		return fmt.Sprintf("signal %d", int(ws.Signal()))
	}
	return fmt.Sprintf("exit %d", ws.ExitStatus())
}
