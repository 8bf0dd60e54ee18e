package mcpserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/mcpserver"
	"github.com/airlock-sandbox/airlock/internal/testbin"
)

func TestMain(m *testing.M) {
	dir, err := testbin.Dir("airlock-mcp-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "TestMain:", err)
		os.Exit(2)
	}
	bins, err := testbin.Build(dir, "airlock-guest")
	if err != nil {
		fmt.Fprintln(os.Stderr, "TestMain:", err)
		os.Exit(2)
	}
	os.Setenv("AIRLOCK_AGENT", bins[0])
	os.Setenv("AIRLOCK_HOME", dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// session connects a client of the official SDK to a server, through
// in-memory transports; the returned func ends the session and reports
// the server's sandboxes, which must all be closed then.
func session(t *testing.T, o mcpserver.Options) (*mcp.ClientSession, func() []*airlock.Sandbox) {
	t.Helper()
	var made []*airlock.Sandbox
	o.Create = func(ctx context.Context, cfg airlock.Config) (*airlock.Sandbox, error) {
		sb, err := airlock.Create(ctx, cfg)
		if err == nil {
			made = append(made, sb)
		}
		return sb, err
	}
	ct, st := mcp.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mcpserver.New(o).Run(ctx, st) }()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(context.Background(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	end := func() []*airlock.Sandbox {
		once.Do(func() {
			cs.Close()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Error("the server did not end after its client went away")
			}
			cancel()
		})
		return made
	}
	t.Cleanup(func() { end() })
	return cs, end
}

// call calls a tool and decodes its structured result into out; it
// returns the result.
func call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, out any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if out != nil && !res.IsError {
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: decode %s: %v", name, b, err)
		}
	}
	return res
}

