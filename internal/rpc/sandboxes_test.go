package rpc

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"syscall"
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
// exec_stream: Serve returns nil and the session's sandboxes are gone,
// their agents included.
func TestEndOfInputClosesSandboxes(t *testing.T) {
	needAgent(t)
	c := newClient(t, Options{AllowCreate: true}, ServeOptions{})
	a, b := c.create(1, nil), c.create(2, nil)
	c.request("stream", api.MethodExecStream, map[string]any{"sandbox_id": a, "command": "while :; do echo tick; sleep 0.05; done"})
	c.next("stream", time.Minute)
	c.request("sleep", api.MethodExec, map[string]any{"sandbox_id": b, "command": "sleep 1000"})
	sbs := []*airlock.Sandbox{c.sandboxFor(a), c.sandboxFor(b)}
	if err := c.closeInput(60 * time.Second); err != nil {
		t.Errorf("Serve after the end of input: %v, want nil", err)
	}
	for _, sb := range sbs {
		select {
		case <-sb.Done():
		default:
			t.Errorf("sandbox %s still runs after the session ended", sb.ID())
		}
		pid := sb.PID()
		if !waitFor(10*time.Second, func() bool { return syscall.Kill(pid, 0) == syscall.ESRCH }) {
			t.Errorf("agent %d of sandbox %s still exists", pid, sb.ID())
		}
	}
	// The requests in flight were answered as cancelled.
	for _, id := range []string{"stream", "sleep"} {
		for {
			m := c.next(id, 10*time.Second)
			if _, ok := m["error"]; ok {
				wantError(t, m, api.CodeCancelled)
				break
			}
			var r map[string]json.RawMessage
			_ = json.Unmarshal(m["result"], &r)
			if string(r["done"]) == "true" {
				t.Errorf("%s ended normally: %s", id, m["result"])
				break
			}
		}
	}
}
