package client

import (
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/policy"
)

// TestPolicyCalls checks the requests of the policy methods and how their
// errors match.
func TestPolicyCalls(t *testing.T) {
	c, f := newFake(t, Options{})
	ctx := testCtx(t)
	sb := c.Sandbox("sb-1")

	type hostsResult struct {
		allowed, denied []string
		err             error
	}
	got := make(chan hostsResult, 1)
	go func() {
		a, d, err := sb.Hosts(ctx)
		got <- hostsResult{a, d, err}
	}()
	r := f.expect(t, api.MethodPolicyGet)
	var sp api.SandboxParams
	r.params(t, &sp)
	if sp.SandboxID != "sb-1" {
		t.Errorf("policy.get params %s", r.Params)
	}
	f.reply(r.ID, api.PolicyResult{AllowedHosts: []string{"example.com"}, DeniedHosts: []string{"evil.example"}})
	if h := <-got; h.err != nil || !slices.Equal(h.allowed, []string{"example.com"}) || !slices.Equal(h.denied, []string{"evil.example"}) {
		t.Errorf("Hosts: %+v", h)
	}

	calls := []struct {
		method string
		call   func() error
	}{
		{api.MethodPolicyAllow, func() error { return sb.AllowHost(ctx, "*.example.com") }},
		{api.MethodPolicyDeny, func() error { return sb.DenyHost(ctx, "*.example.com") }},
		{api.MethodPolicyRemove, func() error { return sb.RemoveHost(ctx, "*.example.com") }},
	}
	for _, call := range calls {
		errc := make(chan error, 1)
		go func() { errc <- call.call() }()
		r := f.expect(t, call.method)
		var p api.PolicyHostParams
		r.params(t, &p)
		if p.SandboxID != "sb-1" || p.Host != "*.example.com" {
			t.Errorf("%s params %s", call.method, r.Params)
		}
		f.reply(r.ID, api.PolicyResult{AllowedHosts: []string{}, DeniedHosts: []string{}})
		if err := <-errc; err != nil {
			t.Errorf("%s: %v", call.method, err)
		}
	}

	// Errors: no network, a bad pattern, a pattern in neither list.
	for _, tc := range []struct {
		code int
		want error
	}{{api.CodeUnsupported, ErrUnsupported}, {api.CodeInvalidParams, ErrInvalidParams}, {api.CodeNotFound, ErrNotFound}} {
		errc := make(chan error, 1)
		go func() { errc <- sb.RemoveHost(ctx, "x.example") }()
		r := f.expect(t, api.MethodPolicyRemove)
		f.replyErr(r.ID, tc.code, "refused", nil)
		if err := <-errc; !errors.Is(err, tc.want) {
			t.Errorf("code %d: %v, want %v", tc.code, err, tc.want)
		}
	}
}

// TestCreateNetworkParams checks that the network goes to the server as
// given and that Env is the server's (placeholders).
func TestCreateNetworkParams(t *testing.T) {
	c, f := newFake(t, Options{})
	ctx := testCtx(t)
	network, err := json.Marshal(policy.Config{AllowedHosts: []string{"example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	type created struct {
		sb  *Sandbox
		err error
	}
	got := make(chan created, 1)
	go func() {
		sb, err := c.Create(ctx, api.CreateParams{Network: network})
		got <- created{sb, err}
	}()
	r := f.expect(t, api.MethodCreate)
	var p map[string]json.RawMessage
	r.params(t, &p)
	if string(p["network"]) != `{"allowed_hosts":["example.com"]}` {
		t.Errorf("create params %s", r.Params)
	}
	f.reply(r.ID, api.CreateResult{SandboxID: "sb-1", Isolation: "process", Env: map[string]string{"API_KEY": "AIRLOCK_PLACEHOLDER"}})
	cr := <-got
	if cr.err != nil || cr.sb.Env()["API_KEY"] != "AIRLOCK_PLACEHOLDER" {
		t.Errorf("Create: %+v, %v", cr.sb, cr.err)
	}
}

// TestRealServerNetwork creates a sandbox with a network and a secret
// through a real server: commands see a placeholder, the host lists
// change, network events arrive. Nothing leaves the host.
func TestRealServerNetwork(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a sandbox's network needs root")
	}
	c := startReal(t, Options{})
	ctx := testCtx(t)
	const value = "s3cr3t-value"
	network, err := json.Marshal(policy.Config{
		AllowedHosts: []string{"example.com"},
		Secrets:      map[string]policy.Secret{"API_KEY": {Value: value, Hosts: []string{"example.com"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := c.Create(ctx, api.CreateParams{Network: network})
	if err != nil {
		t.Fatal(err)
	}
	ph := sb.Env()["API_KEY"]
	if ph == "" || strings.Contains(ph, value) {
		t.Fatalf("Env %v: want a placeholder for API_KEY", sb.Env())
	}
	res, err := sb.Exec(ctx, "echo $API_KEY; env")
	if err != nil {
		t.Fatal(err)
	}
	if out := string(res.Stdout); !strings.HasPrefix(out, ph+"\n") || strings.Contains(out, value) {
		t.Errorf("echo $API_KEY; env:\n%s", out)
	}

	if err := sb.AllowHost(ctx, "*.example.org"); err != nil {
		t.Fatal(err)
	}
	if err := sb.DenyHost(ctx, "bad.example.org"); err != nil {
		t.Fatal(err)
	}
	if err := sb.RemoveHost(ctx, "example.com"); err != nil {
		t.Fatal(err)
	}
	allowed, denied, err := sb.Hosts(ctx)
	if err != nil || !slices.Equal(allowed, []string{"*.example.org"}) || !slices.Equal(denied, []string{"bad.example.org"}) {
		t.Errorf("Hosts: %v %v, %v", allowed, denied, err)
	}
	if err := sb.RemoveHost(ctx, "example.com"); !errors.Is(err, ErrNotFound) {
		t.Errorf("RemoveHost of a pattern in neither list: %v, want ErrNotFound", err)
	}
	if err := sb.AllowHost(ctx, "https://example.com/"); !errors.Is(err, ErrInvalidParams) {
		t.Errorf("AllowHost of a URL: %v, want ErrInvalidParams", err)
	}

	// A refused DNS question is a network event.
	if _, err := sb.Exec(ctx, "getent hosts bad.example.org; true"); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(10 * time.Second)
wait:
	for {
		select {
		case ev, ok := <-c.Events():
			if !ok {
				t.Fatal("events ended")
			}
			if ev.Type == EventNetwork && ev.Network != nil && ev.Network.Kind == api.NetDNS && ev.Network.Host == "bad.example.org" {
				if !ev.Network.Blocked {
					t.Errorf("DNS question for a denied host: %+v", ev.Network)
				}
				break wait
			}
		case <-deadline:
			t.Fatal("no network event for the DNS question within 10s")
		}
	}

	// A sandbox without a network has no policy.
	plain, err := c.Create(ctx, api.CreateParams{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := plain.Hosts(ctx); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "no network") {
		t.Errorf("Hosts without a network: %v, want ErrUnsupported saying so", err)
	}
	if err := plain.AllowHost(ctx, "example.com"); !errors.Is(err, ErrUnsupported) {
		t.Errorf("AllowHost without a network: %v, want ErrUnsupported", err)
	}
}
