package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/internal/testbin"
)

// apiKey is the key my-sandbox is given; no sandbox may see it.
const apiKey = "sk-my-sandbox-7f3a9c0e51d2"

// mySandbox is the program as a user builds it, alone in its folder (it
// serves as its own agent), with its state in a folder of the test's.
type mySandbox struct {
	bin, home string
}

func build(t *testing.T) *mySandbox {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("sandboxes run on Linux")
	}
	if os.Geteuid() != 0 {
		t.Skip("my-sandbox gives every sandbox a network, which needs root")
	}
	dir := t.TempDir()
	// Sandboxes run as other uids and must reach the binary.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "my-sandbox")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return &mySandbox{bin: bin, home: filepath.Join(dir, "home")}
}

// cmd is my-sandbox with args, as a user runs it: no airlock-guest on
// PATH or in $AIRLOCK_AGENT, and the key in its environment.
func (m *mySandbox) cmd(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, m.bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AIRLOCK_") && !strings.HasPrefix(kv, "PATH=") && !strings.HasPrefix(kv, "MY_SANDBOX_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "PATH=/usr/bin:/bin", "AIRLOCK_HOME="+m.home, "MY_SANDBOX_API_KEY="+apiKey)
	return cmd
}

type result struct {
	stdout, stderr string
	code           int
}

func (m *mySandbox) run(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := m.cmd(ctx, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("my-sandbox %q: %v", args, err)
	}
	if strings.Contains(r.stdout+r.stderr, apiKey) {
		t.Errorf("my-sandbox %q shows the key:\n%s\n%s", args, r.stdout, r.stderr)
	}
	return r
}

