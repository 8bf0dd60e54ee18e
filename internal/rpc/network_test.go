package rpc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/policy"
)

// secretValue is the secret of the network tests: it must never come
// back from the server.
const secretValue = "s3cr3t-value"

// secretNetwork is a network whose only allowed host is example.com,
// with a secret for it.
func secretNetwork() map[string]any {
	return map[string]any{
		"allowed_hosts": []string{"example.com"},
		"secrets": map[string]any{
			"API_KEY": map[string]any{"value": secretValue, "hosts": []string{"example.com"}},
		},
	}
}

// needNetwork skips tests of sandboxes with a network where they cannot
// have one.
func needNetwork(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a sandbox's network needs root")
	}
	needAgent(t)
}

// syncBuffer is a bytes.Buffer safe for concurrent use, for logs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// noSecretSeen fails the test if anything the server wrote holds the
// secret's value.
func (c *client) noSecretSeen(value string) {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	var all []msg
	for _, ms := range c.byID {
		all = append(all, ms...)
	}
	all = append(all, c.notes...)
	for _, m := range all {
		if b, _ := json.Marshal(m); bytes.Contains(b, []byte(value)) {
			c.t.Errorf("the server sent the secret's value: %s", b)
		}
	}
}

// TestCreateNetworkRefused checks that invalid network policies are
// refused before any sandbox is started, naming the field and never
// quoting a secret's value.
func TestCreateNetworkRefused(t *testing.T) {
	c := newClient(t, Options{AllowCreate: true, Create: func(context.Context, airlock.Config) (*airlock.Sandbox, error) {
		t.Error("Create was called for an invalid network")
		return nil, errors.New("no")
	}}, ServeOptions{})
	secret := func(v any, hosts ...string) map[string]any {
		return map[string]any{"secrets": map[string]any{"API_KEY": map[string]any{"value": v, "hosts": hosts}}}
	}
	cases := []struct {
		params map[string]any
		says   []string
	}{
		{map[string]any{"network": map[string]any{"allowed_host": []string{"example.com"}}}, []string{`unknown field "network.allowed_host" (did you mean "network.allowed_hosts"?)`}},
		{map[string]any{"network": map[string]any{"allowed_hosts": []string{"example.com", "exa mple.com"}}}, []string{"allowed_hosts[1]"}},
		{map[string]any{"network": map[string]any{"allowed_hosts": "example.com"}}, []string{`"network.allowed_hosts"`, "array"}},
		{map[string]any{"network": map[string]any{"egress": []any{map[string]any{"destination": "db.example.com"}}}}, []string{"egress[0].ports"}},
		{map[string]any{"network": map[string]any{"block_private_ips": "yes"}}, []string{`"network.block_private_ips"`}},
		{map[string]any{"network": []string{"example.com"}}, []string{`"network" must be an object`}},
		{map[string]any{"network": secret(secretValue)}, []string{"secrets.API_KEY.hosts"}},
		{map[string]any{"network": secret("", "example.com")}, []string{"secrets.API_KEY.value"}},
		{map[string]any{"network": secret(987654321, "example.com")}, []string{`"network.secrets.value"`, "a number"}},
		{map[string]any{"network": secret(secretValue, "http://example.com")}, []string{"secrets.API_KEY.hosts[0]"}},
		{map[string]any{"network": secret(secretValue, "example.com"), "env": map[string]string{"API_KEY": "x"}}, []string{"env.API_KEY"}},
		{map[string]any{"network": map[string]any{"policy_script": "def on_request(req:"}}, []string{"policy_script"}},
	}
	for i, tc := range cases {
		e := wantError(t, c.call(i, api.MethodCreate, tc.params), api.CodeInvalidParams)
		for _, s := range tc.says {
			if !strings.Contains(e.Message, s) {
				t.Errorf("create %v: message %q should mention %s", tc.params, e.Message, s)
			}
		}
	}
	// A secret given twice, which a decoder into a map would take
	// silently.
	c.send(`{"jsonrpc":"2.0","id":"dup","method":"create","params":{"network":{"secrets":{"K":{"value":"` + secretValue + `","hosts":["a.example"]},"K":{"value":"other","hosts":["a.example"]}}}}}`)
	if e := wantError(t, c.next("dup", time.Minute), api.CodeInvalidParams); !strings.Contains(e.Message, "twice") {
		t.Errorf("a secret given twice: %q", e.Message)
	}
	c.noSecretSeen(secretValue)
	c.noSecretSeen("987654321")
}

