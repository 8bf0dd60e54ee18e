package policy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestValidateErrors(t *testing.T) {
	tests := []struct {
		name   string
		cfg    Config
		errHas []string
	}{
		{"bad globs", Config{AllowedHosts: []string{"*.", "a*b.com", "ok.com"}}, []string{
			`allowed_hosts[0]: "*." has no domain`,
			`allowed_hosts[1]: "a*b.com": '*' may only be`,
		}},
		{"duplicate host", Config{AllowedHosts: []string{"api.example.com", "API.example.com."}}, []string{
			`allowed_hosts[1]: "API.example.com." is already listed as allowed_hosts[0]`,
		}},
		{"bad denied host", Config{DeniedHosts: []string{"http://x.com"}}, []string{"denied_hosts[0]"}},
		{"bad cidr", Config{AllowedCIDRs: []string{"10.0.0.0/33", "10.1.2.3/8", "0.0.0.0/0", "10.0.0.1", "::ffff:10.0.0.0/104"}}, []string{
			`allowed_cidrs[0]: "10.0.0.0/33" is not a CIDR`,
			`allowed_cidrs[1]: "10.1.2.3/8" has bits set past its length: did you mean 10.0.0.0/8?`,
			`allowed_cidrs[2]: 0.0.0.0/0 is wider than the blocked ranges`,
			`allowed_cidrs[3]: "10.0.0.1" is not a CIDR`,
			`allowed_cidrs[4]: "::ffff:10.0.0.0/104" is an IPv4-mapped prefix`,
		}},
		{"egress", Config{Egress: []EgressRule{
			{Destination: "github.com", Ports: []uint16{0}},
			{Destination: "github.com", Ports: nil},
			{Destination: "github.com", Ports: []uint16{22}, Protocol: "icmp"},
			{Destination: "github.com", Ports: []uint16{22, 22}},
			{Destination: "10.0.0.0/33", Ports: []uint16{22}},
			{Destination: "github.com:22", Ports: []uint16{22}},
			{Destination: "a*b.com", Ports: []uint16{22}},
			{Destination: "TCP", Ports: []uint16{22}, Protocol: "TCP"},
		}}, []string{
			`egress[0].ports[0]: port 0 is not a port`,
			`egress[1].ports: list the ports`,
			`egress[2].protocol: "icmp" is not one of tcp, udp or any`,
			`egress[3].ports[1]: port 22 is listed twice`,
			`egress[4].destination: "10.0.0.0/33" is not a CIDR`,
			`egress[5].destination: "github.com:22" has a port`,
			`egress[6].destination: "a*b.com"`,
			`egress[7].protocol: "TCP"`,
		}},
		{"secrets", Config{Secrets: map[string]Secret{
			"NO_HOSTS":    {Value: "v"},
			"EMPTY_VALUE": {Hosts: []string{"api.example.com"}},
			"BAD_HOST":    {Value: "v", Hosts: []string{"*."}},
			"1BAD":        {Value: "v", Hosts: []string{"api.example.com"}},
			"has-dash":    {Value: "v", Hosts: []string{"api.example.com"}},
			"Token":       {Value: "v", Hosts: []string{"api.example.com"}},
			"TOKEN":       {Value: "v", Hosts: []string{"api.example.com"}},
			"":            {Value: "v", Hosts: []string{"api.example.com"}},
		}}, []string{
			`secrets.NO_HOSTS.hosts: list the hosts`,
			`secrets.EMPTY_VALUE.value: is empty`,
			`secrets.BAD_HOST.hosts[0]: "*." has no domain`,
			`secret name "1BAD" is not an environment variable name`,
			`secret name "has-dash" is not an environment variable name`,
			`"TOKEN" and "Token" differ only in case`,
			`a secret has an empty name`,
		}},
		{"dns", Config{DNSServers: []string{"8.8.8.8:0", "dns.google:53", "[fe80::1%eth0]:53"}}, []string{
			`dns_servers[0]: "8.8.8.8:0" has port 0`,
			`dns_servers[1]: "dns.google:53" is not an address and port`,
			`dns_servers[2]: "[fe80::1%eth0]:53" is zone-scoped`,
		}},
		{"cas", Config{ExtraRootCAs: []string{"", "relative/ca.pem"}}, []string{
			`extra_root_cas[0]: "" must be an absolute path`,
			`extra_root_cas[1]: "relative/ca.pem" must be an absolute path`,
		}},
		{"script syntax", Config{PolicyScript: "def is_host_allowed(host):\n    return True\n\ndef on_request(req)\n    return req\n"}, []string{
			`policy_script: policy_script:4: syntax error: got newline, want ':' at the end of the line`,
		}},
		{"script resolve", Config{PolicyScript: "def on_request(req):\n    return undefined_name\n"}, []string{
			`policy_script: policy_script:2:12: undefined: undefined_name`,
		}},
		{"script load", Config{PolicyScript: "load('x.star', 'y')\ndef on_request(req):\n    return req\n"}, []string{
			`policy_script:1:6: load("x.star"): a policy script is a single file`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if err == nil {
				t.Fatalf("Validate() = nil, want errors")
			}
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("Validate() = %T, want *ConfigError", err)
			}
			for _, want := range tt.errHas {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q\ndoes not say %q", err, want)
				}
			}
			if len(ce.Problems) != len(tt.errHas) {
				t.Errorf("%d problems, want %d: %q", len(ce.Problems), len(tt.errHas), ce.Problems)
			}
			if _, err := New(tt.cfg, Options{}); err == nil {
				t.Error("New accepted what Validate refused")
			}
		})
	}
}

