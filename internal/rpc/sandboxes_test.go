package rpc

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/api"
)

// TestManySandboxes creates 10 sandboxes in one session: requests go to
// the one they name, and what one does is invisible to the others.
func TestManySandboxes(t *testing.T) {
	needAgent(t)
	c := newClient(t, Options{AllowCreate: true}, ServeOptions{})
	const n = 10
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids[i] = c.create(fmt.Sprintf("create-%d", i), map[string]any{"hostname": fmt.Sprintf("box%d", i)})
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for i, id := range ids {
		c.result(fmt.Sprintf("w-%d", i), api.MethodWriteFile, map[string]any{"sandbox_id": id, "path": "/workspace/mine", "content": b64(id)}, nil)
	}
	for i, id := range ids {
		r := c.exec(fmt.Sprintf("x-%d", i), map[string]any{"sandbox_id": id, "command": "hostname; cat /workspace/mine"})
		if got, want := unb64(t, r.Stdout), fmt.Sprintf("box%d\n%s", i, id); got != want {
			t.Errorf("sandbox %d: %q, want %q", i, got, want)
		}
	}
	// Isolation: a file written in one sandbox is absent from another.
	c.result("only", api.MethodWriteFile, map[string]any{"sandbox_id": ids[0], "path": "/workspace/only-in-0", "content": b64("x")}, nil)
	for i, id := range ids[1:] {
		e := wantError(t, c.call(fmt.Sprintf("r-%d", i), api.MethodReadFile, map[string]any{"sandbox_id": id, "path": "/workspace/only-in-0"}), api.CodeFileError)
		if d, _ := e.Data.(map[string]any); d["kind"] != "not_found" || d["path"] != "/workspace/only-in-0" {
			t.Errorf("read in sandbox %s: data %v, want kind not_found and the path", id, e.Data)
		}
	}
	// Without sandbox_id, the session cannot tell which one.
	e := wantError(t, c.call("noid", api.MethodExec, map[string]any{"command": "true"}), api.CodeInvalidParams)
	if !strings.Contains(e.Message, "this session has 10 sandboxes: give sandbox_id") {
		t.Errorf("message %q", e.Message)
	}
	wantError(t, c.call("bad", api.MethodExec, map[string]any{"sandbox_id": "sb-nope", "command": "true"}), api.CodeNotFound)
	var info api.InfoResult
	c.result("info", api.MethodInfo, nil, &info)
	if len(info.Sandboxes) != n || info.Protocol != api.Version || info.MaxMessageBytes != DefaultMaxMessage {
		t.Errorf("info: %+v", info)
	}
	for _, s := range info.Sandboxes {
		if s.State != "running" || s.PID <= 0 || s.Isolation != "process" || s.CreatedAt.IsZero() {
			t.Errorf("info sandbox %+v", s)
		}
	}
	// Closing one leaves the others.
	c.result("close", api.MethodClose, map[string]any{"sandbox_id": ids[3]}, nil)
	wantError(t, c.call("closed", api.MethodExec, map[string]any{"sandbox_id": ids[3], "command": "true"}), api.CodeNotRunning)
	if r := c.exec("alive", map[string]any{"sandbox_id": ids[4], "command": "true"}); r.ExitCode != 0 {
		t.Errorf("sandbox 4 after closing 3: %+v", r)
	}
}

// TestEndOfInputClosesSandboxes closes the input in the middle of an
// exec_stream that never ends and an exec that sleeps: the session goes
// on while they run, as a script piped in asks, and when it is
// cancelled (the CLI's SIGTERM) its sandboxes are gone, agents
// included.
func TestEndOfInputClosesSandboxes(t *testing.T) {
	needAgent(t)
	c := newClient(t, Options{AllowCreate: true}, ServeOptions{})
	a, b := c.create(1, nil), c.create(2, nil)
	c.request("stream", api.MethodExecStream, map[string]any{"sandbox_id": a, "command": "while :; do echo tick; sleep 0.05; done"})
	c.next("stream", time.Minute)
	c.request("sleep", api.MethodExec, map[string]any{"sandbox_id": b, "command": "sleep 1000"})
	sbs := []*airlock.Sandbox{c.sandboxFor(a), c.sandboxFor(b)}
	c.in.Close()
	select {
	case err := <-c.served:
		c.served <- err
		t.Fatalf("Serve returned (%v) at the end of input with requests running", err)
	case <-time.After(time.Second):
	}
	c.end()
	select {
	case err := <-c.served:
		c.served <- err
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Serve after it was cancelled: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Serve did not return within a minute of being cancelled")
	}
	for _, sb := range sbs {
		select {
		case <-sb.Done():
		default:
			t.Errorf("sandbox %s still runs after the session ended", sb.ID())
		}
	}
}