func errText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func TestTools(t *testing.T) {
	cs, end := session(t, mcpserver.Options{MaxOutputBytes: 1000, MaxReadBytes: 100})
	ctx := context.Background()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"sandbox_create": true, "exec": true, "write_file": true, "read_file": true, "list_files": true, "sandbox_close": true, "policy_allow": true, "processes": true}
	for _, tool := range tools.Tools {
		if !want[tool.Name] {
			t.Errorf("unexpected tool %s", tool.Name)
		}
		delete(want, tool.Name)
		if len(tool.Description) < 20 || tool.InputSchema == nil {
			t.Errorf("tool %s has no description or schema for a model", tool.Name)
		}
	}
	if len(want) > 0 {
		t.Errorf("tools missing: %v", want)
	}

	var created struct {
		SandboxID string `json:"sandbox_id"`
	}
	call(t, cs, "sandbox_create", map[string]any{"memory_mb": 256}, &created)
	id := created.SandboxID
	var ex struct {
		ExitCode        int    `json:"exit_code"`
		Stdout          string `json:"stdout"`
		StdoutTruncated bool   `json:"stdout_truncated"`
	}
	call(t, cs, "exec", map[string]any{"sandbox_id": id, "command": "echo hello; exit 3"}, &ex)
	if ex.ExitCode != 3 || ex.Stdout != "hello\n" {
		t.Errorf("exec: %+v", ex)
	}
	// A huge output is cut at the bound, and the result says so.
	ex = struct {
		ExitCode        int    `json:"exit_code"`
		Stdout          string `json:"stdout"`
		StdoutTruncated bool   `json:"stdout_truncated"`
	}{}
	call(t, cs, "exec", map[string]any{"sandbox_id": id, "command": "yes | head -c 10000000"}, &ex)
	if !ex.StdoutTruncated || len(ex.Stdout) > 1000 {
		t.Errorf("huge output: %d bytes, truncated %v", len(ex.Stdout), ex.StdoutTruncated)
	}
	// In the background: started, left running, its pid returned; a
	// later command reaches it.
	var bg struct {
		ExitCode int `json:"exit_code"`
		Pid      int `json:"pid"`
	}
	call(t, cs, "exec", map[string]any{"sandbox_id": id, "command": "echo started > /tmp/bg; exec sleep 1000", "background": true}, &bg)
	if bg.Pid <= 0 {
		t.Errorf("exec in the background: %+v", bg)
	}
	ex.Stdout = ""
	call(t, cs, "exec", map[string]any{"sandbox_id": id, "command": fmt.Sprintf("for i in $(seq 100); do [ -s /tmp/bg ] && break; sleep 0.1; done; kill -0 %d && cat /tmp/bg", bg.Pid)}, &ex)
	if ex.ExitCode != 0 || ex.Stdout != "started\n" {
		t.Errorf("the command left running in the background: %+v", ex)
	}
	var ps struct {
		Processes []struct {
			PID     int    `json:"pid"`
			Command string `json:"command"`
		} `json:"processes"`
	}
	call(t, cs, "processes", map[string]any{"sandbox_id": id}, &ps)
	seen := false
	for _, p := range ps.Processes {
		seen = seen || p.PID == bg.Pid && p.Command == "sleep 1000"
	}
	if !seen {
		t.Errorf("processes: %+v, want the background command %d", ps.Processes, bg.Pid)
	}
	call(t, cs, "write_file", map[string]any{"sandbox_id": id, "path": "/workspace/a.txt", "content": strings.Repeat("x", 150)}, nil)
	var rd struct {
		Content   string `json:"content"`
		Size      int64  `json:"size"`
		Truncated bool   `json:"truncated"`
	}
	call(t, cs, "read_file", map[string]any{"sandbox_id": id, "path": "/workspace/a.txt"}, &rd)
	if len(rd.Content) != 100 || rd.Size != 150 || !rd.Truncated {
		t.Errorf("read_file of a file over the bound: %d bytes of %d, truncated %v", len(rd.Content), rd.Size, rd.Truncated)
	}
	rd.Truncated = false
	call(t, cs, "read_file", map[string]any{"sandbox_id": id, "path": "/workspace/a.txt", "offset": 100}, &rd)
	if len(rd.Content) != 50 || rd.Truncated {
		t.Errorf("read_file's second part: %d bytes of %d, truncated %v", len(rd.Content), rd.Size, rd.Truncated)
	}
	var ls struct {
		Entries []struct{ Name, Type string } `json:"entries"`
	}
	call(t, cs, "list_files", map[string]any{"sandbox_id": id, "path": "/workspace"}, &ls)
	if len(ls.Entries) != 1 || ls.Entries[0].Name != "a.txt" || ls.Entries[0].Type != "file" {
		t.Errorf("list_files: %+v", ls.Entries)
	}

	// What a model could get wrong is a tool error it can read, and the
	// session goes on.
	for _, c := range []struct {
		name string
		args map[string]any
		says string
	}{
		{"exec", map[string]any{"sandbox_id": "sb-nope", "command": "true"}, "no sandbox"},
		{"exec", map[string]any{"sandbox_id": id}, "command"},
		{"exec", map[string]any{"sandbox_id": id, "command": 5}, "command"},
		{"exec", map[string]any{"sandbox_id": id, "command": "true", "timeout_seconds": 99999}, "timeout_seconds"},
		{"read_file", map[string]any{"sandbox_id": id, "path": "/nope"}, "/nope"},
		{"policy_allow", map[string]any{"sandbox_id": id, "host": "example.com"}, "network"},
	} {
		res := call(t, cs, c.name, c.args, nil)
		if !res.IsError || !strings.Contains(errText(res), c.says) {
			t.Errorf("%s %v: error %v %q, want one that mentions %q", c.name, c.args, res.IsError, errText(res), c.says)
		}
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "rm_rf", Arguments: map[string]any{}}); err == nil {
		t.Error("an unknown tool was called")
	}
	call(t, cs, "exec", map[string]any{"sandbox_id": id, "command": "true"}, &ex)

	// A second sandbox, left open: the end of the session closes both.
	call(t, cs, "sandbox_create", map[string]any{}, &created)
	for _, sb := range end() {
		select {
		case <-sb.Done():
		default:
			t.Errorf("sandbox %s is open after its client went away", sb.ID())
		}
	}
}