// TestCreateNetworkConfig checks what create hands the embed API, and how
// it reports the embed API's network errors.
func TestCreateNetworkConfig(t *testing.T) {
	var got []*policy.Config
	var env map[string]string
	fail := errors.New("stop here")
	var createErr error
	c := newClient(t, Options{AllowCreate: true, Create: func(_ context.Context, cfg airlock.Config) (*airlock.Sandbox, error) {
		got = append(got, cfg.Network)
		env = cfg.Env
		if createErr != nil {
			return nil, createErr
		}
		return nil, fail
	}}, ServeOptions{})

	for i, p := range []map[string]any{{}, {"network": nil}} {
		wantError(t, c.call(i, api.MethodCreate, p), api.CodeStartFailed)
		if got[len(got)-1] != nil {
			t.Errorf("create %v: network %+v, want none", p, got[len(got)-1])
		}
	}
	wantError(t, c.call("empty", api.MethodCreate, map[string]any{"network": map[string]any{}}), api.CodeStartFailed)
	if n := got[len(got)-1]; n == nil || len(n.AllowedHosts) != 0 || !n.BlocksPrivateIPs() {
		t.Errorf("create with network {}: %+v, want a network that allows nothing", n)
	}
	params := map[string]any{"network": secretNetwork(), "env": map[string]string{"API_KEY": "${API_KEY}", "MODE": "x"}}
	wantError(t, c.call("full", api.MethodCreate, params), api.CodeStartFailed)
	n := got[len(got)-1]
	if n == nil || len(n.AllowedHosts) != 1 || n.AllowedHosts[0] != "example.com" || n.Secrets["API_KEY"].Value != secretValue {
		t.Errorf("network %+v", n)
	}
	if _, ok := env["API_KEY"]; ok || env["MODE"] != "x" {
		t.Errorf(`env %v: "${API_KEY}" should leave the variable to the secret's placeholder`, env)
	}

	// Network needs root and process isolation: the embed API says so.
	createErr = fmt.Errorf("%w: network egress needs airlock to run as root", airlock.ErrUnavailable)
	if e := wantError(t, c.call("unavailable", api.MethodCreate, map[string]any{"network": map[string]any{}}), api.CodeUnsupported); !strings.Contains(e.Message, "root") {
		t.Errorf("unavailable network: %q", e.Message)
	}
	// Problems found only when the policy is built are the caller's.
	createErr = fmt.Errorf("network policy: %w", &policy.ConfigError{Problems: []string{"extra_root_cas: /nonexistent: no such file"}})
	if e := wantError(t, c.call("ca", api.MethodCreate, map[string]any{"network": map[string]any{"extra_root_cas": []string{"/nonexistent"}}}), api.CodeInvalidParams); !strings.Contains(e.Message, "extra_root_cas") {
		t.Errorf("unreadable CA: %q", e.Message)
	}
	c.noSecretSeen(secretValue)
}

// TestPolicyParams checks the policy methods' params, without a sandbox.
func TestPolicyParams(t *testing.T) {
	c := newClient(t, Options{}, ServeOptions{})
	wantError(t, c.call(1, api.MethodPolicyGet, nil), api.CodeNotFound)
	for i, m := range []string{api.MethodPolicyAllow, api.MethodPolicyDeny, api.MethodPolicyRemove} {
		if e := wantError(t, c.call(10+i, m, map[string]any{}), api.CodeInvalidParams); !strings.Contains(e.Message, `"host" is required`) {
			t.Errorf("%s without host: %q", m, e.Message)
		}
		if e := wantError(t, c.call(20+i, m, map[string]any{"host": strings.Repeat("a", 5000)}), api.CodeInvalidParams); len(e.Message) > 1000 {
			t.Errorf("%s with a huge host: message of %d bytes", m, len(e.Message))
		}
		wantError(t, c.call(30+i, m, map[string]any{"host": 5}), api.CodeInvalidParams)
	}
}

