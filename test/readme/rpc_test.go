// Package readme_test runs README.md's examples as they are written.
package readme_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testbin"
)

// transcript is README.md's JSON-RPC transcript: the lines it sends
// (→) and those it shows coming back (←).
func transcript(t *testing.T) (sent, shown []string) {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```\n(→ .*?)```").FindAllSubmatch(readme, -1)
	if len(blocks) != 1 {
		t.Fatalf("README.md has %d transcripts (blocks of → and ← lines), want 1", len(blocks))
	}
	for _, l := range strings.Split(strings.TrimSpace(string(blocks[0][1])), "\n") {
		switch {
		case strings.HasPrefix(l, "→ "):
			sent = append(sent, strings.TrimPrefix(l, "→ "))
		case strings.HasPrefix(l, "← "):
			shown = append(shown, strings.TrimPrefix(l, "← "))
		default:
			t.Fatalf("a transcript line that is neither → nor ←: %q", l)
		}
	}
	return sent, shown
}

// shape is what a line says, without what differs between runs (ids of
// sandboxes, times, sizes of memory): a response's id and the keys of
// its result (or its error's code), or an event's type.
type shape struct {
	kind, id, what string
}

func shapeOf(t *testing.T, line string) shape {
	t.Helper()
	var m struct {
		ID     json.RawMessage            `json:"id"`
		Method string                     `json:"method"`
		Result map[string]json.RawMessage `json:"result"`
		Error  *struct{ Code int }        `json:"error"`
		Params struct{ Type string }      `json:"params"`
	}
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		t.Fatalf("line %q: %v", line, err)
	}
	switch {
	case m.Method == "event":
		return shape{kind: "event", what: m.Params.Type}
	case m.Error != nil:
		return shape{kind: "error", id: string(m.ID), what: fmt.Sprint(m.Error.Code)}
	}
	keys := make([]string, 0, len(m.Result))
	for k := range m.Result {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return shape{kind: "result", id: string(m.ID), what: strings.Join(keys, ",")}
}

// TestReadmeTranscriptPipedIn writes README.md's requests to a file and
// runs `airlock rpc < file`, as a reader would try it: every request is
// answered as the transcript shows (each id's responses in order, with
// the result's keys the README shows), with the events it shows, and
// the session ends cleanly once the file is done.
func TestReadmeTranscriptPipedIn(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, as the README's sandboxes do by default")
	}
	sent, shown := transcript(t)
	dir, err := testbin.Dir("readme-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bins, err := testbin.Build(dir, "airlock", "airlock-guest")
	if err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(dir, "requests.jsonl")
	if err := os.WriteFile(in, []byte(strings.Join(sent, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(bins[0], "rpc")
	cmd.Stdin = f
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = append(os.Environ(), "AIRLOCK_HOME="+filepath.Join(dir, "home"))
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("airlock rpc < requests.jsonl: %v\n%s", err, stderr.String())
		}
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		t.Fatalf("airlock rpc < requests.jsonl did not end within 2 minutes\n%s", stderr.String())
	}
	got := strings.Split(strings.TrimSpace(stdout.String()), "\n")

	// Each id's responses, in order; an exec_stream's chunks of stdout
	// and stderr may come in either order, so chunks compare as a set.
	byID := func(lines []string) (map[string][]string, []string) {
		resp := map[string][]string{}
		var events []string
		for _, l := range lines {
			s := shapeOf(t, l)
			if s.kind == "event" {
				events = append(events, s.what)
				continue
			}
			resp[s.id] = append(resp[s.id], s.kind+":"+s.what)
		}
		for id, rs := range resp {
			if n := len(rs); n > 1 {
				slices.Sort(rs[:n-1])
			}
			resp[id] = rs
		}
		slices.Sort(events)
		return resp, events
	}
	wantResp, wantEvents := byID(shown)
	gotResp, gotEvents := byID(got)
	for id, want := range wantResp {
		if !slices.Equal(gotResp[id], want) {
			t.Errorf("id %s: airlock answered %q, README.md shows %q", id, gotResp[id], want)
		}
	}
	for id := range gotResp {
		if _, ok := wantResp[id]; !ok {
			t.Errorf("id %s: airlock answered %q, README.md shows nothing", id, gotResp[id])
		}
	}
	if !slices.Equal(gotEvents, wantEvents) {
		t.Errorf("events: airlock sent %q, README.md shows %q", gotEvents, wantEvents)
	}
	if t.Failed() {
		t.Logf("airlock's output:\n%s", stdout.String())
	}
}
