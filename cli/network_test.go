package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/policy"
)

const testSecret = "s3cr3t-value"

func TestParseSecret(t *testing.T) {
	t.Setenv("AIRLOCK_TEST_TOKEN", "from-env@with=signs")
	good := []struct {
		in, name string
		want     policy.Secret
	}{
		{"API_KEY=" + testSecret + "@example.com", "API_KEY", policy.Secret{Value: testSecret, Hosts: []string{"example.com"}}},
		{"K=a@b=c@api.example.com,*.example.org", "K", policy.Secret{Value: "a@b=c", Hosts: []string{"api.example.com", "*.example.org"}}},
		{"AIRLOCK_TEST_TOKEN@example.com", "AIRLOCK_TEST_TOKEN", policy.Secret{Value: "from-env@with=signs", Hosts: []string{"example.com"}}},
		{"K=a/b@c@api.example.com,*.example.org/plaintext", "K", policy.Secret{Value: "a/b@c", Hosts: []string{"api.example.com", "*.example.org"}, AllowPlaintext: true}},
		{"AIRLOCK_TEST_TOKEN@example.com/plaintext", "AIRLOCK_TEST_TOKEN", policy.Secret{Value: "from-env@with=signs", Hosts: []string{"example.com"}, AllowPlaintext: true}},
	}
	for _, g := range good {
		name, sec, err := parseSecret(g.in)
		if err != nil || name != g.name || !reflect.DeepEqual(sec, g.want) {
			t.Errorf("parseSecret(%q) = %q, %+v, %v", g.in, name, sec, err)
		}
	}
	for _, bad := range []string{"", "=" + testSecret + "@x", "API_KEY=" + testSecret, "API_KEY=" + testSecret + "@", "AIRLOCK_TEST_UNSET_VAR@example.com", "@example.com", "API_KEY=" + testSecret + "@example.com/tls", "API_KEY=" + testSecret + "@/plaintext"} {
		_, _, err := parseSecret(bad)
		if err == nil {
			t.Errorf("parseSecret(%q) accepted", bad)
			continue
		}
		if strings.Contains(err.Error(), testSecret) {
			t.Errorf("parseSecret(%q): the error quotes the value: %v", bad, err)
		}
	}
}

