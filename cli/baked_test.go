package cli

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/vfs"
)

// asked is a configuration as flags or JSON give it: no Go values.
func asked() airlock.Config {
	no := false
	return airlock.Config{
		Image:          "standard",
		Isolation:      airlock.IsolationProcess,
		Resources:      airlock.Resources{CPUs: 0.5, MemoryMB: 300, TimeoutSeconds: 40},
		Env:            map[string]string{"FOO": "bar"},
		PidsLimit:      99,
		NofileLimit:    77,
		DiskMB:         200,
		MaxFileSizeMB:  50,
		MaxOutputBytes: 1 << 20,
		Hostname:       "h",
		AllowPtrace:    true,
		Network: &policy.Config{
			AllowedHosts:    []string{"example.com"},
			DeniedHosts:     []string{"bad.example.com"},
			BlockPrivateIPs: &no,
			Secrets:         map[string]policy.Secret{"KEY": {Value: "v", Hosts: []string{"example.com"}}},
			PolicyScript:    "def is_host_allowed(h): return True",
			DNSServers:      []string{"192.0.2.1"},
		},
		VFS: airlock.VFSConfig{
			Mounts:       map[string]airlock.MountSpec{"/workspace": {Type: airlock.MountMemory}},
			DirectMounts: map[string]airlock.DirectMount{"/src": {HostPath: "/tmp", Readonly: true}},
			BlockedPaths: []string{"/workspace/.env"},
		},
	}
}

// TestMergeZeroBase: airlock's own command line, whose built-in
// configuration is the zero one, creates exactly what was asked.
func TestMergeZeroBase(t *testing.T) {
	want := asked()
	got, err := mergeConfig("airlock", airlock.Config{}, asked())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("merged over nothing:\n%+v\nwant\n%+v", got, want)
	}
	got, err = mergeConfig("airlock", airlock.Config{}, airlock.Config{})
	if err != nil || !reflect.DeepEqual(got, airlock.Config{}) {
		t.Errorf("nothing over nothing: %+v, %v", got, err)
	}
}

