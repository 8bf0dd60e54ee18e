package rpc

import (
	"encoding/json"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
)

// TestBufferedExecControls covers what reaches an exec that buffers its
// output and has neither open_stdin nor tty (run the way the embed API's
// Run does): signals reach it, cancel and KILL kill it, stdin and resize
// are refused.
func TestBufferedExecControls(t *testing.T) {
	needAgent(t)
	c := newClient(t, Options{AllowCreate: true}, ServeOptions{})
	sbID := c.create(1, nil)
	// running waits for a process whose whole command line is marker: the
	// shell's own line ("sh -c echo out; sleep 1000") contains it before
	// the shell has run echo.
	running := func(marker string) {
		t.Helper()
		if !waitFor(20*time.Second, func() bool {
			out := unb64(t, c.exec(nil2(), map[string]any{"command": "ps -eo args", "sandbox_id": sbID}).Stdout)
			return slices.Contains(strings.Split(out, "\n"), marker)
		}) {
			t.Fatalf("%s did not start", marker)
		}
	}

	c.request("b0", api.MethodExec, map[string]any{"command": "echo out; sleep 1000"})
	running("sleep 1000")
	if m := c.call(1, api.MethodSignal, map[string]any{"id": "b0", "signal": "TERM"}); string(m["result"]) != "{}" {
		t.Fatalf("signal TERM: %v", m)
	}
	if r := finalResult(t, c, "b0"); r.KilledBy == nil || *r.KilledBy != "signal" || r.Signal != int(syscall.SIGTERM) || unb64(t, r.Stdout) != "out\n" {
		t.Errorf("exec sent TERM: %+v", r)
	}

	c.request("b1", api.MethodExec, map[string]any{"command": "echo out; sleep 1001"})
	running("sleep 1001")
	wantError(t, c.call(3, api.MethodStdin, map[string]any{"id": "b1", "data": "eA=="}), api.CodeInvalidParams)
	wantError(t, c.call(4, api.MethodResize, map[string]any{"id": "b1", "rows": 10, "cols": 10}), api.CodeInvalidParams)
	if m := c.call(5, api.MethodSignal, map[string]any{"id": "b1", "signal": "KILL"}); string(m["result"]) != "{}" {
		t.Fatalf("signal KILL: %v", m)
	}
	r := finalResult(t, c, "b1")
	if r.KilledBy == nil || *r.KilledBy != "signal" || r.Signal != int(syscall.SIGKILL) || r.ExitCode != 128+9 {
		t.Errorf("killed exec: %+v", r)
	}

	// Given stdin, and a notification, run to the end.
	if r := c.exec(nil2(), map[string]any{"command": "cat; exit 3", "stdin": "aGVsbG8="}); unb64(t, r.Stdout) != "hello" || r.ExitCode != 3 || r.KilledBy != nil {
		t.Errorf("exec with stdin: %+v", r)
	}
	c.request(nil, api.MethodExec, map[string]any{"command": "touch /tmp/notified"})
	if !waitFor(20*time.Second, func() bool {
		return c.exec(nil2(), map[string]any{"command": "test -e /tmp/notified"}).ExitCode == 0
	}) {
		t.Error("the exec sent as a notification did not run")
	}
	// A command that cannot start.
	wantError(t, c.call(6, api.MethodExec, map[string]any{"argv": []string{"/no/such/program"}}), api.CodeCommandFailed)
	// A timeout.
	if r := c.exec(nil2(), map[string]any{"command": "sleep 100", "timeout_seconds": 0.2}); r.KilledBy == nil || *r.KilledBy != "timeout" {
		t.Errorf("timed out exec: %+v", r)
	}
}

func finalResult(t *testing.T, c *client, id any) api.ExecResult {
	t.Helper()
	m := c.next(id, time.Minute)
	var r api.ExecResult
	if err := json.Unmarshal(m["result"], &r); err != nil {
		t.Fatalf("exec %v: %v (%s)", id, err, m["error"])
	}
	return r
}
