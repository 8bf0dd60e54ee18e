package rpc

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
)

// TestParallelExecs runs 50 execs at once on one sandbox; each response
// carries its own request's id. The first waits until the test has the
// other 49 answers and then releases it, so a server that ran requests
// one at a time would never answer.
func TestParallelExecs(t *testing.T) {
	needAgent(t)
	c := newClient(t, Options{AllowCreate: true}, ServeOptions{})
	sbID := c.create("create", nil)
	const n = 50
	ids := make([]any, n)
	for i := range n {
		// Numbers and strings alike.
		if i%2 == 0 {
			ids[i] = i
		} else {
			ids[i] = "exec-" + strconv.Itoa(i)
		}
		cmd := fmt.Sprintf("sleep 0.$((%d %% 5)); echo %d", i, i)
		if i == 0 {
			cmd = "while [ ! -e /tmp/release ]; do sleep 0.01; done; echo 0"
		}
		// Naming the sandbox runs them at once (without, in order).
		c.request(ids[i], api.MethodExec, map[string]any{"command": cmd, "sandbox_id": sbID})
	}
	check := func(i int) {
		t.Helper()
		m := c.next(ids[i], 2*time.Minute)
		if string(m["id"]) != string(mustJSON(t, ids[i])) {
			t.Errorf("response id %s, want %v", m["id"], ids[i])
		}
		var r api.ExecResult
		if err := json.Unmarshal(m["result"], &r); err != nil {
			t.Fatalf("exec %d: %v (%s)", i, err, m["error"])
		}
		if got := unb64(t, r.Stdout); got != strconv.Itoa(i)+"\n" || r.ExitCode != 0 {
			t.Errorf("exec %d: exit %d stdout %q", i, r.ExitCode, got)
		}
	}
	for i := 1; i < n; i++ {
		check(i)
	}
	c.request("release", api.MethodWriteFile, map[string]any{"path": "/tmp/release", "content": "", "sandbox_id": sbID})
	c.next("release", time.Minute)
	check(0)
}

// TestExecStreamNotifications checks the "notifications" mode: output as
// exec.output notifications with the request's id, one response.
func TestExecStreamNotifications(t *testing.T) {
	needAgent(t)
	c := newClient(t, Options{AllowCreate: true}, ServeOptions{})
	c.create(1, nil)
	c.request("s1", api.MethodExecStream, map[string]any{"command": "echo out; echo err >&2; sleep 0.1; echo more", "mode": "notifications"})
	final := c.next("s1", time.Minute)
	var r api.ExecResult
	if err := json.Unmarshal(final["result"], &r); err != nil || !r.Done || r.ExitCode != 0 {
		t.Fatalf("final response %v: %v", final, err)
	}
	var stdout, stderr string
	for {
		n, ok := c.note(time.Second, func(m msg) bool { return string(m["method"]) == `"exec.output"` })
		if !ok {
			break
		}
		var ch api.ExecChunk
		if err := json.Unmarshal(n["params"], &ch); err != nil {
			t.Fatal(err)
		}
		if string(ch.ID) != `"s1"` {
			t.Errorf("exec.output id %s, want \"s1\"", ch.ID)
		}
		stdout += unb64(t, ch.Stdout)
		stderr += unb64(t, ch.Stderr)
	}
	if stdout != "out\nmore\n" || stderr != "err\n" {
		t.Errorf("notifications: stdout %q stderr %q", stdout, stderr)
	}
	c.mu.Lock()
	extra := len(c.byID[`"s1"`])
	c.mu.Unlock()
	if extra != 0 {
		t.Errorf("%d more responses with the exec's id in notifications mode", extra)
	}
}

