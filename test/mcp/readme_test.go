package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/internal/testbin"
)

// readmeServer is the MCP client configuration that README.md shows: the
// "mcpServers" block of its MCP section.
func readmeServer(t *testing.T) (name, command string, args []string) {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, m := range regexp.MustCompile("(?s)```json\n(.*?)```").FindAllSubmatch(readme, -1) {
		if bytes.Contains(m[1], []byte(`"mcpServers"`)) {
			found = append(found, string(m[1]))
		}
	}
	if len(found) != 1 {
		t.Fatalf("README.md has %d json blocks with mcpServers, want 1", len(found))
	}
	var cfg struct {
		MCPServers map[string]struct {
			Command string   `json:"command"`
			Args    []string `json:"args"`
		} `json:"mcpServers"`
	}
	dec := json.NewDecoder(strings.NewReader(found[0]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		t.Fatalf("README.md's mcpServers block: %v\n%s", err, found[0])
	}
	if len(cfg.MCPServers) != 1 {
		t.Fatalf("README.md's mcpServers block names %d servers, want 1", len(cfg.MCPServers))
	}
	for name, s := range cfg.MCPServers {
		return name, s.Command, s.Args
	}
	panic("unreachable")
}

// TestReadmeClientConfig starts the server exactly as README.md tells an
// MCP client to (its command, found on PATH, and its arguments), lists
// its tools and closes it.
func TestReadmeClientConfig(t *testing.T) {
	name, command, args := readmeServer(t)
	if command != "airlock" {
		t.Fatalf("README.md's %s server runs %q, not airlock", name, command)
	}
	dir, err := testbin.Dir("airlock-mcp-readme-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if _, err := testbin.Build(dir, "airlock-guest", "airlock"); err != nil {
		t.Fatal(err)
	}
	// As a client starts it: by name, from PATH, with the keys that its
	// --secret flags name in the environment (a placeholder value).
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("AIRLOCK_HOME", filepath.Join(dir, "home"))
	t.Setenv("AIRLOCK_AGENT", "")
	for i, a := range args {
		if a == "--secret" && i+1 < len(args) {
			key, _, _ := strings.Cut(args[i+1], "@")
			t.Setenv(key, "sk-readme-test")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, command, args...)
	if cmd.Err != nil || filepath.Dir(cmd.Path) != dir {
		t.Fatalf("%s resolves to %s (%v), not the airlock built in %s", command, cmd.Path, cmd.Err, dir)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "readme", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("start %s %q: %v\n%s", command, args, err, stderr.String())
	}
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatalf("list tools: %v\n%s", err, stderr.String())
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	want := []string{"exec", "list_files", "policy_allow", "processes", "read_file", "sandbox_close", "sandbox_create", "write_file"}
	if !slices.Equal(names, want) {
		t.Errorf("tools %v, want %v", names, want)
	}
	if err := cs.Close(); err != nil {
		t.Errorf("close: %v\n%s", err, stderr.String())
	}
	if cmd.ProcessState == nil || !cmd.ProcessState.Success() {
		t.Errorf("the server did not exit by itself once closed: %v\n%s", cmd.ProcessState, stderr.String())
	}
}
