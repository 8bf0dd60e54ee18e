package policy

import (
	"slices"
	"strings"
	"testing"
)

func TestAllowedPatternPorts(t *testing.T) {
	for in, want := range map[string]string{
		"api.example.com":       "api.example.com",
		"API.Example.com.:8443": "api.example.com:8443",
		"*.example.com:8080":    "*.example.com:8080",
		"*:8080":                "*:8080",
		"api.example.com:443":   "api.example.com:443",
	} {
		g, err := compileHostPort(in)
		if err != nil || g.text != want {
			t.Errorf("compileHostPort(%q) = %q, %v; want %q", in, g.text, err, want)
			continue
		}
		// The text compiles to itself.
		if g2, err := compileHostPort(g.text); err != nil || g2 != g {
			t.Errorf("compileHostPort(%q) = %+v, %v; want %+v", g.text, g2, err, g)
		}
	}
	for in, errHas := range map[string]string{
		"api.example.com:0":           "not a port",
		"api.example.com:65536":       "not a port",
		"api.example.com:http":        "not a port",
		"api.example.com:+80":         "not a port",
		"api.example.com:":            "not a port",
		"api.example.com:80:90":       "not a host name",
		"10.0.0.1:80":                 "is an address",
		"[::1]:80":                    "is an address",
		"https://a.example.com:8443/": "is a URL",
		"*.:8080":                     "no domain",
		":8080":                       "empty host pattern",
	} {
		err := CheckAllowedPattern(in)
		if err == nil || !strings.Contains(err.Error(), errHas) {
			t.Errorf("CheckAllowedPattern(%q) = %v, want an error with %q", in, err, errHas)
		}
	}
	// Ports are for allowed_hosts only.
	err := (&Config{
		AllowedHosts: []string{"api.example.com:8443"},
		DeniedHosts:  []string{"bad.example.com:8443"},
		Secrets:      map[string]Secret{"K": {Value: "v", Hosts: []string{"api.example.com:8443"}}},
		Egress:       []EgressRule{{Destination: "git.example.com:22", Ports: []uint16{22}}},
	}).Validate()
	for _, want := range []string{
		`denied_hosts[0]: "bad.example.com:8443" has a port`,
		`secrets.K.hosts[0]: "api.example.com:8443" has a port`,
		`egress[0].destination: "git.example.com:22" has a port`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v, want it to say %q", err, want)
		}
	}
	if err != nil && strings.Contains(err.Error(), "allowed_hosts[") {
		t.Errorf("Validate refused an allowed_hosts pattern with a port: %v", err)
	}
}