// TestMergeRules checks each rule of the package documentation.
func TestMergeRules(t *testing.T) {
	var calls []string
	data := vfs.NewMemory(vfs.MemoryOptions{})
	yes := true
	onRequest := func(_ context.Context, r *policy.Request) (*policy.Request, error) { return r, nil }
	base := airlock.Config{
		RootFS:      "/srv/root",
		Isolation:   airlock.IsolationProcess,
		Resources:   airlock.Resources{MemoryMB: 256, TimeoutSeconds: 600},
		Env:         map[string]string{"MODE": "built-in", "FOO": "built-in"},
		PidsLimit:   200,
		AllowPtrace: false,
		Network: &policy.Config{
			AllowedHosts:    []string{"api.example.com", "example.com"},
			DeniedHosts:     []string{"tracker.example.com"},
			BlockPrivateIPs: &yes,
			Secrets:         map[string]policy.Secret{"API_KEY": {Value: "baked", Hosts: []string{"api.example.com"}}},
			DNSServers:      []string{"192.0.2.53"},
			ScrubResponses:  true,
		},
		OnRequest: onRequest,
		VFS: airlock.VFSConfig{
			Providers:    map[string]vfs.Provider{"/data": data},
			BlockedPaths: []string{"/data/private"},
			Hooks:        vfs.Hooks{BeforeRemove: func(context.Context, string) error { return errors.New("no") }},
		},
		OnEvent: func(airlock.Event) { calls = append(calls, "built-in") },
	}
	run := asked()
	run.OnEvent = func(airlock.Event) { calls = append(calls, "run") }
	run.Network.PolicyScript = ""
	got, err := mergeConfig("my-sandbox", base, run)
	if err != nil {
		t.Fatal(err)
	}
	// Plain values: the run-time ones; the root: the run-time image
	// replaces the built-in root.
	if got.Image != "standard" || got.RootFS != "" || got.Resources != run.Resources || got.PidsLimit != 99 || !got.AllowPtrace {
		t.Errorf("plain values: image %q rootfs %q resources %+v pids %d ptrace %v", got.Image, got.RootFS, got.Resources, got.PidsLimit, got.AllowPtrace)
	}
	// Not given at run time: the built-in ones.
	if got, _ := mergeConfig("my-sandbox", base, airlock.Config{}); got.RootFS != "/srv/root" || got.Resources.MemoryMB != 256 || got.PidsLimit != 200 {
		t.Errorf("nothing asked: rootfs %q memory %d pids %d", got.RootFS, got.Resources.MemoryMB, got.PidsLimit)
	}
	if want := map[string]string{"MODE": "built-in", "FOO": "bar"}; !reflect.DeepEqual(got.Env, want) {
		t.Errorf("env %v, want %v", got.Env, want)
	}
	n := got.Network
	if !reflect.DeepEqual(n.AllowedHosts, []string{"api.example.com", "example.com"}) ||
		!reflect.DeepEqual(n.DeniedHosts, []string{"tracker.example.com", "bad.example.com"}) {
		t.Errorf("hosts: allowed %v denied %v", n.AllowedHosts, n.DeniedHosts)
	}
	if len(n.Secrets) != 2 || n.Secrets["API_KEY"].Value != "baked" || n.Secrets["KEY"].Value != "v" {
		t.Errorf("secrets %v", n.Secrets)
	}
	if *n.BlockPrivateIPs || !n.ScrubResponses || !reflect.DeepEqual(n.DNSServers, []string{"192.0.2.1"}) {
		t.Errorf("block_private_ips %v scrub %v dns %v", *n.BlockPrivateIPs, n.ScrubResponses, n.DNSServers)
	}
	if got.OnRequest == nil {
		t.Error("the built-in OnRequest is gone")
	}
	v := got.VFS
	if v.Providers["/data"] != data || len(v.Mounts) != 1 || len(v.DirectMounts) != 1 || v.Hooks.BeforeRemove == nil ||
		!reflect.DeepEqual(v.BlockedPaths, []string{"/data/private", "/workspace/.env"}) {
		t.Errorf("vfs %+v", v)
	}
	got.OnEvent(airlock.Event{})
	if !reflect.DeepEqual(calls, []string{"built-in", "run"}) {
		t.Errorf("OnEvent called %v", calls)
	}
	// The built-in configuration is not changed by what was laid over it.
	if len(base.Network.Secrets) != 1 || len(base.Network.DeniedHosts) != 1 || len(base.VFS.BlockedPaths) != 1 || len(base.Env) != 2 {
		t.Errorf("the built-in configuration changed: %+v", base)
	}

	// A placeholder for a built-in secret is what the variable holds
	// anyway; any other value for it is refused.
	got, err = mergeConfig("my-sandbox", base, airlock.Config{Env: map[string]string{"API_KEY": "${API_KEY}", "X": "1"}})
	if err != nil || got.Env["X"] != "1" {
		t.Errorf("env with a placeholder: %v, %v", got.Env, err)
	} else if _, ok := got.Env["API_KEY"]; ok {
		t.Errorf("env keeps the placeholder variable: %v", got.Env)
	}

	for _, c := range []struct {
		name string
		run  airlock.Config
		want string
	}{
		{"secret again", airlock.Config{Network: &policy.Config{Secrets: map[string]policy.Secret{"API_KEY": {Value: "x", Hosts: []string{"evil.example"}}}}}, "secret API_KEY is built into my-sandbox"},
		{"secret in env", airlock.Config{Env: map[string]string{"API_KEY": "leak"}}, "$API_KEY is a secret built into my-sandbox"},
		{"mount over a provider", airlock.Config{VFS: airlock.VFSConfig{Mounts: map[string]airlock.MountSpec{"/data": {Type: airlock.MountMemory}}}}, "/data is a mount built into my-sandbox"},
		{"bind over a provider", airlock.Config{VFS: airlock.VFSConfig{DirectMounts: map[string]airlock.DirectMount{"/data": {HostPath: "/tmp"}}}}, "/data is a mount built into my-sandbox"},
	} {
		if _, err := mergeConfig("my-sandbox", base, c.run); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}
	scripted := base
	scripted.Network = &policy.Config{PolicyScript: "def is_host_allowed(h): return False"}
	if _, err := mergeConfig("my-sandbox", scripted, asked()); err == nil || !strings.Contains(err.Error(), "policy script built in") {
		t.Errorf("a second policy script: %v", err)
	}
}
