package rpc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/api"
)

// misspelt is, per method, params with one field misspelt: the field's
// path and the one it was meant to be ("" when none is close).
var misspelt = []struct {
	method     string
	params     map[string]any
	field, sug string
}{
	{api.MethodCreate, map[string]any{"resources": map[string]any{"memory_mbs": 512}}, "resources.memory_mbs", "resources.memory_mb"},
	{api.MethodCreate, map[string]any{"pids_limt": 5}, "pids_limt", "pids_limit"},
	{api.MethodCreate, map[string]any{"memory_mb": 512}, "memory_mb", ""},
	{api.MethodCreate, map[string]any{"network": map[string]any{"secrets": map[string]any{"K": map[string]any{"value": "v", "hots": []string{"a.com"}}}}}, "network.secrets.K.hots", "network.secrets.K.hosts"},
	{api.MethodCreate, map[string]any{"network": map[string]any{"egress": []any{map[string]any{"destination": "a.com", "port": []int{22}}}}}, "network.egress[0].port", "network.egress[0].ports"},
	{api.MethodExec, map[string]any{"comand": "touch /tmp/ran"}, "comand", "command"},
	{api.MethodExec, map[string]any{"command": "touch /tmp/ran", "timeout": 1}, "timeout", ""},
	{api.MethodExec, map[string]any{"argv": []string{"touch", "/tmp/ran"}, "enviroment": map[string]string{}}, "enviroment", ""},
	{api.MethodExecStream, map[string]any{"argv": []string{"touch", "/tmp/ran"}, "mdoe": "notifications"}, "mdoe", "mode"},
	{api.MethodStdin, map[string]any{"id": 1, "dat": "eA=="}, "dat", "data"},
	{api.MethodSignal, map[string]any{"id": 1, "signl": "TERM"}, "signl", "signal"},
	{api.MethodResize, map[string]any{"id": 1, "row": 10, "cols": 10}, "row", "rows"},
	{api.MethodCancel, map[string]any{"id": 1, "sandboxid": "x"}, "sandboxid", "sandbox_id"},
	{api.MethodWriteFile, map[string]any{"path": "/tmp/ran", "content": "eA==", "mdoe": 420}, "mdoe", "mode"},
	{api.MethodReadFile, map[string]any{"path": "/etc/hostname", "max_byte": 10}, "max_byte", "max_bytes"},
	{api.MethodListFiles, map[string]any{"pth": "/"}, "pth", "path"},
	{api.MethodStat, map[string]any{"paht": "/"}, "paht", "path"},
	{api.MethodMkdir, map[string]any{"path": "/tmp/ran", "parent": true}, "parent", "parents"},
	{api.MethodRemove, map[string]any{"path": "/etc/hostname", "recursiv": true}, "recursiv", "recursive"},
	{api.MethodSymlink, map[string]any{"path": "/tmp/ran", "targt": "x"}, "targt", "target"},
	{api.MethodSetAttr, map[string]any{"path": "/etc/hostname", "mode": 0, "mod_tim": "2001-01-01T00:00:00Z"}, "mod_tim", "mod_time"},
	{api.MethodReadFile, map[string]any{"path": "/etc/hostname", "lenght": 10}, "lenght", "length"},
	{api.MethodWriteFile, map[string]any{"path": "/tmp/ran", "content": "eA==", "offest": 0}, "offest", "offset"},
	{api.MethodClose, map[string]any{"sandbox_di": "x"}, "sandbox_di", "sandbox_id"},
	{api.MethodSubscribe, map[string]any{"type": []string{"exec"}}, "type", "types"},
	{api.MethodUnsubscribe, map[string]any{"typs": []string{"exec"}}, "typs", "types"},
	{api.MethodInfo, map[string]any{"verbose": true}, "verbose", ""},
	{api.MethodAttach, map[string]any{"mod": "responses"}, "mod", "mode"},
	{api.MethodPolicyGet, map[string]any{"sandbox_idd": "x"}, "sandbox_idd", "sandbox_id"},
	{api.MethodStats, map[string]any{"sandbox_idd": "x"}, "sandbox_idd", "sandbox_id"},
	{api.MethodPause, map[string]any{"sandbox_idd": "x"}, "sandbox_idd", "sandbox_id"},
	{api.MethodResume, map[string]any{"sandboxid": "x"}, "sandboxid", "sandbox_id"},
	{api.MethodProcesses, map[string]any{"sandbox_idd": "x"}, "sandbox_idd", "sandbox_id"},
	{api.MethodPolicyAllow, map[string]any{"hosts": "example.com"}, "hosts", "host"},
	{api.MethodPolicyDeny, map[string]any{"hots": "example.com"}, "hots", "host"},
	{api.MethodPolicyRemove, map[string]any{"hst": "example.com"}, "hst", "host"},
	{api.MethodPortForward, map[string]any{"sandbox_prt": 8000}, "sandbox_prt", "sandbox_port"},
	{api.MethodPortForwardClose, map[string]any{"host_prt": 8000}, "host_prt", "host_port"},
	{api.MethodPoolCreate, map[string]any{"size": 1, "sise": 2}, "sise", "size"},
	{api.MethodPoolClose, map[string]any{"pool_di": "x"}, "pool_di", "pool_id"},
	{api.MethodPoolList, map[string]any{"verbose": true}, "verbose", ""},
}