// TestPolicyWithoutNetwork checks that the policy methods say clearly
// that a sandbox without a network has no policy.
func TestPolicyWithoutNetwork(t *testing.T) {
	needAgent(t)
	c := newClient(t, Options{AllowCreate: true}, ServeOptions{})
	id := c.create(1, nil)
	calls := []struct {
		method string
		params map[string]any
	}{
		{api.MethodPolicyGet, map[string]any{"sandbox_id": id}},
		{api.MethodPolicyAllow, map[string]any{"sandbox_id": id, "host": "example.com"}},
		{api.MethodPolicyDeny, map[string]any{"host": "example.com"}},
		{api.MethodPolicyRemove, map[string]any{"host": "example.com"}},
	}
	for i, call := range calls {
		e := wantError(t, c.call(10+i, call.method, call.params), api.CodeUnsupported)
		if !strings.Contains(e.Message, "has no network") || !strings.Contains(e.Message, id) {
			t.Errorf("%s on a sandbox without network: %q", call.method, e.Message)
		}
	}
	// It has no interface but loopback.
	if r := c.exec(20, map[string]any{"command": "cat /proc/net/dev"}); strings.Contains(unb64(t, r.Stdout), "eth0") {
		t.Errorf("a sandbox without network has an interface: %s", unb64(t, r.Stdout))
	}
}

// policy calls a policy method and decodes its result.
func (c *client) policy(id any, method string, params map[string]any) api.PolicyResult {
	c.t.Helper()
	var r api.PolicyResult
	c.result(id, method, params, &r)
	if r.AllowedHosts == nil || r.DeniedHosts == nil {
		c.t.Errorf("%s: lists should be [] rather than null when empty: %+v", method, r)
	}
	return r
}

func equalHosts(got []string, want ...string) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