func TestParseEgress(t *testing.T) {
	good := map[string]policy.EgressRule{
		"db.example.com:5432":     {Destination: "db.example.com", Ports: []uint16{5432}},
		"10.1.0.0/16:22,2222/tcp": {Destination: "10.1.0.0/16", Ports: []uint16{22, 2222}, Protocol: "tcp"},
		"[2001:db8::1]:53/udp":    {Destination: "2001:db8::1", Ports: []uint16{53}, Protocol: "udp"},
		"ntp.example.org:123/any": {Destination: "ntp.example.org", Ports: []uint16{123}, Protocol: "any"},
	}
	for in, want := range good {
		got, err := parseEgress(in)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("parseEgress(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"db.example.com", ":22", "db.example.com:0", "db.example.com:http", "db.example.com:70000"} {
		if _, err := parseEgress(bad); err == nil {
			t.Errorf("parseEgress(%q) accepted", bad)
		}
	}
}

func TestNetworkFlags(t *testing.T) {
	var none networkFlags
	if c, err := none.config(nil); c != nil || err != nil {
		t.Errorf("no network flags: %+v, %v; want no network", c, err)
	}

	t.Setenv("API_KEY", testSecret)
	dir := t.TempDir()
	file := filepath.Join(dir, "net.json")
	os.WriteFile(file, []byte(`{"allowed_hosts": ["pypi.org"], "block_private_ips": false, "secrets": {"OTHER": {"value": "v", "hosts": ["pypi.org"]}}}`), 0o600)
	ca := filepath.Join(dir, "ca.pem")
	os.WriteFile(ca, []byte("not read here"), 0o600)
	os.WriteFile(filepath.Join(dir, "typo.json"), []byte(`{"allowed_host": ["example.com"]}`), 0o600)
	t.Chdir(dir)
	f := networkFlags{
		configFile:   file,
		allowHosts:   []string{"example.com", "pypi.org"},
		denyHosts:    []string{"evil.example.com"},
		secrets:      []string{"API_KEY@example.com"},
		egress:       []string{"db.example.com:5432"},
		dnsServers:   []string{"192.0.2.53"},
		extraRootCAs: []string{"ca.pem"},
		allowCIDRs:   []string{"10.1.0.0/16"},
	}
	c, err := f.config(map[string]string{"MODE": "x"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.AllowedHosts, []string{"pypi.org", "example.com"}) || !slices.Equal(c.DeniedHosts, []string{"evil.example.com"}) ||
		c.BlocksPrivateIPs() || !slices.Equal(c.AllowedCIDRs, []string{"10.1.0.0/16"}) || !slices.Equal(c.DNSServers, []string{"192.0.2.53"}) ||
		len(c.Egress) != 1 || c.Egress[0].Destination != "db.example.com" || !slices.Equal(c.ExtraRootCAs, []string{ca}) {
		t.Errorf("config %+v", c)
	}
	if len(c.Secrets) != 2 || c.Secrets["API_KEY"].Value != testSecret || c.Secrets["OTHER"].Value != "v" {
		t.Errorf("%d secrets, want API_KEY from the environment and OTHER from the file", len(c.Secrets))
	}

	bad := []struct {
		f    networkFlags
		env  map[string]string
		says string
	}{
		{networkFlags{allowHosts: []string{"https://example.com/"}}, nil, "--allow-host"},
		{networkFlags{denyHosts: []string{"a b"}}, nil, "--deny-host"},
		{networkFlags{allowCIDRs: []string{"0.0.0.0/0"}}, nil, "--allow-cidr"},
		{networkFlags{dnsServers: []string{"resolver"}}, nil, "--dns-server"},
		{networkFlags{egress: []string{"db.example.com:22/sctp"}}, nil, "--egress"},
		{networkFlags{extraRootCAs: []string{"/nonexistent/ca.pem"}}, nil, "--extra-root-ca"},
		{networkFlags{secrets: []string{"API_KEY=" + testSecret + "@http://x/"}}, nil, "--secret API_KEY"},
		{networkFlags{secrets: []string{"API_KEY=" + testSecret + "@example.com", "API_KEY@example.com"}}, nil, "twice"},
		{networkFlags{secrets: []string{"API_KEY@example.com"}}, map[string]string{"API_KEY": "x"}, "--env"},
		{networkFlags{configFile: file, secrets: []string{"OTHER=" + testSecret + "@example.com"}}, nil, "twice"},
		{networkFlags{configFile: filepath.Join(dir, "missing.json")}, nil, "--network-config"},
		{networkFlags{configFile: filepath.Join(dir, "typo.json")}, nil, `unknown field "allowed_host"`},
	}
	for _, b := range bad {
		_, err := b.f.config(b.env)
		if err == nil {
			t.Errorf("%+v: accepted", b.f)
			continue
		}
		if !strings.Contains(err.Error(), b.says) {
			t.Errorf("%+v: error %q should mention %s", b.f, err, b.says)
		}
		if strings.Contains(err.Error(), testSecret) {
			t.Errorf("%+v: the error quotes the secret's value: %v", b.f, err)
		}
	}
}

// TestRunNetworkFlagErrors checks that a bad network flag stops airlock
// run before anything starts.
func TestRunNetworkFlagErrors(t *testing.T) {
	t.Parallel()
	r := runCLI(t, nil, "run", "--allow-host", "https://example.com/", "--", "true")
	if r.code != 125 || !strings.Contains(r.stderr, "--allow-host") || !strings.Contains(r.stderr, "example.com") {
		t.Errorf("run --allow-host URL: code %d, stderr %q", r.code, r.stderr)
	}
	r = runCLI(t, nil, "run", "--secret", "API_KEY="+testSecret, "--", "true")
	if r.code != 125 || !strings.Contains(r.stderr, "--secret API_KEY") || strings.Contains(r.stderr, testSecret) {
		t.Errorf("run --secret without a host: code %d, stderr %q", r.code, r.stderr)
	}
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a sandbox's network needs root")
	}
}

// TestRunNetwork runs a command in a sandbox with a network: the gateway
// is its name server, and a secret is a placeholder. Nothing leaves the
// host.
func TestRunNetwork(t *testing.T) {
	t.Parallel()
	needRoot(t)
	r := runCLI(t, nil, "run", "--allow-host", "example.com", "--", "sh", "-c", "cat /etc/resolv.conf")
	if r.code != 0 || !strings.Contains(r.stdout, "nameserver 10.88.0.1\n") {
		t.Errorf("resolv.conf: code %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	h := newCLIHome(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := h.cmd(ctx, nil, "run", "--allow-host", "example.com", "--secret", "API_KEY@example.com", "--", "sh", "-c", "echo $API_KEY; env")
	cmd.Env = append(cmd.Env, "API_KEY="+testSecret)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("run --secret: %v", err)
	}
	ph, _, _ := strings.Cut(string(out), "\n")
	if ph == "" || ph == "$API_KEY" || strings.Contains(string(out), testSecret) {
		t.Errorf("run --secret API_KEY@example.com: output\n%s", out)
	}
	if r := runCLI(t, nil, "run", "--", "sh", "-c", "cat /proc/net/dev"); strings.Contains(r.stdout, "eth0") {
		t.Errorf("a sandbox without network flags has an interface:\n%s", r.stdout)
	}
}

// noSecretIn fails the test if a file under dir holds the secret.
func noSecretIn(t *testing.T, dir, secret string) {
	t.Helper()
	n := 0
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		n++
		if b, err := os.ReadFile(path); err == nil && bytes.Contains(b, []byte(secret)) {
			t.Errorf("%s holds the secret's value", path)
		}
		return nil
	})
	if n == 0 {
		t.Errorf("no files under %s", dir)
	}
}