func TestHostPortDecision(t *testing.T) {
	p := newPolicy(t, Config{
		AllowedHosts: []string{"api.example.com", "api.example.com:8443", "*.example.org:8080", "*.example.net:9000"},
		DeniedHosts:  []string{"bad.example.org"},
	}, Options{})
	tests := []struct {
		name string
		port uint16
		code string // "" for allowed
	}{
		{"api.example.com", 80, ""},
		{"api.example.com", 443, ""},
		{"api.example.com", 8443, ""},
		{"api.example.com", 8080, ReasonPortNotAllowed},
		{"api.example.com", 22, ReasonPortNotAllowed},
		{"api.example.com", 0, ReasonPortNotAllowed},
		{"a.example.org", 8080, ""},
		{"a.example.org", 80, ReasonPortNotAllowed},
		{"a.example.org", 443, ReasonPortNotAllowed},
		{"bad.example.org", 8080, ReasonHostDenied},
		{"example.org", 8080, ReasonHostNotAllowed},
		{"anything.example.net", 9000, ""},
		{"anything.example.net", 443, ReasonPortNotAllowed},
		{"10.0.0.1", 443, ReasonInvalidHost},
	}
	for _, tt := range tests {
		ok, reason := p.HostPortDecision(tt.name, tt.port)
		if ok != (tt.code == "") || ReasonCode(reason) != tt.code {
			t.Errorf("HostPortDecision(%q, %d) = %v, %q; want code %q", tt.name, tt.port, ok, reason, tt.code)
		}
		if p.HostPortAllowed(tt.name, tt.port) != ok {
			t.Errorf("HostPortAllowed(%q, %d) != HostPortDecision", tt.name, tt.port)
		}
	}
	// The name is allowed on some port: DNS answers it.
	for _, n := range []string{"api.example.com", "a.example.org", "anything.example.net"} {
		if !p.HostAllowed(n) {
			t.Errorf("HostAllowed(%q) = false", n)
		}
	}
	// The refusal names the open ports and says how to open this one.
	_, reason := p.HostPortDecision("api.example.com", 8080)
	for _, want := range []string{"ports 80, 443, 8443 only", "api.example.com:8080", "--allow-host api.example.com:8080"} {
		if !strings.Contains(reason, want) {
			t.Errorf("reason %q does not say %q", reason, want)
		}
	}
	if _, reason := p.HostPortDecision("a.example.org", 443); !strings.Contains(reason, "on port 8080 only") {
		t.Errorf("reason %q does not name port 8080", reason)
	}
	// "*" with a port: any public host, on that port alone.
	any := newPolicy(t, Config{AllowedHosts: []string{"*:9000"}}, Options{})
	for _, tt := range []struct {
		name string
		port uint16
		ok   bool
	}{{"a.example.com", 9000, true}, {"a.example.com", 443, false}, {"localhost", 9000, false}} {
		if ok, reason := any.HostPortDecision(tt.name, tt.port); ok != tt.ok {
			t.Errorf("*:9000: HostPortDecision(%q, %d) = %v, %q", tt.name, tt.port, ok, reason)
		}
	}
}

func TestRuntimeHostPorts(t *testing.T) {
	p := newPolicy(t, Config{AllowedHosts: []string{"api.example.com"}}, Options{})
	if p.HostPortAllowed("api.example.com", 8443) {
		t.Fatal("8443 allowed before AllowHost")
	}
	if err := p.AllowHost("api.example.com:8443"); err != nil {
		t.Fatal(err)
	}
	if !p.HostPortAllowed("api.example.com", 8443) || !p.HostPortAllowed("api.example.com", 443) {
		t.Fatal("api.example.com:8443 and :443 not both allowed after AllowHost")
	}
	if allowed, _ := p.Hosts(); !slices.Equal(allowed, []string{"api.example.com", "api.example.com:8443"}) {
		t.Errorf("Hosts() = %q", allowed)
	}
	if err := p.DenyHost("api.example.com:8443"); err == nil || !strings.Contains(err.Error(), "has a port") {
		t.Errorf("DenyHost with a port = %v, want an error", err)
	}
	if err := p.RemoveHost("api.example.com:8443"); err != nil {
		t.Fatal(err)
	}
	if p.HostPortAllowed("api.example.com", 8443) || !p.HostPortAllowed("api.example.com", 443) {
		t.Error("after RemoveHost(api.example.com:8443): 8443 still allowed, or 443 not")
	}
	if err := p.AllowHost("api.example.com:x"); err == nil {
		t.Error("AllowHost(api.example.com:x) = nil")
	}
}

func TestResponseHeaderTimeoutConfig(t *testing.T) {
	if d := (Config{}).ResponseHeaderTimeout(); d != DefaultResponseHeaderTimeout {
		t.Errorf("default %v", d)
	}
	p := newPolicy(t, Config{ResponseHeaderTimeoutSeconds: 1.5}, Options{})
	if d := p.ResponseHeaderTimeout(); d.Milliseconds() != 1500 {
		t.Errorf("1.5 s gave %v", d)
	}
	for _, bad := range []float64{-1, 0.0001, 1e9} {
		err := (&Config{ResponseHeaderTimeoutSeconds: bad}).Validate()
		if err == nil || !strings.Contains(err.Error(), "response_header_timeout_seconds") {
			t.Errorf("%v: %v", bad, err)
		}
	}
	if _, err := DecodeConfig([]byte(`{"response_header_timeout_seconds": 30}`)); err != nil {
		t.Error(err)
	}
}