// TestScriptPipedIn sends a whole session at once, as `airlock rpc <
// file` does, naming no sandbox: each request waits for the ones before
// it (the exec sees the file written before it, the read what the exec
// wrote), and the end of input waits for the last answers before the
// session ends and closes its sandbox.
func TestScriptPipedIn(t *testing.T) {
	needAgent(t)
	c := newClient(t, Options{AllowCreate: true}, ServeOptions{})
	c.request(1, api.MethodCreate, map[string]any{})
	c.request(2, api.MethodWriteFile, map[string]any{"path": "/workspace/in.txt", "content": b64("hello\n")})
	c.request(3, api.MethodExec, map[string]any{"command": "sleep 0.3; tr a-z A-Z < /workspace/in.txt > /workspace/out.txt; cat /workspace/out.txt"})
	c.request(4, api.MethodReadFile, map[string]any{"path": "/workspace/out.txt"})
	c.request(5, api.MethodExecStream, map[string]any{"command": "echo streamed"})
	c.request(6, api.MethodExec, map[string]any{"command": "sleep 0.5; echo last"})
	if err := c.closeInput(time.Minute); err != nil {
		t.Fatalf("Serve at the end of input: %v", err)
	}
	var cr api.CreateResult
	if err := json.Unmarshal(c.next(1, time.Second)["result"], &cr); err != nil || cr.SandboxID == "" {
		t.Fatalf("create: %v", err)
	}
	if m := c.next(2, time.Second); m["error"] != nil {
		t.Errorf("write_file: %s", m["error"])
	}
	var r api.ExecResult
	if err := json.Unmarshal(c.next(3, time.Second)["result"], &r); err != nil || unb64(t, r.Stdout) != "HELLO\n" {
		t.Errorf("exec after write_file: %q %v", r.Stdout, err)
	}
	var rf api.ReadFileResult
	if err := json.Unmarshal(c.next(4, time.Second)["result"], &rf); err != nil || unb64(t, rf.Content) != "HELLO\n" {
		t.Errorf("read_file after exec: %q %v", rf.Content, err)
	}
	if r := c.final(5); r.ExitCode != 0 {
		t.Errorf("exec_stream: %+v", r)
	}
	if err := json.Unmarshal(c.next(6, time.Second)["result"], &r); err != nil || unb64(t, r.Stdout) != "last\n" {
		t.Errorf("the last exec, answered after the end of input: %q %v", r.Stdout, err)
	}
	select {
	case <-c.sandboxFor(cr.SandboxID).Done():
	default:
		t.Error("the session's sandbox still runs after the session ended")
	}
}

// TestClientGone: at the end of input, a session whose output is a pipe
// that nobody reads any more ends at once, cancelling what runs.
func TestClientGone(t *testing.T) {
	needAgent(t)
	var made *airlock.Sandbox
	srv := NewServer(Options{AllowCreate: true, Create: func(ctx context.Context, cfg airlock.Config) (*airlock.Sandbox, error) {
		sb, err := airlock.Create(ctx, cfg)
		made = sb
		return sb, err
	}})
	inR, inW := io.Pipe()
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer outW.Close()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(context.Background(), inR, outW) }()
	fmt.Fprintln(inW, `{"jsonrpc":"2.0","id":1,"method":"create","params":{}}`)
	line, err := bufio.NewReader(outR).ReadString('\n')
	if err != nil || !strings.Contains(line, "sandbox_id") {
		t.Fatalf("create: %q %v", line, err)
	}
	fmt.Fprintln(inW, `{"jsonrpc":"2.0","id":2,"method":"exec","params":{"command":"sleep 1000"}}`)
	inW.Close()
	outR.Close()
	select {
	case <-served:
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not return within 30 s of its client going")
	}
	if made == nil {
		t.Fatal("no sandbox was made")
	}
	select {
	case <-made.Done():
	default:
		t.Error("the sandbox still runs after its client went")
	}
}
