// Package mcp_test drives `airlock mcp` with the official TypeScript MCP
// client from npm (@modelcontextprotocol/sdk, pinned in
// package-lock.json), as an MCP host starts it: client.mjs lists the
// tools, creates a sandbox, runs commands, moves a file, and makes a
// model's mistakes; every sandbox must be gone once the client is.
package mcp_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testbin"
)

func TestOfficialClient(t *testing.T) {
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed: the official MCP client runs on Node.js", tool)
		}
	}
	dir, err := testbin.Dir("airlock-mcp-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	bins, err := testbin.Build(dir, "airlock-guest", "airlock")
	if err != nil {
		t.Fatal(err)
	}
	// The client's packages, as the lockfile pins them, in a copy of
	// this folder so the checkout gets no node_modules.
	work := filepath.Join(dir, "client")
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"package.json", "package-lock.json", "client.mjs"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(work, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	install := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund", "--prefer-offline")
	install.Dir = work
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("npm ci: %v\n%s", err, out)
	}
	cmd := exec.CommandContext(ctx, "node", "client.mjs", bins[1])
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "AIRLOCK_AGENT="+bins[0], "AIRLOCK_HOME="+filepath.Join(dir, "home"))
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("the official MCP client: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), stderr.String())
	}
	want := "tools 8\ncreated\nexec\nread_file\nprocesses\nhuge output\nmistakes\nclosed\ndone\n"
	if out.String() != want {
		t.Errorf("client output:\n%s\nwant:\n%s", out.String(), want)
	}
	// The sandbox the client left open went with it: no agent of this
	// test's build runs any more.
	if !testbin.WaitFor(20*time.Second, func() bool { return !running(bins[0]) }) {
		t.Error("a sandbox outlived the MCP client that made it")
	}
}

// running reports whether a process runs the executable at path.
func running(path string) bool {
	procs, _ := filepath.Glob("/proc/[0-9]*/exe")
	for _, p := range procs {
		if target, err := os.Readlink(p); err == nil && strings.TrimSuffix(target, " (deleted)") == path {
			return true
		}
	}
	return false
}