// TestExecStdin covers stdin given whole, and stdin kept open and written
// by "stdin" requests sent right behind the exec, without waiting.
func TestExecStdin(t *testing.T) {
	needAgent(t)
	c := newClient(t, Options{AllowCreate: true}, ServeOptions{})
	c.create(1, nil)

	r := c.exec(2, map[string]any{"argv": []string{"wc", "-c"}, "stdin": b64("twelve bytes")})
	if strings.TrimSpace(unb64(t, r.Stdout)) != "12" {
		t.Errorf("wc -c of 12 bytes: %q", unb64(t, r.Stdout))
	}

	// Pipelined: the exec and its stdin in a row.
	c.request("cat", api.MethodExecStream, map[string]any{"argv": []string{"cat"}, "open_stdin": true, "stdin": b64("first;")})
	var want strings.Builder
	want.WriteString("first;")
	for i := range 20 {
		s := fmt.Sprintf("part %d;", i)
		want.WriteString(s)
		c.request(100+i, api.MethodStdin, map[string]any{"id": "cat", "data": b64(s)})
	}
	c.request(200, api.MethodStdin, map[string]any{"id": "cat", "close": true})
	var out string
	for {
		m := c.next("cat", time.Minute)
		var ch map[string]json.RawMessage
		if err := json.Unmarshal(m["result"], &ch); err != nil {
			t.Fatalf("cat: %v (%s)", err, m["error"])
		}
		if string(ch["done"]) == "true" {
			break
		}
		var s string
		_ = json.Unmarshal(ch["stdout"], &s)
		out += unb64(t, s)
	}
	if out != want.String() {
		t.Errorf("cat echoed %q, want %q", out, want.String())
	}
	for i := range 20 {
		if m := c.next(100+i, time.Minute); string(m["result"]) != "{}" {
			t.Errorf("stdin %d: %v", i, m)
		}
	}
	if m := c.next(200, time.Minute); string(m["result"]) != "{}" {
		t.Errorf("stdin close: %v", m)
	}
	// The exec has ended: its id is unknown now.
	wantError(t, c.call(201, api.MethodStdin, map[string]any{"id": "cat", "data": b64("late")}), api.CodeNotFound)
	// An exec without open_stdin takes no stdin requests.
	c.request("sleeper", api.MethodExec, map[string]any{"command": "sleep 1"})
	wantError(t, c.call(202, api.MethodStdin, map[string]any{"id": "sleeper", "data": b64("x")}), api.CodeInvalidParams)
	c.next("sleeper", time.Minute)
}

// readyStream starts an exec_stream that prints "ready" once set up, and
// waits for it.
func readyStream(t *testing.T, c *client, id any, script string) {
	t.Helper()
	// Naming the sandbox lets the requests that follow run meanwhile.
	c.request(id, api.MethodExecStream, map[string]any{"command": script, "sandbox_id": c.lastSandbox()})
	m := c.next(id, time.Minute)
	var ch api.ExecChunk
	if err := json.Unmarshal(m["result"], &ch); err != nil || unb64(t, ch.Stdout) != "ready\n" {
		t.Fatalf("want the ready chunk, got %v", m)
	}
}

// final returns the final response of an exec_stream, skipping chunks.
func (c *client) final(id any) api.ExecResult {
	c.t.Helper()
	for {
		m := c.next(id, time.Minute)
		if _, ok := m["error"]; ok {
			c.t.Fatalf("exec_stream %v: %s", id, m["error"])
		}
		var r api.ExecResult
		if err := json.Unmarshal(m["result"], &r); err != nil {
			c.t.Fatal(err)
		}
		if r.Done {
			return r
		}
	}
}

func TestSignal(t *testing.T) {
	needAgent(t)
	c := newClient(t, Options{AllowCreate: true}, ServeOptions{})
	c.create(1, nil)
	trap := "trap 'exit 7' TERM; echo ready; while :; do sleep 0.05; done"
	for i, sig := range []any{"TERM", "SIGTERM", "sigterm", 15} {
		id := fmt.Sprintf("trap-%d", i)
		readyStream(t, c, id, trap)
		if m := c.call(10+i, api.MethodSignal, map[string]any{"id": id, "signal": sig}); string(m["result"]) != "{}" {
			t.Fatalf("signal %v: %v", sig, m)
		}
		if r := c.final(id); r.ExitCode != 7 {
			t.Errorf("signal %v: exit %d, want 7 from the trap", sig, r.ExitCode)
		}
	}
	readyStream(t, c, "plain", "echo ready; exec sleep 100")
	c.call(20, api.MethodSignal, map[string]any{"id": "plain", "signal": "INT"})
	if r := c.final("plain"); r.Signal != int(syscall.SIGINT) || r.KilledBy == nil || *r.KilledBy != "signal" {
		t.Errorf("SIGINT: %+v", r)
	}
	for i, bad := range []any{"NOPE", 0, 65, true, nil} {
		wantError(t, c.call(30+i, api.MethodSignal, map[string]any{"id": "x", "signal": bad}), api.CodeInvalidParams)
	}
	wantError(t, c.call(40, api.MethodSignal, map[string]any{"id": "missing", "signal": "TERM"}), api.CodeNotFound)
}