type policyJSON struct {
	SandboxID    string   `json:"sandbox_id"`
	AllowedHosts []string `json:"allowed_hosts"`
	DeniedHosts  []string `json:"denied_hosts"`
}

// TestPolicyCommand changes the hosts of a detached sandbox while it
// runs; its secret is in no file of the state directory.
func TestPolicyCommand(t *testing.T) {
	t.Parallel()
	needRoot(t)
	h := newCLIHome(t)
	id := strings.TrimSpace(h.must(nil, "run", "-d", "--timeout", "5m", "--allow-host", "example.com", "--secret", "API_KEY="+testSecret+"@example.com"))
	prefix := id[:7]
	if out := h.must(nil, "policy", prefix); out != "allowed hosts: example.com\ndenied hosts:  (none)\n" {
		t.Errorf("policy:\n%s", out)
	}
	out := h.must(nil, "policy", prefix, "allow", "*.Example.org", "pypi.org")
	if !strings.Contains(out, "allowed hosts: example.com *.example.org pypi.org\n") {
		t.Errorf("policy allow:\n%s", out)
	}
	h.must(nil, "policy", id, "deny", "bad.example.org")
	h.must(nil, "policy", id, "remove", "pypi.org")
	var got policyJSON
	if err := json.Unmarshal([]byte(h.must(nil, "policy", "--json", prefix)), &got); err != nil {
		t.Fatal(err)
	}
	if got.SandboxID != id || !slices.Equal(got.AllowedHosts, []string{"example.com", "*.example.org"}) || !slices.Equal(got.DeniedHosts, []string{"bad.example.org"}) {
		t.Errorf("policy --json: %+v", got)
	}
	// One bad pattern fails the command; the good ones apply.
	r := h.run(nil, "policy", id, "allow", "http://x.example/", "ok.example")
	if r.code != 1 || !strings.Contains(r.stderr, "http://x.example/") || !strings.Contains(r.stdout, "ok.example") {
		t.Errorf("policy allow with a bad pattern: code %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if r := h.run(nil, "policy", id, "remove", "never.example"); r.code != 1 || !strings.Contains(r.stderr, "neither") {
		t.Errorf("policy remove of an unknown pattern: code %d, stderr %q", r.code, r.stderr)
	}
	if r := h.run(nil, "policy", id, "permit", "x.example"); r.code != 125 || !strings.Contains(r.stderr, "allow, deny or remove") {
		t.Errorf("policy permit: code %d, stderr %q", r.code, r.stderr)
	}
	if r := h.run(nil, "policy", id, "allow"); r.code != 125 {
		t.Errorf("policy allow without hosts: code %d, stderr %q", r.code, r.stderr)
	}
	if out := h.must(nil, "exec", id, "--", "sh", "-c", "echo $API_KEY"); out == "\n" || strings.Contains(out, testSecret) {
		t.Errorf("exec echo $API_KEY: %q", out)
	}
	if strings.Contains(h.must(nil, "get", id), testSecret) {
		t.Error("airlock get shows the secret's value")
	}
	noSecretIn(t, h.home, testSecret)

	// Without a network there is nothing to change.
	plain := strings.TrimSpace(h.must(nil, "run", "-d", "--timeout", "5m"))
	if r := h.run(nil, "policy", plain); r.code != 125 || !strings.Contains(r.stderr, "has no network") || !strings.Contains(r.stderr, "--allow-host") {
		t.Errorf("policy of a sandbox without network: code %d, stderr %q", r.code, r.stderr)
	}
	if r := h.run(nil, "policy", plain, "allow", "example.com"); r.code != 125 || !strings.Contains(r.stderr, "has no network") {
		t.Errorf("policy allow on a sandbox without network: code %d, stderr %q", r.code, r.stderr)
	}
	h.must(nil, "kill", id, plain)
	if r := h.run(nil, "policy", id); r.code != 125 || !strings.Contains(r.stderr, "not running") {
		t.Errorf("policy of a stopped sandbox: code %d, stderr %q", r.code, r.stderr)
	}
}

// TestPolicyRPCSandbox changes the hosts of a sandbox of an airlock rpc
// session through its control socket; the secret the session gave is in
// no file of the state directory.
func TestPolicyRPCSandbox(t *testing.T) {
	t.Parallel()
	needRoot(t)
	h := newCLIHome(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := h.cmd(ctx, nil, "rpc")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr rpcSyncBuf
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// On failure, the context's end kills the server and its sandbox.
	p := newRPCPeer(t, in, out)
	var cr api.CreateResult
	p.result(1, api.MethodCreate, map[string]any{"network": map[string]any{
		"allowed_hosts": []string{"example.com"},
		"secrets":       map[string]any{"API_KEY": map[string]any{"value": testSecret, "hosts": []string{"example.com"}}},
	}}, &cr)
	if ph := cr.Env["API_KEY"]; ph == "" || strings.Contains(ph, testSecret) {
		t.Errorf("create env %v", cr.Env)
	}
	h.waitStatus(cr.SandboxID, "running", 5*time.Second)
	if out := h.must(nil, "policy", cr.SandboxID[:7], "allow", "pypi.org"); !strings.Contains(out, "example.com pypi.org") {
		t.Errorf("policy allow through the control socket:\n%s", out)
	}
	var pr api.PolicyResult
	p.result(2, api.MethodPolicyGet, map[string]any{}, &pr)
	if !slices.Equal(pr.AllowedHosts, []string{"example.com", "pypi.org"}) {
		t.Errorf("policy.get in the session after airlock policy allow: %+v", pr)
	}
	noSecretIn(t, h.home, testSecret)
	in.Close()
	if err := cmd.Wait(); err != nil {
		t.Errorf("airlock rpc: %v\n%s", err, stderr.String())
	}
	if strings.Contains(stderr.String(), testSecret) {
		t.Errorf("airlock rpc logged the secret's value:\n%s", stderr.String())
	}
}
