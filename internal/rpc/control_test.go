package rpc

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/api"
)

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// newBlockedWriter returns a writer whose writes block until release is
// called.
func newBlockedWriter() (io.Writer, func()) {
	r, w := io.Pipe()
	return w, func() { r.Close() }
}

// fakeMain is a main command driven by the test.
type fakeMain struct {
	mu     sync.Mutex
	out    chan api.ExecChunk
	stdin  []byte
	closed bool
	res    *airlock.ExecResult
	done   chan struct{}
	// signals are those sent to it.
	signals []syscall.Signal
	// sizes are the terminal sizes asked for.
	sizes [][2]uint16
}

func (m *fakeMain) Attach() (<-chan api.ExecChunk, func()) { return m.out, func() {} }
func (m *fakeMain) Resize(rows, cols uint16) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sizes = append(m.sizes, [2]uint16{rows, cols})
	return nil
}

func (m *fakeMain) Signal(sig syscall.Signal) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.signals = append(m.signals, sig)
	return nil
}

func (m *fakeMain) WriteStdin(b []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stdin = append(m.stdin, b...)
	return nil
}

func (m *fakeMain) CloseStdin() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	return nil
}

func (m *fakeMain) Wait() (*airlock.ExecResult, error) {
	<-m.done
	return m.res, nil
}

// newShared creates a sandbox outside any session, as a detached
// sandbox's supervisor does, with its events going to hub.
func newShared(t *testing.T, hub *Hub) *airlock.Sandbox {
	t.Helper()
	needAgent(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := airlock.Create(ctx, airlock.Config{OnEvent: hub.Publish})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close() })
	return sb
}

// TestControlSession serves a shared sandbox, as a control socket does:
// no create, sandbox_id optional, the sandbox outlives the session, its
// events arrive through the hub.
func TestControlSession(t *testing.T) {
	hub := &Hub{}
	sb := newShared(t, hub)
	c := newClient(t, Options{}, ServeOptions{Shared: []*airlock.Sandbox{sb}, Events: hub})
	wantError(t, c.call(1, api.MethodCreate, nil), api.CodePermissionError)
	if r := c.exec(2, map[string]any{"command": "echo hi"}); unb64(t, r.Stdout) != "hi\n" {
		t.Errorf("exec on the shared sandbox: %+v", r)
	}
	if _, ok := c.waitEvent(10*time.Second, "exec", ""); !ok {
		t.Error("no exec event from the shared sandbox")
	}
	wantError(t, c.call(3, api.MethodAttach, nil), api.CodeUnsupported)
	if err := c.closeInput(30 * time.Second); err != nil {
		t.Errorf("Serve: %v", err)
	}
	if stopped(sb) {
		t.Fatal("the session closed a shared sandbox")
	}
	// "close" on a shared sandbox stops it.
	c2 := newClient(t, Options{}, ServeOptions{Shared: []*airlock.Sandbox{sb}})
	c2.result(1, api.MethodClose, nil, nil)
	if !stopped(sb) {
		t.Error("close did not stop the shared sandbox")
	}
}

func TestAttach(t *testing.T) {
	sb := newShared(t, &Hub{})
	main := &fakeMain{out: make(chan api.ExecChunk, 4), done: make(chan struct{}), res: &airlock.ExecResult{ExitCode: 5}}
	c := newClient(t, Options{}, ServeOptions{Shared: []*airlock.Sandbox{sb}, Main: main})
	c.request("a", api.MethodAttach, nil)
	c.request(1, api.MethodStdin, map[string]any{"id": "a", "data": b64("input"), "close": true})
	main.out <- api.ExecChunk{Stdout: b64("out")}
	main.out <- api.ExecChunk{Stderr: b64("err")}
	for _, want := range []string{`{"stdout":"` + b64("out") + `"}`, `{"stderr":"` + b64("err") + `"}`} {
		if m := c.next("a", time.Minute); string(m["result"]) != want {
			t.Errorf("attach chunk %s, want %s", m["result"], want)
		}
	}
	if m := c.next(1, time.Minute); string(m["result"]) != "{}" {
		t.Errorf("stdin to the main command: %v", m)
	}
	main.mu.Lock()
	stdin, closed := string(main.stdin), main.closed
	main.mu.Unlock()
	if stdin != "input" || !closed {
		t.Errorf("main command got stdin %q closed %v", stdin, closed)
	}
	// A signal through the attach reaches the main command.
	if m := c.call(2, api.MethodSignal, map[string]any{"id": "a", "signal": "TERM"}); string(m["result"]) != "{}" {
		t.Errorf("signal through attach: %v", m)
	}
	// So does a resize of its terminal.
	if m := c.call(3, api.MethodResize, map[string]any{"id": "a", "rows": 50, "cols": 132}); string(m["result"]) != "{}" {
		t.Errorf("resize through attach: %v", m)
	}
	main.mu.Lock()
	if len(main.signals) != 1 || main.signals[0] != syscall.SIGTERM {
		t.Errorf("the main command got signals %v, want SIGTERM", main.signals)
	}
	if len(main.sizes) != 1 || main.sizes[0] != [2]uint16{50, 132} {
		t.Errorf("the main command got sizes %v, want 50x132", main.sizes)
	}
	main.mu.Unlock()
	close(main.done)
	close(main.out)
	m := c.next("a", time.Minute)
	var r api.ExecResult
	if err := json.Unmarshal(m["result"], &r); err != nil || !r.Done || r.ExitCode != 5 {
		t.Errorf("attach final response %v: %v", m, err)
	}

	// Cancel detaches.
	main2 := &fakeMain{out: make(chan api.ExecChunk), done: make(chan struct{})}
	c2 := newClient(t, Options{}, ServeOptions{Shared: []*airlock.Sandbox{sb}, Main: main2})
	c2.request("b", api.MethodAttach, map[string]any{"mode": "notifications"})
	c2.result(1, api.MethodCancel, map[string]any{"id": "b"}, nil)
	wantError(t, c2.next("b", time.Minute), api.CodeCancelled)
}

// TestAttachAnswersWhenSessionEnds: a detached sandbox's supervisor ends
// its control sessions as soon as the main command has ended. An attach
// then still answers with the command's last output and its result, not
// with a cancellation, however the two races fall.
func TestAttachAnswersWhenSessionEnds(t *testing.T) {
	sb := newShared(t, &Hub{})
	for i := range 20 {
		main := &fakeMain{out: make(chan api.ExecChunk, 4), done: make(chan struct{}), res: &airlock.ExecResult{ExitCode: 7}}
		c := newClient(t, Options{}, ServeOptions{Shared: []*airlock.Sandbox{sb}, Main: main})
		c.request("a", api.MethodAttach, nil)
		main.out <- api.ExecChunk{Stdout: b64("first")}
		c.next("a", time.Minute) // the attach is under way
		main.out <- api.ExecChunk{Stdout: b64("last")}
		close(main.done)
		close(main.out)
		c.end()
		if m := c.next("a", time.Minute); string(m["result"]) != `{"stdout":"`+b64("last")+`"}` {
			t.Fatalf("round %d: the last chunk %v, want it", i, m)
		}
		m := c.next("a", time.Minute)
		var r api.ExecResult
		if err := json.Unmarshal(m["result"], &r); err != nil || !r.Done || r.ExitCode != 7 {
			t.Fatalf("round %d: the attach's answer %v (%v), want the result with exit code 7", i, m, err)
		}
	}
}