// TestCancel kills a running exec's whole tree; its result says
// killed_by "signal".
func TestCancel(t *testing.T) {
	needAgent(t)
	c := newClient(t, Options{AllowCreate: true}, ServeOptions{})
	sbID := c.create(1, nil)
	c.request("long", api.MethodExec, map[string]any{"command": "sleep 1000 & sleep 1001; wait", "sandbox_id": sbID})
	if !waitFor(20*time.Second, func() bool {
		return strings.Contains(unb64(t, c.exec(nil2(), map[string]any{"command": "ps -eo args", "sandbox_id": sbID}).Stdout), "sleep 1001")
	}) {
		t.Fatal("the command did not start")
	}
	if m := c.call(2, api.MethodCancel, map[string]any{"id": "long"}); string(m["result"]) != "{}" {
		t.Fatalf("cancel: %v", m)
	}
	m := c.next("long", time.Minute)
	var r api.ExecResult
	if err := json.Unmarshal(m["result"], &r); err != nil {
		t.Fatalf("cancelled exec: %v (%s)", err, m["error"])
	}
	if r.KilledBy == nil || *r.KilledBy != "signal" || r.Signal != int(syscall.SIGKILL) {
		t.Errorf("cancelled exec: %+v", r)
	}
	if !waitFor(10*time.Second, func() bool {
		return !strings.Contains(unb64(t, c.exec(nil2(), map[string]any{"command": "ps -eo args", "sandbox_id": sbID}).Stdout), "sleep 100")
	}) {
		t.Error("the background sleep survived the cancel")
	}
	// Streams too.
	readyStream(t, c, "stream", "echo ready; sleep 1000")
	c.call(3, api.MethodCancel, map[string]any{"id": "stream"})
	if r := c.final("stream"); r.KilledBy == nil || *r.KilledBy != "signal" {
		t.Errorf("cancelled stream: %+v", r)
	}
	wantError(t, c.call(4, api.MethodCancel, map[string]any{"id": "stream"}), api.CodeNotFound)
}

// nil2 returns a fresh id for helper calls.
func nil2() string {
	idSeq.Lock()
	defer idSeq.Unlock()
	idSeq.n++
	return "helper-" + strconv.Itoa(idSeq.n)
}

var idSeq struct {
	sync.Mutex
	n int
}

// TestBackpressureLeavesRoomForCancel fills every request slot with long
// execs: cancel still gets through.
func TestBackpressureLeavesRoomForCancel(t *testing.T) {
	needAgent(t)
	c := newClient(t, Options{AllowCreate: true, MaxInFlight: 3}, ServeOptions{})
	c.create(1, nil)
	for i := range 3 {
		readyStream(t, c, fmt.Sprintf("busy-%d", i), "echo ready; sleep 1000")
	}
	// A fourth exec waits for a slot; cancels are let through.
	c.request("queued", api.MethodExec, map[string]any{"command": "echo queued", "sandbox_id": c.lastSandbox()})
	for i := range 3 {
		if m := c.call(10+i, api.MethodCancel, map[string]any{"id": fmt.Sprintf("busy-%d", i)}); string(m["result"]) != "{}" {
			t.Fatalf("cancel %d: %v", i, m)
		}
	}
	for i := range 3 {
		c.final(fmt.Sprintf("busy-%d", i))
	}
	if r := c.exec(nil2(), map[string]any{"command": "true", "sandbox_id": c.lastSandbox()}); r.ExitCode != 0 {
		t.Errorf("exec after the cancels: %+v", r)
	}
	m := c.next("queued", time.Minute)
	var r api.ExecResult
	if err := json.Unmarshal(m["result"], &r); err != nil || unb64(t, r.Stdout) != "queued\n" {
		t.Errorf("queued exec: %v %v", m, err)
	}
}