// TestNetworkSandbox creates a sandbox with a network and a secret: its
// commands see a placeholder, never the value, which no response, event
// or log line carries either; its host lists change while it runs; its
// network events reach the session.
func TestNetworkSandbox(t *testing.T) {
	needNetwork(t)
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c := newClient(t, Options{AllowCreate: true, Logger: log}, ServeOptions{})
	var cr api.CreateResult
	c.result(1, api.MethodCreate, map[string]any{"network": secretNetwork(), "env": map[string]string{"MODE": "test"}}, &cr)
	ph := cr.Env["API_KEY"]
	if ph == "" || ph == secretValue || strings.Contains(ph, secretValue) || cr.Env["MODE"] != "test" {
		t.Fatalf("create result env %v: want API_KEY with a placeholder, and MODE", cr.Env)
	}
	if r := c.exec(2, map[string]any{"command": "echo $API_KEY"}); r.ExitCode != 0 || unb64(t, r.Stdout) != ph+"\n" {
		t.Errorf("echo $API_KEY: %q (exit %d), want the placeholder %q", unb64(t, r.Stdout), r.ExitCode, ph)
	}
	env := c.exec(3, map[string]any{"argv": []string{"env"}})
	if out := unb64(t, env.Stdout); strings.Contains(out, secretValue) || !strings.Contains(out, "API_KEY="+ph+"\n") {
		t.Errorf("env in the sandbox:\n%s", out)
	}
	if r := c.exec(4, map[string]any{"command": "cat /etc/resolv.conf"}); !strings.Contains(unb64(t, r.Stdout), "nameserver 10.88.0.1") {
		t.Errorf("resolv.conf of a sandbox with a network:\n%s", unb64(t, r.Stdout))
	}

	// The host lists, and changes to them.
	if r := c.policy(10, api.MethodPolicyGet, map[string]any{"sandbox_id": cr.SandboxID}); !equalHosts(r.AllowedHosts, "example.com") || !equalHosts(r.DeniedHosts) {
		t.Errorf("policy.get: %+v", r)
	}
	if r := c.policy(11, api.MethodPolicyAllow, map[string]any{"host": "*.GitHub.com."}); !equalHosts(r.AllowedHosts, "example.com", "*.github.com") {
		t.Errorf("policy.allow: %+v", r)
	}
	if r := c.policy(12, api.MethodPolicyDeny, map[string]any{"host": "blocked.example.org"}); !equalHosts(r.DeniedHosts, "blocked.example.org") {
		t.Errorf("policy.deny: %+v", r)
	}
	// Denying an allowed pattern moves it.
	if r := c.policy(13, api.MethodPolicyDeny, map[string]any{"host": "example.com"}); !equalHosts(r.AllowedHosts, "*.github.com") || !equalHosts(r.DeniedHosts, "blocked.example.org", "example.com") {
		t.Errorf("policy.deny of an allowed host: %+v", r)
	}
	if r := c.policy(14, api.MethodPolicyRemove, map[string]any{"host": "example.com"}); !equalHosts(r.AllowedHosts, "*.github.com") || !equalHosts(r.DeniedHosts, "blocked.example.org") {
		t.Errorf("policy.remove: %+v", r)
	}
	if e := wantError(t, c.call(15, api.MethodPolicyRemove, map[string]any{"host": "example.com"}), api.CodeNotFound); !strings.Contains(e.Message, "neither") {
		t.Errorf("policy.remove of a pattern in neither list: %q", e.Message)
	}
	for i, bad := range []string{"http://example.com/", "exa mple.com", "10.0.0.1", "a.*.com"} {
		if e := wantError(t, c.call(16+i, api.MethodPolicyAllow, map[string]any{"host": bad}), api.CodeInvalidParams); !strings.Contains(e.Message, `"host"`) {
			t.Errorf("policy.allow %q: %q", bad, e.Message)
		}
	}
	if r := c.policy(20, api.MethodPolicyGet, nil); !equalHosts(r.AllowedHosts, "*.github.com") || !equalHosts(r.DeniedHosts, "blocked.example.org") {
		t.Errorf("policy.get after the changes: %+v", r)
	}

	// A DNS question for a denied name is answered by the gateway,
	// refused, and reported; nothing leaves the host.
	c.exec(30, map[string]any{"command": "getent hosts blocked.example.org; true"})
	ev, ok := c.waitEvent(10*time.Second, "network", "")
	if !ok {
		t.Fatal("no network event after a DNS question")
	}
	var ne api.NetworkEvent
	if err := json.Unmarshal(ev["network"], &ne); err != nil || ne.Kind == "" {
		t.Errorf("network event %s: %v", ev["network"], err)
	}
	if string(ev["sandbox_id"]) != `"`+cr.SandboxID+`"` {
		t.Errorf("network event of sandbox %s", ev["sandbox_id"])
	}
	for {
		if ne.Kind == api.NetDNS && ne.Host == "blocked.example.org" {
			if !ne.Blocked || ne.Reason == "" {
				t.Errorf("DNS question for a denied host: %+v, want blocked with a reason", ne)
			}
			break
		}
		ev, ok = c.waitEvent(5*time.Second, "network", "")
		if !ok {
			t.Errorf("no DNS event for blocked.example.org (last: %+v)", ne)
			break
		}
		ne = api.NetworkEvent{}
		_ = json.Unmarshal(ev["network"], &ne)
	}

	c.result(40, api.MethodClose, nil, nil)
	wantError(t, c.call(41, api.MethodPolicyGet, map[string]any{"sandbox_id": cr.SandboxID}), api.CodeNotRunning)
	c.noSecretSeen(secretValue)
	if strings.Contains(logs.String(), secretValue) {
		t.Errorf("the server logged the secret's value:\n%s", logs.String())
	}
}