// TestUnknownFieldsRefused sends every method a misspelt field, over a
// session that creates sandboxes (as airlock rpc) and over a control
// session of one sandbox: each is refused with -32602 naming the field
// and the one it was likely meant to be, and nothing is done.
func TestUnknownFieldsRefused(t *testing.T) {
	needAgent(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	shared, err := airlock.Create(ctx, airlock.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer shared.Close()

	stdio := newClient(t, Options{AllowCreate: true}, ServeOptions{})
	stdio.create("setup", nil)
	control := newClient(t, Options{}, ServeOptions{Shared: []*airlock.Sandbox{shared}})
	methods := map[string]bool{}
	for name, c := range map[string]*client{"stdio": stdio, "control": control} {
		for i, m := range misspelt {
			methods[m.method] = true
			if name == "control" && (m.method == api.MethodCreate || strings.HasPrefix(m.method, "pool.")) {
				continue // refused there whatever its params
			}
			e := wantError(t, c.call(fmt.Sprintf("%s-%d", name, i), m.method, m.params), api.CodeInvalidParams)
			want := fmt.Sprintf("unknown field %q", m.field)
			if m.sug != "" {
				want += fmt.Sprintf(" (did you mean %q?)", m.sug)
			}
			if !strings.Contains(e.Message, want) || !strings.Contains(e.Message, " takes ") {
				t.Errorf("%s %s %v: %q; want it to say %s and what the object takes", name, m.method, m.params, e.Message, want)
			} else if m.sug == "" && strings.Contains(e.Message, "did you mean") {
				t.Errorf("%s %s: %q suggests a field where none is close", name, m.method, e.Message)
			}
		}
	}
	for _, name := range methodNames() {
		if !methods[name] {
			t.Errorf("method %s is not tried with a misspelt field", name)
		}
	}

	// Nothing was done: no sandbox created, no command run, no file
	// written.
	if n := len(stdio.created.list()); n != 1 {
		t.Errorf("%d sandboxes created, want only the first", n)
	}
	for _, sb := range append(stdio.created.list(), shared) {
		res, err := sb.Exec(ctx, "test -e /tmp/ran && echo ran || echo no; cat /etc/hostname >/dev/null && echo kept")
		if err != nil {
			t.Fatal(err)
		}
		if got := string(res.Stdout); got != "no\nkept\n" {
			t.Errorf("sandbox %s after the refused requests: %q", sb.ID(), got)
		}
	}
}

// TestSpecFieldsAccepted checks that the fields of the protocol's
// specification and of its example clients (seed 000: Python, TypeScript
// and Go) decode as before: accepted, or refused for their values, never
// as unknown fields.
func TestSpecFieldsAccepted(t *testing.T) {
	needAgent(t)
	c := newClient(t, Options{AllowCreate: true}, ServeOptions{})
	// The Go example client's Config, with what it leaves out.
	c.create("go", map[string]any{"image": "", "resources": map[string]any{"cpus": 1, "memory_mb": 256, "timeout_seconds": 300},
		"env": map[string]string{"A": "b"}, "vfs": map[string]any{"direct_mounts": map[string]any{}, "mounts": map[string]any{}}})
	// A direct mount of a host directory this machine lacks is refused
	// as a bad value, not as an unknown field; the seed's memory mount
	// is made where FUSE is there.
	e := wantError(t, c.call("missing-host-dir", api.MethodCreate, map[string]any{"vfs": map[string]any{"direct_mounts": map[string]any{"/mnt/data": map[string]any{"host_path": "/host/data", "readonly": true}}}}), api.CodeInvalidParams)
	if !strings.Contains(e.Message, "/host/data") {
		t.Errorf("a missing host directory: %q should name it", e.Message)
	}
	if _, err := os.Stat("/dev/fuse"); err == nil && os.Getuid() == 0 {
		id := c.create("memory-mount", map[string]any{"vfs": map[string]any{"mounts": map[string]any{"/workspace": map[string]any{"type": "memory"}}}})
		c.result("memory-mount-close", api.MethodClose, map[string]any{"sandbox_id": id}, nil)
	}
	// The Python client sends working_dir null when not given; keys
	// match fields regardless of case, as they always did.
	for i, p := range []map[string]any{
		{"command": "true", "working_dir": nil},
		{"command": "true"},
		{"Command": "true", "Working_Dir": "/"},
	} {
		var res api.ExecResult
		c.result(fmt.Sprintf("exec-%d", i), api.MethodExec, p, &res)
		if res.ExitCode != 0 {
			t.Errorf("exec %v: exit %d", p, res.ExitCode)
		}
	}
	c.result("write", api.MethodWriteFile, map[string]any{"path": "/workspace/hello.py", "content": b64("print(1)\n"), "mode": 420}, nil)
	c.result("read", api.MethodReadFile, map[string]any{"path": "/workspace/hello.py"}, nil)
	c.result("list", api.MethodListFiles, map[string]any{"path": "/workspace"}, nil)
	c.result("info", api.MethodInfo, map[string]any{}, nil)
	c.result("close", api.MethodClose, map[string]any{}, nil)
}

// TestConfigure: Options.Configure turns the configuration a create
// asks for into the one the sandbox is created with, before it is
// validated, and its error answers the request as invalid params.
func TestConfigure(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []airlock.Config
	c := newClient(t, Options{
		AllowCreate: true,
		Configure: func(cfg airlock.Config) (airlock.Config, error) {
			if cfg.Hostname == "refused" {
				return cfg, errors.New("hostname refused is not for this program")
			}
			cfg.Env = map[string]string{"BUILT_IN": "yes"}
			cfg.Resources.MemoryMB = 3 // invalid: Validate must see what Configure returns
			if cfg.Hostname == "valid" {
				cfg.Resources.MemoryMB = 64
			}
			return cfg, nil
		},
		Create: func(_ context.Context, cfg airlock.Config) (*airlock.Sandbox, error) {
			mu.Lock()
			got = append(got, cfg)
			mu.Unlock()
			return nil, errors.New("not started in this test")
		},
	}, ServeOptions{})
	e := wantError(t, c.call(1, api.MethodCreate, map[string]any{"hostname": "refused"}), api.CodeInvalidParams)
	if !strings.Contains(e.Message, "hostname refused is not for this program") {
		t.Errorf("Configure's error: %q", e.Message)
	}
	e = wantError(t, c.call(2, api.MethodCreate, map[string]any{"hostname": "h"}), api.CodeInvalidParams)
	if !strings.Contains(e.Message, "memory_mb 3") {
		t.Errorf("the configured config is not validated: %q", e.Message)
	}
	wantError(t, c.call(3, api.MethodCreate, map[string]any{"hostname": "valid"}), api.CodeStartFailed)
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0].Env["BUILT_IN"] != "yes" || got[0].Hostname != "valid" || got[0].Resources.MemoryMB != 64 {
		t.Errorf("Create got %+v, want the configured config once", got)
	}
}
