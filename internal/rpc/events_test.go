package rpc

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/api"
)

// eventOf returns the event of an "event" notification, or false.
func eventOf(m msg) (map[string]json.RawMessage, bool) {
	if string(m["method"]) != `"event"` {
		return nil, false
	}
	var ev map[string]json.RawMessage
	if json.Unmarshal(m["params"], &ev) != nil {
		return nil, false
	}
	return ev, true
}

// waitEvent waits for an event of type typ (and, when op is set, with
// that file op).
func (c *client) waitEvent(d time.Duration, typ, op string) (map[string]json.RawMessage, bool) {
	var got map[string]json.RawMessage
	_, ok := c.note(d, func(m msg) bool {
		ev, ok := eventOf(m)
		if !ok || string(ev["type"]) != `"`+typ+`"` {
			return false
		}
		if op != "" {
			var f airlock.FileEvent
			if json.Unmarshal(ev["file"], &f) != nil || f.Op != op {
				return false
			}
		}
		got = ev
		return true
	})
	return got, ok
}

func TestEvents(t *testing.T) {
	needAgent(t)
	c := newClient(t, Options{AllowCreate: true}, ServeOptions{})
	sbID := c.create(1, nil)

	// Delivered by default: the sandbox's start, then an exec.
	if ev, ok := c.waitEvent(10*time.Second, "lifecycle", ""); !ok || string(ev["sandbox_id"]) != `"`+sbID+`"` {
		t.Errorf("no lifecycle event for the new sandbox: %v", ev)
	}
	c.exec(2, map[string]any{"argv": []string{"sh", "-c", "exit 3"}})
	ev, ok := c.waitEvent(10*time.Second, "exec", "")
	if !ok {
		t.Fatal("no exec event after an exec")
	}
	var ex airlock.ExecEvent
	if err := json.Unmarshal(ev["exec"], &ex); err != nil || ex.ExitCode != 3 || len(ex.Command) != 3 || ex.Command[0] != "sh" {
		t.Errorf("exec event %s: %v", ev["exec"], err)
	}
	if string(ev["sandbox_id"]) != `"`+sbID+`"` || string(ev["timestamp"]) == "0" {
		t.Errorf("event envelope: %v", ev)
	}

	// Only file events.
	var sr api.SubscribeResult
	c.result(3, api.MethodSubscribe, map[string]any{"types": []string{"file"}}, &sr)
	if len(sr.Types) != 1 || sr.Types[0] != "file" {
		t.Errorf("subscribe result %+v", sr)
	}
	c.exec(4, map[string]any{"command": "true"})
	c.result(5, api.MethodWriteFile, map[string]any{"path": "/workspace/f", "content": b64("abc")}, nil)
	c.result(6, api.MethodMkdir, map[string]any{"path": "/workspace/d/e", "parents": true}, nil)
	c.result(7, api.MethodRemove, map[string]any{"path": "/workspace/d", "recursive": true}, nil)
	for _, op := range []string{"write", "mkdir", "remove"} {
		ev, ok := c.waitEvent(10*time.Second, "file", op)
		if !ok {
			t.Errorf("no file event for %s", op)
			continue
		}
		var f airlock.FileEvent
		_ = json.Unmarshal(ev["file"], &f)
		if f.Path == "" || (op == "write" && f.Size != 3) {
			t.Errorf("file event %s: %+v", op, f)
		}
	}
	if _, ok := c.waitEvent(500*time.Millisecond, "exec", ""); ok {
		t.Error("an exec event arrived while subscribed to file events only")
	}

	// Unsubscribed: nothing.
	c.result(8, api.MethodUnsubscribe, nil, &sr)
	if len(sr.Types) != 0 {
		t.Errorf("unsubscribe result %+v", sr)
	}
	c.result(9, api.MethodWriteFile, map[string]any{"path": "/workspace/g", "content": b64("x")}, nil)
	c.exec(10, map[string]any{"command": "true"})
	if m, ok := c.note(500*time.Millisecond, func(m msg) bool { _, ok := eventOf(m); return ok }); ok {
		t.Errorf("event after unsubscribe: %v", m)
	}
	// All again.
	c.result(11, api.MethodSubscribe, nil, &sr)
	if len(sr.Types) != 4 {
		t.Errorf("subscribe to all: %+v", sr)
	}
	c.exec(12, map[string]any{"command": "true"})
	if _, ok := c.waitEvent(10*time.Second, "exec", ""); !ok {
		t.Error("no exec event after subscribing again")
	}
}

// TestEventQueueDrops checks that a full queue drops events without
// blocking, and counts them.
func TestEventQueueDrops(t *testing.T) {
	pr, pw := newBlockedWriter()
	defer pw()
	q := newEventQueue(&lineWriter{w: pr}, discardLogger())
	done := make(chan struct{})
	go func() {
		for range eventQueueLen + 100 {
			q.publish(airlock.Event{Type: airlock.EventExec, Exec: &airlock.ExecEvent{}})
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("publish blocked on a client that does not read")
	}
	// One event may be out of the queue, its write blocked.
	if d := q.dropped.Load(); d < 99 {
		t.Errorf("dropped %d, want at least 99", d)
	}
}
