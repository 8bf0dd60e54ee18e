package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/api"
)

// The examples of the protocol's specification (seed 000, "Programmatic
// API"), as written there. Params of method examples are wrapped in a
// request with "jsonrpc" and an id, which the examples leave out.
const (
	seedExecLine = `{"jsonrpc": "2.0", "method": "exec", "params": {"command": "echo hello"}, "id": 1}`
	seedCreate   = `{
    "image": "standard",
    "resources": {"cpus": 2, "memory_mb": 1024, "timeout_seconds": 300},
    "network": {
      "allowed_hosts": ["api.openai.com", "*.amazonaws.com"],
      "block_private_ips": true,
      "secrets": {
        "OPENAI_API_KEY": {
          "value": "sk-...",
          "hosts": ["api.openai.com"]
        }
      },
      "policy_script": "def is_allowed(host): return True"
    },
    "vfs": {
      "direct_mounts": {
        "/mnt/data": {"host_path": "/host/data", "readonly": true}
      },
      "mounts": {
        "/workspace": {"type": "memory"},
        "/config": {"type": "real_fs", "host_path": "/etc/app", "readonly": true},
        "/output": {"type": "overlay", "upper": {"type": "memory"}, "lower": {"type": "real_fs", "host_path": "/base"}}
      }
    },
    "env": {"OPENAI_API_KEY": "${OPENAI_API_KEY}"}
  }`
	seedWriteFile = `{"path": "/workspace/hello.py", "content": "%s", "mode": 420}`
	seedReadFile  = `{"path": "/workspace/hello.py"}`
	seedListFiles = `{"path": "/workspace"}`
	seedClose     = `{}`
)

// wrap makes a one-line request of a method example's params.
func wrap(t *testing.T, id int, method, params string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(params), &v); err != nil {
		t.Fatalf("example params: %v", err)
	}
	return `{"jsonrpc": "2.0", "method": "` + method + `", "params": ` + string(mustJSON(t, v)) + `, "id": ` + string(mustJSON(t, id)) + `}`
}

// without returns the create example without some of its members.
func without(t *testing.T, params string, keys ...string) string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(params), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		delete(m, k)
	}
	return string(mustJSON(t, m))
}

// field returns member key of the JSON object params.
func field(t *testing.T, params, key string) json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(params), &m); err != nil {
		t.Fatal(err)
	}
	return m[key]
}

// checkEnvelope checks the members every response has.
func checkEnvelope(t *testing.T, m msg, id string) {
	t.Helper()
	if string(m["jsonrpc"]) != `"2.0"` {
		t.Errorf("jsonrpc = %s", m["jsonrpc"])
	}
	if string(m["id"]) != id {
		t.Errorf("id = %s, want %s", m["id"], id)
	}
	_, hasResult := m["result"]
	_, hasError := m["error"]
	if hasResult == hasError {
		t.Errorf("want exactly one of result and error: %v", m)
	}
	for k := range m {
		switch k {
		case "jsonrpc", "id", "result", "error":
		default:
			t.Errorf("unexpected member %q in response", k)
		}
	}
}