// TestExecErrors checks how failures map to error codes.
func TestExecErrors(t *testing.T) {
	needAgent(t)
	c := newClient(t, Options{AllowCreate: true}, ServeOptions{})
	c.create(1, nil)
	e := wantError(t, c.call(2, api.MethodExec, map[string]any{"argv": []string{"airlock-no-such-program"}}), api.CodeCommandFailed)
	if d, _ := e.Data.(map[string]any); d["exit_code"] != float64(127) {
		t.Errorf("not found: data %v, want exit_code 127", e.Data)
	}
	c.result(3, api.MethodWriteFile, map[string]any{"path": "/workspace/noexec", "content": b64("#!/bin/sh\n"), "mode": 0o644}, nil)
	e = wantError(t, c.call(4, api.MethodExecStream, map[string]any{"argv": []string{"/workspace/noexec"}}), api.CodeCommandFailed)
	if d, _ := e.Data.(map[string]any); d["exit_code"] != float64(126) {
		t.Errorf("not executable: data %v, want exit_code 126", e.Data)
	}
	wantError(t, c.call(5, api.MethodExec, map[string]any{}), api.CodeInvalidParams)
	wantError(t, c.call(6, api.MethodExec, map[string]any{"command": "x", "argv": []string{"y"}}), api.CodeInvalidParams)
	wantError(t, c.call(7, api.MethodExec, map[string]any{"command": "true", "mode": "notifications"}), api.CodeInvalidParams)
	wantError(t, c.call(8, api.MethodExecStream, map[string]any{"command": "true", "mode": "bogus"}), api.CodeInvalidParams)
	wantError(t, c.call(9, api.MethodExec, map[string]any{"command": "true", "stdin": "***"}), api.CodeInvalidParams)
	wantError(t, c.call(10, api.MethodExec, map[string]any{"command": "true", "timeout_seconds": -1}), api.CodeInvalidParams)
	e = wantError(t, c.call(11, api.MethodExec, map[string]any{"command": true}), api.CodeInvalidParams)
	if !strings.Contains(e.Message, `"command"`) {
		t.Errorf("wrong type: message %q should name the field", e.Message)
	}
	e = wantError(t, c.call(12, api.MethodExec, map[string]any{"command": "true", "rows": 70000}), api.CodeInvalidParams)
	if !strings.Contains(e.Message, `"rows"`) {
		t.Errorf("out of range: message %q should name the field", e.Message)
	}
	// A command's own timeout.
	r := c.exec(13, map[string]any{"command": "sleep 10", "timeout_seconds": 0.3})
	if r.KilledBy == nil || *r.KilledBy != "timeout" {
		t.Errorf("timeout: %+v", r)
	}
	// Two running execs may not share an id.
	c.request("dup", api.MethodExec, map[string]any{"command": "sleep 0.5"})
	c.request("dup", api.MethodExec, map[string]any{"command": "true"})
	first, second := c.next("dup", time.Minute), c.next("dup", time.Minute)
	if _, ok := first["error"]; !ok {
		first, second = second, first
	}
	wantError(t, first, api.CodeInvalidRequest)
	if _, ok := second["result"]; !ok {
		t.Errorf("the first exec with the id: %v", second)
	}
}

// TestExecDetached: an exec with detach answers with the command's pid
// while it runs on, its given stdin its input; streaming, a terminal and
// open stdin are refused with it.
func TestExecDetached(t *testing.T) {
	needAgent(t)
	c := newClient(t, Options{AllowCreate: true}, ServeOptions{})
	c.create(1, nil)
	var d api.ExecDetachedResult
	c.result(2, api.MethodExec, map[string]any{"command": "sleep 1000", "detach": true}, &d)
	if d.Pid <= 0 {
		t.Fatalf("pid %d", d.Pid)
	}
	if r := c.exec(3, map[string]any{"argv": []string{"kill", "-0", strconv.Itoa(d.Pid)}}); r.ExitCode != 0 {
		t.Errorf("the detached command (pid %d) is not running: %+v", d.Pid, r)
	}
	c.result(4, api.MethodExec, map[string]any{"command": "cat > /tmp/in", "stdin": b64("given"), "detach": true}, &d)
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := c.exec(5, map[string]any{"command": "cat /tmp/in"})
		if r.Stdout == b64("given") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the detached command's stdin: %q", r.Stdout)
		}
		time.Sleep(100 * time.Millisecond)
	}
	wantError(t, c.call(6, api.MethodExecStream, map[string]any{"command": "true", "detach": true}), api.CodeInvalidParams)
	wantError(t, c.call(7, api.MethodExec, map[string]any{"command": "true", "detach": true, "tty": true}), api.CodeInvalidParams)
	wantError(t, c.call(8, api.MethodExec, map[string]any{"command": "true", "detach": true, "open_stdin": true}), api.CodeInvalidParams)
	e := wantError(t, c.call(9, api.MethodExec, map[string]any{"argv": []string{"airlock-no-such-program"}, "detach": true}), api.CodeCommandFailed)
	if d, _ := e.Data.(map[string]any); d["exit_code"] != float64(127) {
		t.Errorf("not found: data %v, want exit_code 127", e.Data)
	}
}