func TestValidateOK(t *testing.T) {
	cfg := Config{
		AllowedHosts: []string{"api.openai.com", "*.amazonaws.com", "*"},
		DeniedHosts:  []string{"evil.amazonaws.com"},
		AllowedCIDRs: []string{"10.1.0.0/16", "169.254.169.254/32", "fd00::/8"},
		Egress: []EgressRule{
			{Destination: "github.com", Ports: []uint16{22}},
			{Destination: "10.0.0.5", Ports: []uint16{5432}, Protocol: "tcp"},
			{Destination: "fd00::/64", Ports: []uint16{53, 5353}, Protocol: "udp"},
			{Destination: "0.0.0.0/0", Ports: []uint16{123}, Protocol: "any"},
			{Destination: "*.example.com", Ports: []uint16{65535}},
		},
		Secrets: map[string]Secret{
			"OPENAI_API_KEY": {Value: "sk-test", Hosts: []string{"api.openai.com"}},
			"_x1":            {Value: "v", Hosts: []string{"*.amazonaws.com", "s3.example.com"}},
		},
		PolicyScript: "def is_host_allowed(host):\n    return True\n",
		DNSServers:   []string{"127.0.0.1:5353", "[::1]:53", "192.0.2.53"},
		ExtraRootCAs: []string{"/tmp/ca.pem"},
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestEmptyConfigDeniesEverything(t *testing.T) {
	for name, cfg := range map[string]Config{
		"zero":        {},
		"empty lists": {AllowedHosts: []string{}, Egress: []EgressRule{}, AllowedCIDRs: []string{}},
		"from json":   mustDecode(t, `{"allowed_hosts": []}`),
		"null":        mustDecode(t, `{"allowed_hosts": null, "egress": null}`),
	} {
		p := newPolicy(t, cfg, Options{})
		for _, h := range []string{"api.openai.com", "example.com", "localhost", "a.b.c.d.e"} {
			if ok, reason := p.HostDecision(h); ok || ReasonCode(reason) != ReasonHostNotAllowed {
				t.Errorf("%s: HostDecision(%q) = %v, %q", name, h, ok, reason)
			}
			if ok, _ := p.NameResolvable(h); ok {
				t.Errorf("%s: NameResolvable(%q) = true", name, h)
			}
		}
		for _, proto := range []string{"tcp", "udp"} {
			for _, port := range []uint16{22, 53, 80, 443} {
				if ok, reason := p.FlowAllowed(proto, []string{"example.com"}, mustAddr("93.184.216.34"), port); ok || ReasonCode(reason) != ReasonNoEgressRule {
					t.Errorf("%s: FlowAllowed(%s, %d) = %v, %q", name, proto, port, ok, reason)
				}
			}
		}
		if len(p.Env()) != 0 || p.HasSecrets() {
			t.Errorf("%s: secrets in an empty config", name)
		}
	}
}

func mustDecode(t *testing.T, s string) Config {
	t.Helper()
	var c Config
	if err := json.Unmarshal([]byte(s), &c); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestConfigJSON(t *testing.T) {
	c := mustDecode(t, `{
		"allowed_hosts": ["api.openai.com", "*.amazonaws.com"],
		"denied_hosts": ["x.amazonaws.com"],
		"block_private_ips": false,
		"allowed_cidrs": ["10.0.0.0/8"],
		"egress": [{"destination": "github.com", "ports": [22], "protocol": "tcp"}],
		"secrets": {"OPENAI_API_KEY": {"value": "sk-1", "hosts": ["api.openai.com"]}},
		"scrub_responses": true,
		"policy_script": "def is_host_allowed(h): return True",
		"dns_servers": ["127.0.0.1:5353"],
		"extra_root_cas": ["/ca.pem"]
	}`)
	if c.BlocksPrivateIPs() || c.BlockPrivateIPs == nil {
		t.Error("block_private_ips false was lost")
	}
	if len(c.AllowedHosts) != 2 || len(c.DeniedHosts) != 1 || len(c.AllowedCIDRs) != 1 || len(c.Egress) != 1 || c.Egress[0].Ports[0] != 22 ||
		c.Secrets["OPENAI_API_KEY"].Value != "sk-1" || !c.ScrubResponses || c.PolicyScript == "" || len(c.DNSServers) != 1 || len(c.ExtraRootCAs) != 1 {
		t.Errorf("decoded %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Error(err)
	}
	if !mustDecode(t, `{}`).BlocksPrivateIPs() {
		t.Error("block_private_ips does not default to true")
	}
	if !mustDecode(t, `{"block_private_ips": true}`).BlocksPrivateIPs() {
		t.Error("block_private_ips true is lost")
	}

	var d Config
	err := json.Unmarshal([]byte(`{"secrets": {"A": {"value": "1", "hosts": ["a.com"]}, "A": {"value": "2", "hosts": ["b.com"]}}}`), &d)
	if err == nil || !strings.Contains(err.Error(), `"A" is given twice`) {
		t.Errorf("duplicate secret: %v", err)
	}
	if err := json.Unmarshal([]byte(`{"secrets": 3}`), &d); err == nil {
		t.Error("secrets: 3 was accepted")
	}
	if err := json.Unmarshal([]byte(`{"egress": [{"destination": "x.com", "ports": [70000]}]}`), &d); err == nil {
		t.Error("port 70000 was accepted")
	}
}

func TestExtraRootCAs(t *testing.T) {
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(good, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.pem")
	if err := os.WriteFile(empty, []byte("not pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := newPolicy(t, Config{ExtraRootCAs: []string{good}}, Options{})
	if cas := p.ExtraRootCAs(); len(cas) != 1 || cas[0].Subject.CommonName != "test CA" {
		t.Errorf("ExtraRootCAs = %v", cas)
	}
	pool, err := p.RootCAs()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.ExtraRootCAs()[0].Verify(x509.VerifyOptions{Roots: pool}); err != nil {
		t.Errorf("the extra CA does not verify against RootCAs: %v", err)
	}
	for _, bad := range []string{empty, filepath.Join(dir, "missing.pem")} {
		if _, err := New(Config{ExtraRootCAs: []string{bad}}, Options{}); err == nil || !strings.Contains(err.Error(), "extra_root_cas") {
			t.Errorf("New with %s: %v", bad, err)
		}
	}
}

func TestDecodeConfig(t *testing.T) {
	c, err := DecodeConfig([]byte(`{"allowed_hosts": ["api.openai.com"], "secrets": {"K": {"value": "v", "hosts": ["api.openai.com"]}}}`))
	if err != nil || len(c.AllowedHosts) != 1 || c.Secrets["K"].Value != "v" {
		t.Fatalf("%+v, %v", c, err)
	}
	for in, want := range map[string]string{
		`{"allowed_host": ["api.openai.com"]}`:                                           `unknown field "allowed_host"`,
		`{"allowed_hosts": ["a.com"], "allowed_hosts": []}`:                              `"allowed_hosts" is given twice`,
		`{"secrets": {"K": {"value": "1", "hosts": ["a.com"]}, "K": {"value": "2"}}}`:    `secrets: "K" is given twice`,
		`{"secrets": {"K": {"value": "1", "hosts": ["a.com"], "host": ["b.com"]}}}`:      `unknown field "host"`,
		`{"allowed_hosts": ["*."]}`:                                                      `allowed_hosts[0]`,
		`{"allowed_hosts": ["a.com"]} {}`:                                                `data after the object`,
		`[]`:                                                                             `cannot unmarshal`,
		`{"egress": [{"destination": "github.com", "ports": [22], "protocols": "tcp"}]}`: `unknown field "protocols"`,
	} {
		if _, err := DecodeConfig([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("DecodeConfig(%s) = %v, want %q", in, err, want)
		}
	}
}
