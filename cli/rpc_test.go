package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/api"
)

// rpcPeer talks JSON-RPC to an `airlock rpc` session over its stdin and
// stdout.
type rpcPeer struct {
	t     *testing.T
	in    io.WriteCloser
	lines chan []byte
}

func newRPCPeer(t *testing.T, in io.WriteCloser, out io.Reader) *rpcPeer {
	p := &rpcPeer{t: t, in: in, lines: make(chan []byte, 1024)}
	go func() {
		defer close(p.lines)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 256<<20)
		for sc.Scan() {
			p.lines <- bytes.Clone(sc.Bytes())
		}
	}()
	return p
}

// call sends a request and returns its response, skipping notifications
// and checking that every line is a JSON-RPC 2.0 message.
func (p *rpcPeer) call(id int, method string, params any) map[string]json.RawMessage {
	p.t.Helper()
	req, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	if _, err := p.in.Write(append(req, '\n')); err != nil {
		p.t.Fatalf("send %s: %v", method, err)
	}
	timeout := time.After(60 * time.Second)
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				p.t.Fatalf("%s: the server's output ended", method)
			}
			var m map[string]json.RawMessage
			if err := json.Unmarshal(line, &m); err != nil || string(m["jsonrpc"]) != `"2.0"` {
				p.t.Fatalf("stdout line is not JSON-RPC: %q", line)
			}
			if string(m["id"]) == fmt.Sprint(id) {
				return m
			}
		case <-timeout:
			p.t.Fatalf("%s: no response in 60 s", method)
		}
	}
}

// result calls and decodes the result into v.
func (p *rpcPeer) result(id int, method string, params, v any) {
	p.t.Helper()
	m := p.call(id, method, params)
	if e, ok := m["error"]; ok {
		p.t.Fatalf("%s: %s", method, e)
	}
	if v != nil {
		if err := json.Unmarshal(m["result"], v); err != nil {
			p.t.Fatalf("%s: %v", method, err)
		}
	}
}

// session creates a sandbox, runs a command in it, closes it, creates
// another and returns the host pid of the second one's agent.
func (p *rpcPeer) session() int {
	p.t.Helper()
	var cr api.CreateResult
	p.result(1, api.MethodCreate, map[string]any{"env": map[string]string{"GREETING": "hi"}}, &cr)
	if !strings.HasPrefix(cr.SandboxID, "sb-") || cr.Env["GREETING"] != "hi" {
		p.t.Fatalf("create: %+v", cr)
	}
	var res api.ExecResult
	p.result(2, api.MethodExec, map[string]any{"command": "echo $GREETING"}, &res)
	if res.ExitCode != 0 || res.Stdout != "aGkK" {
		p.t.Errorf("exec: %+v", res)
	}
	if m := p.call(3, api.MethodClose, map[string]any{}); string(m["result"]) != "{}" {
		p.t.Errorf("close: %v", m)
	}
	p.result(4, api.MethodCreate, map[string]any{}, nil)
	var info api.InfoResult
	p.result(5, api.MethodInfo, nil, &info)
	if len(info.Sandboxes) != 1 || info.Sandboxes[0].PID <= 0 {
		p.t.Fatalf("info: %+v", info)
	}
	return info.Sandboxes[0].PID
}

func rpcAgentGone(pid int) bool {
	return rpcWaitUntil(20*time.Second, func() bool { return syscall.Kill(pid, 0) == syscall.ESRCH })
}