func TestMySandbox(t *testing.T) {
	m := build(t)

	t.Run("help", func(t *testing.T) {
		r := m.run(t, "run", "--help")
		if r.code != 0 || !strings.Contains(r.stdout, "my-sandbox run -- python3") || strings.Contains(r.stdout, "airlock run") {
			t.Errorf("run --help: exit %d\n%s", r.code, r.stdout)
		}
	})

	t.Run("provider", func(t *testing.T) {
		r := m.run(t, "run", "--", "cat", "/data/motd.txt")
		if r.code != 0 || r.stdout != motd {
			t.Errorf("cat /data/motd.txt: exit %d, %q, stderr %q; want %q", r.code, r.stdout, r.stderr, motd)
		}
	})

	t.Run("flags", func(t *testing.T) {
		r := m.run(t, "run", "--hostname", "from-a-flag", "-e", "GREETING=hi", "--mount", "type=memory,target=/workspace",
			"--", "sh", "-c", `hostname; echo "$GREETING $MODE"; echo made > /workspace/f && cat /workspace/f /data/motd.txt`)
		want := "from-a-flag\nhi my-sandbox\nmade\n" + motd
		if r.code != 0 || r.stdout != want {
			t.Errorf("flags at run time: exit %d, %q, stderr %q; want %q", r.code, r.stdout, r.stderr, want)
		}
		// A flag adds to the built-in mounts; it cannot replace one.
		r = m.run(t, "run", "--mount", "type=memory,target=/data", "--", "true")
		if r.code != 125 || !strings.Contains(r.stderr, "my-sandbox: /data is a mount built into my-sandbox") {
			t.Errorf("--mount over /data: exit %d, stderr %q", r.code, r.stderr)
		}
	})

	t.Run("hook", func(t *testing.T) {
		r := m.run(t, "run", "--mount", "type=memory,target=/workspace", "--", "sh", "-c",
			"rm /data/motd.txt; cat /data/motd.txt; touch /workspace/f && rm /workspace/f && echo removed")
		if r.code != 0 || r.stdout != motd+"removed\n" || !strings.Contains(r.stderr, "Operation not permitted") {
			t.Errorf("rm in /data: exit %d, %q, stderr %q", r.code, r.stdout, r.stderr)
		}
	})

	t.Run("secret", func(t *testing.T) {
		// m.run fails the test if the key shows in any output.
		r := m.run(t, "run", "--", "sh", "-c", `echo "key=$API_KEY"; env; cat /proc/self/environ; grep -rsI . /etc /data /tmp || true`)
		if r.code != 0 || !strings.Contains(r.stdout, "key=AIRLOCK_SECRET_API_KEY_") {
			t.Errorf("$API_KEY is not a placeholder: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
		}
	})

	t.Run("detached", func(t *testing.T) {
		r := m.run(t, "run", "--detach", "--timeout", "2m")
		id := strings.TrimSpace(r.stdout)
		if r.code != 0 || !strings.HasPrefix(id, "sb-") {
			t.Fatalf("run --detach: exit %d, %q, stderr %q", r.code, r.stdout, r.stderr)
		}
		defer m.run(t, "rm", "-f", id)
		if r := m.run(t, "exec", id, "--", "cat", "/data/motd.txt"); r.code != 0 || r.stdout != motd {
			t.Errorf("exec in a detached sandbox: exit %d, %q, stderr %q", r.code, r.stdout, r.stderr)
		}
		noKeyIn(t, m.home)
	})

	t.Run("rpc", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := m.cmd(ctx, "--rpc")
		in, _ := cmd.StdinPipe()
		out, _ := cmd.StdoutPipe()
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := bufio.NewScanner(out)
		lines.Buffer(nil, 1<<20)
		call := func(id int, method string, params any) json.RawMessage {
			t.Helper()
			req, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
			if _, err := in.Write(append(req, '\n')); err != nil {
				t.Fatal(err)
			}
			for lines.Scan() {
				var resp struct {
					ID     *int            `json:"id"`
					Result json.RawMessage `json:"result"`
					Error  json.RawMessage `json:"error"`
				}
				if err := json.Unmarshal(lines.Bytes(), &resp); err != nil {
					t.Fatalf("%s", lines.Bytes())
				}
				if resp.ID == nil || *resp.ID != id {
					continue // an event
				}
				if resp.Error != nil {
					t.Fatalf("%s: %s", method, resp.Error)
				}
				if bytes.Contains(resp.Result, []byte(apiKey)) {
					t.Errorf("%s answers with the key: %s", method, resp.Result)
				}
				return resp.Result
			}
			t.Fatalf("%s: no answer: %v", method, lines.Err())
			return nil
		}
		call(1, "create", map[string]any{"env": map[string]string{"FROM_JSON": "yes"}})
		var res struct {
			ExitCode int    `json:"exit_code"`
			Stdout   string `json:"stdout"`
		}
		if err := json.Unmarshal(call(2, "exec", map[string]any{"command": `cat /data/motd.txt; echo "$FROM_JSON $MODE"`}), &res); err != nil {
			t.Fatal(err)
		}
		got, _ := base64.StdEncoding.DecodeString(res.Stdout)
		if want := motd + "yes my-sandbox\n"; res.ExitCode != 0 || string(got) != want {
			t.Errorf("exec over JSON-RPC: exit %d, %q; want %q", res.ExitCode, got, want)
		}
		call(3, "close", map[string]any{})
		in.Close()
		_, _ = io.Copy(io.Discard, out)
		if err := cmd.Wait(); err != nil {
			t.Errorf("my-sandbox --rpc: %v", err)
		}
	})

	t.Run("mcp", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).
			Connect(ctx, &mcp.CommandTransport{Command: m.cmd(ctx, "mcp")}, nil)
		if err != nil {
			t.Fatalf("connect to my-sandbox mcp: %v", err)
		}
		defer cs.Close()
		tool := func(name string, args map[string]any, out any) {
			t.Helper()
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
			if err != nil || res.IsError {
				t.Fatalf("%s: %v %+v", name, err, res)
			}
			b, _ := json.Marshal(res.StructuredContent)
			if bytes.Contains(b, []byte(apiKey)) {
				t.Errorf("%s answers with the key: %s", name, b)
			}
			if err := json.Unmarshal(b, out); err != nil {
				t.Fatal(err)
			}
		}
		var created struct {
			SandboxID string   `json:"sandbox_id"`
			Env       []string `json:"env"`
		}
		tool("sandbox_create", map[string]any{}, &created)
		if len(created.Env) != 1 || created.Env[0] != "API_KEY" {
			t.Errorf("sandbox_create: env %v, want [API_KEY]", created.Env)
		}
		var ran struct {
			ExitCode int    `json:"exit_code"`
			Stdout   string `json:"stdout"`
		}
		tool("exec", map[string]any{"sandbox_id": created.SandboxID, "command": "cat /data/motd.txt"}, &ran)
		if ran.ExitCode != 0 || ran.Stdout != motd {
			t.Errorf("exec over MCP: exit %d, %q", ran.ExitCode, ran.Stdout)
		}
	})
}

// noKeyIn fails the test if a file under dir holds the key.
func noKeyIn(t *testing.T, dir string) {
	t.Helper()
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if b, err := os.ReadFile(path); err == nil && bytes.Contains(b, []byte(apiKey)) {
			t.Errorf("%s holds the key", path)
		}
		return nil
	})
}

// TestReadmeShowsThisCode: the Go code of README.md's section on a CLI
// of one's own is this program's: its lines, but for "// ..." that
// stands for lines left out, are lines of main.go, in the same order.
func TestReadmeShowsThisCode(t *testing.T) {
	testbin.ReadmeShowsCode(t, "../../README.md", "Your own CLI in Go", "main.go")
}