func TestConformanceSeedExamples(t *testing.T) {
	needAgent(t)
	c := newClient(t, Options{AllowCreate: true, Version: "test"}, ServeOptions{})

	// The full create example mounts host directories this machine does
	// not have: refused before anything starts, naming the first one.
	c.send(wrap(t, 1, "create", seedCreate))
	m := c.next(1, time.Minute)
	checkEnvelope(t, m, "1")
	e := wantError(t, m, api.CodeInvalidParams)
	if !strings.Contains(e.Message, "host_path") || !strings.Contains(e.Message, "no such file") {
		t.Errorf("create with missing host directories: message %q should name the host_path", e.Message)
	}
	if strings.Contains(e.Message, "sk-...") {
		t.Errorf("create error quotes the secret's value: %q", e.Message)
	}
	// With those directories made (under a folder of the test's), the
	// example's mounts work: a memory workspace, a read-only real_fs, an
	// overlay that never changes its lower, and a read-only direct mount.
	t.Run("vfs", func(t *testing.T) {
		if _, err := os.Stat("/dev/fuse"); err != nil || os.Getuid() != 0 {
			t.Skip("programmable mounts need /dev/fuse and root here")
		}
		top := t.TempDir()
		os.Chmod(top, 0o755)
		vfsJSON := string(field(t, seedCreate, "vfs"))
		for _, dir := range []string{"/host/data", "/etc/app", "/base"} {
			if !strings.Contains(vfsJSON, `"`+dir+`"`) {
				t.Fatalf("the seed's vfs no longer names %s", dir)
			}
			if err := os.MkdirAll(top+dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(top+dir+"/from-host", []byte(dir), 0o644); err != nil {
				t.Fatal(err)
			}
			vfsJSON = strings.ReplaceAll(vfsJSON, `"`+dir+`"`, `"`+top+dir+`"`)
		}
		params := without(t, seedCreate, "network", "vfs", "image")
		params = params[:len(params)-1] + `,"vfs":` + vfsJSON + "}"
		c.send(wrap(t, 5, "create", params))
		m := c.next(5, time.Minute)
		var cr api.CreateResult
		if err := json.Unmarshal(m["result"], &cr); err != nil || cr.SandboxID == "" {
			t.Fatalf("create with the seed's vfs: %s (%s)", m["result"], m["error"])
		}
		var res api.ExecResult
		c.result(6, api.MethodExec, map[string]any{"sandbox_id": cr.SandboxID, "command": "echo hi > /workspace/x && cat /workspace/x /mnt/data/from-host /config/from-host /output/from-host && echo o > /output/new && (echo w > /config/w) 2>/dev/null; (echo w > /mnt/data/w) 2>/dev/null; grep -c fuse /proc/mounts"}, &res)
		if got := unb64(t, res.Stdout); got != "hi\n/host/data/etc/app/base3\n" {
			t.Errorf("the seed's mounts: stdout %q, stderr %q", got, unb64(t, res.Stderr))
		}
		for _, p := range []string{"/base/new", "/etc/app/w", "/host/data/w"} {
			if _, err := os.Stat(top + p); err == nil {
				t.Errorf("%s was written on the host", p)
			}
		}
		c.result(7, api.MethodClose, map[string]any{"sandbox_id": cr.SandboxID}, nil)
	})
	// Without vfs and network (which needs root; see
	// TestNetworkSeedExample), the example's image, standard, is the
	// sandbox's root: python is python3, as the seed's examples expect.
	t.Run("standard", func(t *testing.T) {
		useTestImage(t, "standard")
		c.send(wrap(t, 2, "create", without(t, seedCreate, "network", "vfs")))
		m := c.next(2, 10*time.Minute)
		checkEnvelope(t, m, "2")
		var cr api.CreateResult
		if err := json.Unmarshal(m["result"], &cr); err != nil || cr.Image.Name != "standard" {
			t.Fatalf("create with image standard: %s (%s)", m["result"], m["error"])
		}
		var res api.ExecResult
		c.result(3, api.MethodExec, map[string]any{"sandbox_id": cr.SandboxID, "command": "python -c 'print(1)'; cat /etc/debian_version >/dev/null && echo debian"}, &res)
		if unb64(t, res.Stdout) != "1\ndebian\n" {
			t.Fatalf("python in standard: %q, stderr %q", unb64(t, res.Stdout), unb64(t, res.Stderr))
		}
		c.result(30, api.MethodClose, map[string]any{"sandbox_id": cr.SandboxID}, nil)
	})
	// The rest of the example works.
	c.send(wrap(t, 4, "create", without(t, seedCreate, "network", "vfs", "image")))
	m = c.next(4, time.Minute)
	checkEnvelope(t, m, "4")
	var cr map[string]json.RawMessage
	if err := json.Unmarshal(m["result"], &cr); err != nil {
		t.Fatalf("create: %v (%s)", err, m["error"])
	}
	var sbID, isolation string
	var env map[string]string
	_ = json.Unmarshal(cr["sandbox_id"], &sbID)
	_ = json.Unmarshal(cr["isolation"], &isolation)
	_ = json.Unmarshal(cr["env"], &env)
	if !strings.HasPrefix(sbID, "sb-") || isolation != "process" {
		t.Errorf("create result: sandbox_id %q isolation %q", sbID, isolation)
	}
	if len(env) != 1 || env["OPENAI_API_KEY"] != "${OPENAI_API_KEY}" {
		t.Errorf("create result env = %v, want the env as given", env)
	}

	// exec, the request line verbatim.
	c.send(seedExecLine)
	m = c.next(1, time.Minute)
	checkEnvelope(t, m, "1")
	var res map[string]json.RawMessage
	if err := json.Unmarshal(m["result"], &res); err != nil {
		t.Fatalf("exec: %v (%s)", err, m["error"])
	}
	if string(res["exit_code"]) != "0" || string(res["stdout"]) != `"aGVsbG8K"` {
		t.Errorf("exec echo hello: exit_code %s stdout %s, want 0 \"aGVsbG8K\"", res["exit_code"], res["stdout"])
	}
	for _, k := range []string{"duration_ms", "cpu_time_ms", "peak_memory_bytes", "signal"} {
		if _, ok := res[k]; !ok {
			t.Errorf("exec result has no %s: %v", k, res)
		}
	}
	if string(res["killed_by"]) != "null" {
		t.Errorf("killed_by = %s, want null", res["killed_by"])
	}
	if _, ok := res["done"]; ok {
		t.Errorf("exec result has done: %v", res)
	}

	// write_file, read_file, list_files.
	script := "print('hello from python')\n"
	c.send(wrap(t, 5, "write_file", strings.Replace(seedWriteFile, "%s", b64(script), 1)))
	m = c.next(5, time.Minute)
	checkEnvelope(t, m, "5")
	if string(m["result"]) != `{"size":`+itoa(len(script))+`}` {
		t.Errorf("write_file result %s", m["result"])
	}
	c.send(wrap(t, 6, "read_file", seedReadFile))
	m = c.next(6, time.Minute)
	checkEnvelope(t, m, "6")
	var rf api.ReadFileResult
	if err := json.Unmarshal(m["result"], &rf); err != nil {
		t.Fatalf("read_file: %v (%s)", err, m["error"])
	}
	if unb64(t, rf.Content) != script || rf.Size != int64(len(script)) || rf.Mode != 420 {
		t.Errorf("read_file = %+v", rf)
	}
	c.send(wrap(t, 7, "list_files", seedListFiles))
	m = c.next(7, time.Minute)
	checkEnvelope(t, m, "7")
	var lf struct {
		Files []map[string]json.RawMessage `json:"files"`
	}
	if err := json.Unmarshal(m["result"], &lf); err != nil {
		t.Fatalf("list_files: %v (%s)", err, m["error"])
	}
	found := false
	for _, f := range lf.Files {
		if string(f["name"]) == `"hello.py"` {
			found = true
			if string(f["size"]) != itoa(len(script)) || string(f["mode"]) != "420" || string(f["is_dir"]) != "false" {
				t.Errorf("list_files entry %v", f)
			}
		}
	}
	if !found {
		t.Errorf("list_files: no hello.py in %s", m["result"])
	}

	// The exec example, with python3 (this machine has no "python").
	r := c.exec(8, map[string]any{"command": "python3 /workspace/hello.py", "working_dir": "/workspace"})
	if r.ExitCode != 0 || unb64(t, r.Stdout) != "hello from python\n" {
		t.Errorf("python3: %+v", r)
	}

	// exec_stream: several responses with the request's id, then one
	// with done and the exit status.
	c.request(9, api.MethodExecStream, map[string]any{"command": "printf one; sleep 0.2; printf two; echo oops >&2; sleep 0.2; exit 3"})
	var stdout, stderr string
	chunks := 0
	for {
		m := c.next(9, time.Minute)
		checkEnvelope(t, m, "9")
		var part map[string]json.RawMessage
		if err := json.Unmarshal(m["result"], &part); err != nil {
			t.Fatalf("exec_stream: %v (%s)", err, m["error"])
		}
		if string(part["done"]) == "true" {
			if string(part["exit_code"]) != "3" || part["duration_ms"] == nil {
				t.Errorf("final exec_stream response %s", m["result"])
			}
			if part["stdout"] != nil || part["stderr"] != nil {
				t.Errorf("final response carries output: %s", m["result"])
			}
			break
		}
		chunks++
		if len(part) != 1 {
			t.Errorf("chunk %s: want exactly one of stdout and stderr", m["result"])
		}
		var s string
		if raw, ok := part["stdout"]; ok {
			_ = json.Unmarshal(raw, &s)
			stdout += unb64(t, s)
		}
		if raw, ok := part["stderr"]; ok {
			_ = json.Unmarshal(raw, &s)
			stderr += unb64(t, s)
		}
	}
	if stdout != "onetwo" || stderr != "oops\n" || chunks < 2 {
		t.Errorf("exec_stream: stdout %q stderr %q in %d chunks", stdout, stderr, chunks)
	}

	// close, then the sandbox is gone.
	c.send(wrap(t, 10, "close", seedClose))
	m = c.next(10, time.Minute)
	checkEnvelope(t, m, "10")
	if string(m["result"]) != "{}" {
		t.Errorf("close result %s", m["result"])
	}
	if sb := c.sandboxFor(sbID); !waitFor(5*time.Second, func() bool { return stopped(sb) }) {
		t.Error("the sandbox still runs after close")
	}
	wantError(t, c.call(11, api.MethodExec, map[string]any{"command": "true"}), api.CodeNotRunning)
}

// TestConformanceStartFailed checks the error example: a sandbox that
// cannot start.
func TestConformanceStartFailed(t *testing.T) {
	c := newClient(t, Options{AllowCreate: true, Create: func(context.Context, airlock.Config) (*airlock.Sandbox, error) {
		return nil, errors.New("VM failed to start")
	}}, ServeOptions{})
	m := c.call(1, api.MethodCreate, nil)
	checkEnvelope(t, m, "1")
	e := wantError(t, m, api.CodeStartFailed)
	if !strings.Contains(e.Message, "VM failed to start") {
		t.Errorf("message %q", e.Message)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestCreateParams checks which create params this build accepts.
func TestCreateParams(t *testing.T) {
	needAgent(t)
	// A level that cannot run here is refused as unsupported.
	t.Setenv("AIRLOCK_RUNSC", "/nonexistent/airlock-runsc")
	c := newClient(t, Options{AllowCreate: true}, ServeOptions{})
	// A network is tested in network_test.go: it needs root.
	ok := []map[string]any{
		{"network": nil, "vfs": nil},
		{"vfs": map[string]any{}},
		{"vfs": map[string]any{"mounts": map[string]any{}}},
	}
	for i, p := range ok {
		c.create(fmt.Sprintf("ok-%d", i), p)
	}
	refused := []struct {
		params map[string]any
		code   int
		says   string
	}{
		{map[string]any{"network": map[string]any{"allowed_hosts": []string{"http://example.com/"}}}, api.CodeInvalidParams, "allowed_hosts[0]"},
		{map[string]any{"network": map[string]any{"proxy": "x"}}, api.CodeInvalidParams, `unknown field "network.proxy"`},
		{map[string]any{"network": "none"}, api.CodeInvalidParams, `"network" must be an object`},
		{map[string]any{"vfs": map[string]any{"mounts": map[string]any{"/w": map[string]any{"type": "ramdisk"}}}}, api.CodeInvalidParams, `unknown mount type "ramdisk"`},
		{map[string]any{"vfs": map[string]any{"mounts": map[string]any{"/w": map[string]any{"type": "memory", "size": 3}}}}, api.CodeInvalidParams, `unknown field "vfs.mounts./w.size"`},
		{map[string]any{"vfs": map[string]any{"direct_mounts": map[string]any{"/d": map[string]any{"host_path": "/nonexistent-airlock"}}}}, api.CodeInvalidParams, "no such file"},
		{map[string]any{"vfs": map[string]any{"mounts": map[string]any{"/proc/x": map[string]any{"type": "memory"}}}}, api.CodeInvalidParams, "/proc"},
		{map[string]any{"vfs": []string{"/w"}}, api.CodeInvalidParams, `"vfs" must be an object`},
		{map[string]any{"resources": map[string]any{"cpus": "two"}}, api.CodeInvalidParams, `"resources.cpus"`},
		{map[string]any{"resources": map[string]any{"memory_mb": 1}}, api.CodeInvalidParams, "memory_mb"},
		{map[string]any{"isolation": "teleport"}, api.CodeInvalidParams, "isolation"},
		{map[string]any{"env": map[string]any{"A=B": "x"}}, api.CodeInvalidParams, "A=B"},
		{map[string]any{"isolation": "gvisor"}, api.CodeUnsupported, "AIRLOCK_RUNSC names /nonexistent/airlock-runsc"},
	}
	for i, r := range refused {
		e := wantError(t, c.call(fmt.Sprintf("bad-%d", i), api.MethodCreate, r.params), r.code)
		if !strings.Contains(e.Message, r.says) {
			t.Errorf("create %v: message %q should mention %s", r.params, e.Message, r.says)
		}
	}
}