func rpcWaitUntil(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// TestRPCBinary drives the built binary: create, exec, close; the end of
// stdin tears the sandbox down and airlock exits 0.
func TestRPCBinary(t *testing.T) {
	t.Parallel()
	if out, err := exec.Command(cliBin, "rpc", "--help").CombinedOutput(); err != nil {
		t.Skipf("this build has no rpc command: %v: %s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cliBin, "rpc")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := newRPCPeer(t, in, out)
	pid := p.session()
	in.Close()
	if err := cmd.Wait(); err != nil {
		t.Errorf("airlock rpc after the end of stdin: %v; stderr:\n%s", err, stderr.String())
	}
	if !rpcAgentGone(pid) {
		t.Errorf("the sandbox's agent (pid %d) outlived airlock rpc", pid)
	}
	if strings.Contains(stderr.String(), `"jsonrpc"`) {
		t.Errorf("protocol on stderr:\n%s", stderr.String())
	}
}

// TestRPCCommand runs the command in this process, with the options it
// builds from its flags.
func TestRPCCommand(t *testing.T) {
	t.Parallel()
	a := newApp(Options{Version: "v-test"})
	cmd := a.newRPCCmd()
	if err := cmd.ParseFlags([]string{"--max-message-mb", "8", "--log-level", "debug"}); err != nil {
		t.Fatal(err)
	}
	if err := checkRPCFlags(cmd); err != nil {
		t.Fatal(err)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	var stderr rpcSyncBuf
	cmd.SetIn(inR)
	cmd.SetOut(outW)
	cmd.SetErr(&stderr)
	cmd.SetContext(context.Background())
	opts := a.rpcOptions(cmd)
	if opts.MaxMessage != 8<<20 || !opts.AllowCreate {
		t.Errorf("options: %+v", opts)
	}
	// The agent sits next to the built binary, not this test binary.
	agent := filepath.Join(filepath.Dir(cliBin), "airlock-guest")
	create := opts.Create
	if create == nil {
		create = airlock.Create
	}
	opts.Create = func(ctx context.Context, cfg airlock.Config) (*airlock.Sandbox, error) {
		cfg.AgentPath = agent
		return create(ctx, cfg)
	}
	done := make(chan error, 1)
	go func() {
		err := runRPC(cmd, opts)
		outW.Close()
		done <- err
	}()
	p := newRPCPeer(t, inW, outR)
	var info api.InfoResult
	p.result(9, api.MethodInfo, nil, &info)
	if info.MaxMessageBytes != 8<<20 || info.Version != "v-test" {
		t.Errorf("info: %+v", info)
	}
	pid := p.session()
	inW.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("runRPC after the end of input: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("runRPC did not return after the end of its input")
	}
	if !rpcAgentGone(pid) {
		t.Errorf("the sandbox's agent (pid %d) outlived the session", pid)
	}
	if !strings.Contains(stderr.String(), "sandbox created") {
		t.Errorf("no diagnostics on stderr: %q", stderr.String())
	}
}

func TestRPCFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--max-message-mb", "0"}, {"--max-message-mb", "99999"}, {"--log-level", "loud"}} {
		cmd := newApp(Options{}).newRPCCmd()
		if err := cmd.ParseFlags(args); err != nil {
			t.Fatal(err)
		}
		if err := checkRPCFlags(cmd); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
}

// rpcSyncBuf is a bytes.Buffer safe for concurrent use.
type rpcSyncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *rpcSyncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *rpcSyncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRPCFlagEndsWithSandbox: airlock --rpc serves one sandbox and exits
// once it is closed, with stdin still open, as the protocol's example
// clients wait for; airlock rpc keeps serving.
func TestRPCFlagEndsWithSandbox(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		ends bool
	}{{[]string{"--rpc"}, true}, {[]string{"rpc"}, false}} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, cliBin, c.args...)
			in, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			defer in.Close()
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			p := newRPCPeer(t, in, out)
			var cr api.CreateResult
			if err := json.Unmarshal(p.call(1, "create", map[string]any{})["result"], &cr); err != nil || cr.SandboxID == "" {
				t.Fatalf("create: %v", err)
			}
			if m := p.call(2, "close", map[string]any{"sandbox_id": cr.SandboxID}); m["error"] != nil {
				t.Fatalf("close: %s", m["error"])
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			select {
			case err := <-exited:
				if !c.ends {
					t.Fatalf("airlock %s exited after close: %v", c.args[0], err)
				}
				if err != nil {
					t.Errorf("airlock %s after close: %v; stderr:\n%s", c.args[0], err, stderr.String())
				}
			case <-time.After(5 * time.Second):
				if c.ends {
					t.Fatalf("airlock %s still runs 5 s after its sandbox was closed", c.args[0])
				}
				// Still serving: another sandbox can be made.
				if m := p.call(3, "create", map[string]any{}); m["error"] != nil {
					t.Errorf("create after close: %s", m["error"])
				}
				in.Close()
				<-exited
			}
		})
	}
}