// TestNetworkSeedExample creates the network of the protocol's create
// example: its env names the secret as "${OPENAI_API_KEY}", which is the
// placeholder. Its policy script is refused: it defines no hook.
func TestNetworkSeedExample(t *testing.T) {
	needNetwork(t)
	c := newClient(t, Options{AllowCreate: true}, ServeOptions{})
	// Its policy script defines is_allowed, which is not a hook.
	c.send(wrap(t, 1, "create", without(t, seedCreate, "vfs", "image")))
	if e := wantError(t, c.next(1, time.Minute), api.CodeInvalidParams); !strings.Contains(e.Message, "policy_script") || !strings.Contains(e.Message, "is_host_allowed") || strings.Contains(e.Message, "network policy: network policy") {
		t.Errorf("create with the example's policy script: %q", e.Message)
	}
	var example map[string]any
	if err := json.Unmarshal([]byte(without(t, seedCreate, "vfs", "image")), &example); err != nil {
		t.Fatal(err)
	}
	delete(example["network"].(map[string]any), "policy_script")
	c.send(wrap(t, 1, "create", string(mustJSON(t, example))))
	m := c.next(1, time.Minute)
	checkEnvelope(t, m, "1")
	var cr api.CreateResult
	if err := json.Unmarshal(m["result"], &cr); err != nil {
		t.Fatalf("create: %v (%s)", err, m["error"])
	}
	if ph := cr.Env["OPENAI_API_KEY"]; ph == "" || ph == "${OPENAI_API_KEY}" || strings.Contains(ph, "sk-...") {
		t.Errorf("env %v: want OPENAI_API_KEY with the secret's placeholder", cr.Env)
	}
	if r := c.exec(2, map[string]any{"command": "echo $OPENAI_API_KEY"}); unb64(t, r.Stdout) != cr.Env["OPENAI_API_KEY"]+"\n" {
		t.Errorf("echo $OPENAI_API_KEY: %q", unb64(t, r.Stdout))
	}
	if r := c.policy(3, api.MethodPolicyGet, nil); !equalHosts(r.AllowedHosts, "api.openai.com", "*.amazonaws.com") {
		t.Errorf("policy.get: %+v", r)
	}
	c.noSecretSeen("sk-...")
}

// TestNetworkControlSession changes the policy of a shared sandbox, as
// a detached sandbox's control socket does, and gets its network events
// through the hub.
func TestNetworkControlSession(t *testing.T) {
	needNetwork(t)
	hub := &Hub{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := airlock.Create(ctx, airlock.Config{OnEvent: hub.Publish, Network: &policy.Config{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close() })
	c := newClient(t, Options{}, ServeOptions{Shared: []*airlock.Sandbox{sb}, Events: hub})
	if r := c.policy(1, api.MethodPolicyGet, nil); !equalHosts(r.AllowedHosts) || !equalHosts(r.DeniedHosts) {
		t.Errorf("policy.get of a network {}: %+v", r)
	}
	if r := c.policy(2, api.MethodPolicyAllow, map[string]any{"sandbox_id": sb.ID(), "host": "example.com"}); !equalHosts(r.AllowedHosts, "example.com") {
		t.Errorf("policy.allow: %+v", r)
	}
	if allowed, _, _ := sb.Hosts(); !equalHosts(allowed, "example.com") {
		t.Errorf("the sandbox's own hosts after policy.allow: %v", allowed)
	}
	c.exec(3, map[string]any{"command": "getent hosts not-allowed.example.net; true"})
	if _, ok := c.waitEvent(10*time.Second, "network", ""); !ok {
		t.Error("no network event through the hub")
	}
}

// TestToAPIEventNetwork checks that network events go on the wire with
// their detail.
func TestToAPIEventNetwork(t *testing.T) {
	ne := &airlock.NetworkEvent{Kind: api.NetHTTP, Method: "GET", URL: "https://example.com/", Host: "example.com", StatusCode: 200, Blocked: true, Reason: "host_not_allowed"}
	ev := toAPIEvent(airlock.Event{Type: airlock.EventNetwork, Timestamp: 5, SandboxID: "sb-1", Network: ne})
	var got api.NetworkEvent
	if err := json.Unmarshal(ev.Network, &got); err != nil || !reflect.DeepEqual(&got, ne) {
		t.Errorf("network detail %s: %v", ev.Network, err)
	}
	if ev.Type != api.EventNetwork || ev.Exec != nil || ev.File != nil || ev.Lifecycle != nil {
		t.Errorf("event %+v", ev)
	}
}
