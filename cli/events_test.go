package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/client"
)

// eventLines follows the output of a running `airlock events`: each line
// read is sent on the channel, which closes when the command's output ends.
func eventLines(t *testing.T, out io.Reader) <-chan string {
	t.Helper()
	ch := make(chan string, 1024)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			ch <- sc.Text()
		}
	}()
	return ch
}

// waitLine waits until a line that ok accepts comes, and returns it.
func waitLine(t *testing.T, lines <-chan string, what string, ok func(string) bool) string {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		select {
		case l, open := <-lines:
			if !open {
				t.Fatalf("events ended before %s", what)
			}
			if ok(l) {
				return l
			}
		case <-deadline:
			t.Fatalf("no event of %s in a minute", what)
		}
	}
}

// TestEvents: airlock events prints what sandboxes do as it happens: the
// commands run in them, files written into them, their pauses and their
// end; with an id, it returns once that sandbox has stopped.
func TestEvents(t *testing.T) {
	t.Parallel()
	h := newCLIHome(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := h.cmd(ctx, nil, "events", "--json")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	lines := eventLines(t, out)
	id := strings.TrimSpace(h.must(nil, "run", "-d", "--name", "ev"))
	type event struct {
		Type      string `json:"type"`
		SandboxID string `json:"sandbox_id"`
		Exec      *struct {
			Command  []string `json:"command"`
			ExitCode int      `json:"exit_code"`
		} `json:"exec"`
		File *struct {
			Op   string `json:"op"`
			Path string `json:"path"`
		} `json:"file"`
		Lifecycle *struct {
			State string `json:"state"`
		} `json:"lifecycle"`
	}
	parse := func(l string) event {
		var e event
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("events --json printed %q: %v", l, err)
		}
		return e
	}
	// Commands until the first one's event comes: events reaches a new
	// sandbox within a second.
	found := make(chan struct{})
	go func() {
		for {
			select {
			case <-found:
				return
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
				h.run(nil, "exec", id, "--", "sh", "-c", "exit 7")
			}
		}
	}()
	waitLine(t, lines, "exec", func(l string) bool {
		e := parse(l)
		return e.SandboxID == id && e.Exec != nil && e.Exec.ExitCode == 7
	})
	close(found)
	src := t.TempDir() + "/in.txt"
	os.WriteFile(src, []byte("hello"), 0o644)
	h.must(nil, "cp", src, id+":/tmp/in.txt")
	waitLine(t, lines, "a file written by cp", func(l string) bool {
		e := parse(l)
		return e.File != nil && e.File.Path == "/tmp/in.txt"
	})
	h.must(nil, "pause", id)
	h.must(nil, "unpause", id)
	for _, state := range []string{"paused", "resumed"} {
		waitLine(t, lines, state, func(l string) bool {
			e := parse(l)
			return e.Lifecycle != nil && e.Lifecycle.State == state
		})
	}
	h.must(nil, "kill", id)
	waitLine(t, lines, "the end", func(l string) bool {
		e := parse(l)
		return e.SandboxID == id && e.Lifecycle != nil && e.Lifecycle.State == "stopped"
	})

	// With an id and a filter: only that, until it stops; text lines.
	id2 := strings.TrimSpace(h.must(nil, "run", "-d", "--name", "ev2"))
	cmd2 := h.cmd(ctx, nil, "events", "--filter", "type=lifecycle", "ev2")
	out2, err := cmd2.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd2.Start(); err != nil {
		t.Fatal(err)
	}
	lines2 := eventLines(t, out2)
	paused := make(chan struct{})
	go func() {
		for {
			select {
			case <-paused:
				return
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
				h.run(nil, "exec", id2, "--", "true") // not a lifecycle event: filtered out
				h.run(nil, "pause", id2)
				h.run(nil, "unpause", id2)
			}
		}
	}()
	first := waitLine(t, lines2, "paused", func(l string) bool { return strings.Contains(l, "lifecycle paused") })
	close(paused)
	if !strings.Contains(first, id2+" (ev2) lifecycle paused") || !strings.HasPrefix(first, time.Now().UTC().Format("2006-")) {
		t.Errorf("a text line: %q", first)
	}
	h.must(nil, "stop", "ev2")
	waitLine(t, lines2, "stopped", func(l string) bool { return strings.Contains(l, id2+" (ev2) lifecycle stopped") })
	var rest []string
	for l := range lines2 {
		rest = append(rest, l)
	}
	for _, l := range rest {
		if !strings.Contains(l, " lifecycle ") {
			t.Errorf("events --filter type=lifecycle printed %q", l)
		}
	}
	if err := cmd2.Wait(); err != nil {
		t.Errorf("events ev2 after ev2 stopped: %v", err)
	}
	if r := h.run(nil, "events", "--filter", "type=disk"); r.code == 0 || !strings.Contains(r.stderr, "exec, file, network, lifecycle") {
		t.Errorf("events --filter type=disk: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestEventText: an event's line says what happened, and what was
// blocked and why; --filter blocked keeps only those.
func TestEventText(t *testing.T) {
	f, err := parseEventFilters([]string{"blocked=true"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ev   client.Event
		want string
		kept bool
	}{
		{client.Event{Exec: &api.ExecEvent{Command: []string{"sh", "-c", "echo 'hi'; exit 2"}, ExitCode: 2, DurationMs: 4}},
			`exit 2 after 4ms: sh -c 'echo '\''hi'\''; exit 2'`, false},
		{client.Event{Exec: &api.ExecEvent{Command: []string{"sleep", "9"}, ExitCode: 124, KilledBy: "timeout", DurationMs: 1000}},
			`exit 124, killed by timeout after 1s: sleep 9`, false},
		{client.Event{Network: &api.NetworkEvent{Kind: "http", Method: "GET", URL: "https://evil.example/x", Blocked: true, Reason: "host not allowed"}},
			`http GET https://evil.example/x BLOCKED: host not allowed`, true},
		{client.Event{Network: &api.NetworkEvent{Kind: "connect", IP: "10.0.0.1", Port: 22, Proto: "tcp", Blocked: true, Reason: "private address"}},
			`connect 10.0.0.1:22 tcp BLOCKED: private address`, true},
		{client.Event{Network: &api.NetworkEvent{Kind: "http", Method: "POST", URL: "https://api.example.com/v1", StatusCode: 200}},
			`http POST https://api.example.com/v1 -> 200`, false},
		{client.Event{File: &api.FileEvent{Op: "rename", Path: "/w/a", To: "/w/b"}}, `rename /w/a -> /w/b`, false},
		{client.Event{File: &api.FileEvent{Op: "write", Path: "/etc/x", Size: 3, Blocked: true, Reason: "EROFS"}}, `write /etc/x (3 bytes) BLOCKED: EROFS`, true},
		{client.Event{Lifecycle: &api.LifecycleEvent{State: "crashed", Reason: "the agent died"}}, `crashed: the agent died`, false},
	} {
		if got := eventText(c.ev); got != c.want {
			t.Errorf("eventText:\n got %s\nwant %s", got, c.want)
		}
		if f.keep(c.ev) != c.kept {
			t.Errorf("--filter blocked=true keeps %q: %v", c.want, !c.kept)
		}
	}
	for _, bad := range []string{"type=disk", "blocked=maybe", "colour=red", "type"} {
		if _, err := parseEventFilters([]string{bad}); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("--filter %s: %v", bad, err)
		}
	}
}
