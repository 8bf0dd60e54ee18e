package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
)

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

func TestHostDecision(t *testing.T) {
	p := newPolicy(t, Config{
		AllowedHosts: []string{"api.openai.com", "*.amazonaws.com"},
		DeniedHosts:  []string{"evil.amazonaws.com", "*.bad.amazonaws.com"},
	}, Options{})
	tests := []struct {
		name string
		ok   bool
		code string
	}{
		{"api.openai.com", true, ""},
		{"API.OPENAI.COM.", true, ""},
		{"openai.com", false, ReasonHostNotAllowed},
		{"s3.amazonaws.com", true, ""},
		{"a.b.s3.amazonaws.com", true, ""},
		{"amazonaws.com", false, ReasonHostNotAllowed},
		{"evil.amazonaws.com", false, ReasonHostDenied},
		{"x.evil.amazonaws.com", true, ""},
		{"bad.amazonaws.com", true, ""},
		{"x.bad.amazonaws.com", false, ReasonHostDenied},
		{"10.0.0.1", false, ReasonInvalidHost},
		{"api.openai.com:443", false, ReasonInvalidHost},
		{"", false, ReasonInvalidHost},
	}
	for _, tt := range tests {
		ok, reason := p.HostDecision(tt.name)
		if ok != tt.ok || ReasonCode(reason) != tt.code {
			t.Errorf("HostDecision(%q) = %v, %q; want %v, %s", tt.name, ok, reason, tt.ok, tt.code)
		}
		if p.HostAllowed(tt.name) != tt.ok {
			t.Errorf("HostAllowed(%q) != %v", tt.name, tt.ok)
		}
	}
}

func TestNameResolvable(t *testing.T) {
	p := newPolicy(t, Config{
		AllowedHosts: []string{"api.openai.com"},
		DeniedHosts:  []string{"bad.example.com"},
		Egress: []EgressRule{
			{Destination: "github.com", Ports: []uint16{22}},
			{Destination: "*.example.com", Ports: []uint16{7000}},
			{Destination: "10.0.0.0/8", Ports: []uint16{22}},
		},
	}, Options{})
	for name, want := range map[string]bool{
		"api.openai.com":   true,
		"github.com":       true,
		"a.example.com":    true,
		"bad.example.com":  false,
		"example.com":      false,
		"gitlab.com":       false,
		"10.0.0.1":         false,
		"1.0.0.10.in-addr": false,
	} {
		if ok, reason := p.NameResolvable(name); ok != want {
			t.Errorf("NameResolvable(%q) = %v, %q; want %v", name, ok, reason, want)
		}
	}
}

func TestFlowAllowed(t *testing.T) {
	p := newPolicy(t, Config{
		AllowedHosts: []string{"api.openai.com"},
		DeniedHosts:  []string{"bad.example.com"},
		Egress: []EgressRule{
			{Destination: "github.com", Ports: []uint16{22}},
			{Destination: "10.0.0.5", Ports: []uint16{5432}, Protocol: "tcp"},
			{Destination: "0.0.0.0/0", Ports: []uint16{123}, Protocol: "udp"},
			{Destination: "*.example.com", Ports: []uint16{7000}, Protocol: "any"},
			{Destination: "192.168.0.0/16", Ports: []uint16{5353}, Protocol: "udp"},
			{Destination: "169.254.0.0/16", Ports: []uint16{80}},
		},
	}, Options{})
	gh := mustAddr("140.82.112.3")
	tests := []struct {
		proto string
		names []string
		ip    string
		port  uint16
		ok    bool
		why   string
	}{
		{"tcp", []string{"github.com"}, gh.String(), 22, true, ""},
		{"tcp", []string{"GitHub.com."}, gh.String(), 22, true, ""},
		{"tcp", []string{"github.com"}, gh.String(), 23, false, ReasonNoEgressRule},
		{"udp", []string{"github.com"}, gh.String(), 22, false, ReasonNoEgressRule},
		{"tcp", nil, gh.String(), 22, false, ReasonNoEgressRule},                        // raw IP
		{"tcp", []string{"api.openai.com"}, gh.String(), 22, false, ReasonNoEgressRule}, // allowed_hosts are for HTTP and TLS only
		{"tcp", []string{"github.com"}, "10.0.0.1", 22, false, "10.0.0.0/8"},            // a name rule lifts no block
		{"tcp", []string{"github.com"}, "::ffff:127.0.0.1", 22, false, "127.0.0.0/8"},
		{"tcp", nil, "10.0.0.5", 5432, true, ""},
		{"tcp", nil, "::ffff:10.0.0.5", 5432, true, ""},
		{"tcp", nil, "10.0.0.6", 5432, false, ReasonNoEgressRule},
		{"tcp", nil, "10.0.0.5", 5433, false, ReasonNoEgressRule},
		{"udp", nil, "10.0.0.5", 5432, false, ReasonNoEgressRule},
		{"udp", nil, "8.8.8.8", 123, true, ""},
		{"udp", []string{"pool.ntp.org"}, "8.8.8.8", 123, true, ""},
		{"udp", nil, "10.0.0.1", 123, false, "10.0.0.0/8"}, // 0.0.0.0/0 lifts nothing
		{"udp", nil, "127.0.0.1", 123, false, "127.0.0.0/8"},
		{"udp", nil, "2001:4860:4860::8888", 123, false, ReasonNoEgressRule},
		{"tcp", nil, "8.8.8.8", 123, false, ReasonNoEgressRule},
		{"tcp", []string{"a.example.com"}, "1.2.3.4", 7000, true, ""},
		{"udp", []string{"a.example.com"}, "1.2.3.4", 7000, true, ""},
		{"tcp", []string{"bad.example.com"}, "1.2.3.4", 7000, false, ReasonNoEgressRule},
		{"tcp", []string{"bad.example.com", "a.example.com"}, "1.2.3.4", 7000, true, ""},
		{"tcp", []string{"example.com"}, "1.2.3.4", 7000, false, ReasonNoEgressRule},
		{"tcp", []string{"a.example.com:7000"}, "1.2.3.4", 7000, false, ReasonNoEgressRule},
		{"icmp", []string{"github.com"}, gh.String(), 22, false, ReasonNoEgressRule},
		{"TCP", []string{"github.com"}, gh.String(), 22, false, ReasonNoEgressRule},
		{"udp", nil, "192.168.1.1", 5353, true, ""},
		{"udp", nil, "192.168.1.1", 53, false, ReasonNoEgressRule},
		{"tcp", nil, "169.254.1.1", 80, true, ""},
		{"tcp", nil, "169.254.169.254", 80, false, "cloud metadata"}, // the range does not lift the metadata address
		{"tcp", nil, "fe80::1%eth0", 5432, false, ReasonNoEgressRule},
	}
	for _, tt := range tests {
		ok, reason := p.FlowAllowed(tt.proto, tt.names, mustAddr(tt.ip), tt.port)
		if ok != tt.ok || !ok && !strings.Contains(reason, tt.why) || ok && reason != "" {
			t.Errorf("FlowAllowed(%s, %q, %s, %d) = %v, %q; want %v, %q", tt.proto, tt.names, tt.ip, tt.port, ok, reason, tt.ok, tt.why)
		}
	}
}

func TestRuntimeHostUpdates(t *testing.T) {
	p := newPolicy(t, Config{AllowedHosts: []string{"a.example.com"}}, Options{})
	if p.HostAllowed("b.example.com") {
		t.Fatal("b allowed before AllowHost")
	}
	if err := p.AllowHost("B.Example.com."); err != nil {
		t.Fatal(err)
	}
	if !p.HostAllowed("b.example.com") {
		t.Fatal("b not allowed after AllowHost")
	}
	if err := p.AllowHost("b.example.com"); err != nil {
		t.Fatal(err) // adding twice is not an error
	}
	allowed, denied := p.Hosts()
	if !slices.Equal(allowed, []string{"a.example.com", "b.example.com"}) || len(denied) != 0 {
		t.Errorf("Hosts() = %q, %q", allowed, denied)
	}
	if err := p.AllowHost("a*b.com"); err == nil || !strings.Contains(err.Error(), "'*' may only be") {
		t.Errorf("AllowHost(a*b.com) = %v", err)
	}
	if err := p.AllowHost("*.example.com"); err != nil {
		t.Fatal(err)
	}
	if err := p.DenyHost("c.example.com"); err != nil {
		t.Fatal(err)
	}
	if ok, reason := p.HostDecision("c.example.com"); ok || ReasonCode(reason) != ReasonHostDenied {
		t.Errorf("c after DenyHost: %v, %q", ok, reason)
	}
	if !p.HostAllowed("d.example.com") {
		t.Error("d not allowed by *.example.com")
	}
	// Denying an allowed pattern moves it; allowing a denied one moves
	// it back.
	if err := p.DenyHost("a.example.com"); err != nil {
		t.Fatal(err)
	}
	allowed, denied = p.Hosts()
	if slices.Contains(allowed, "a.example.com") || !slices.Contains(denied, "a.example.com") {
		t.Errorf("after DenyHost(a): %q, %q", allowed, denied)
	}
	if err := p.AllowHost("a.example.com"); err != nil {
		t.Fatal(err)
	}
	if !p.HostAllowed("a.example.com") {
		t.Error("a not allowed after AllowHost")
	}
	if err := p.RemoveHost("*.example.com"); err != nil {
		t.Fatal(err)
	}
	if p.HostAllowed("d.example.com") {
		t.Error("d allowed after RemoveHost(*.example.com)")
	}
	if err := p.RemoveHost("c.example.com"); err != nil {
		t.Fatal(err)
	}
	if err := p.RemoveHost("zzz.example.com"); !errors.Is(err, ErrNotListed) {
		t.Errorf("RemoveHost of an unlisted pattern = %v", err)
	}
	if err := p.RemoveHost("*."); err == nil {
		t.Error("RemoveHost(*.) = nil")
	}
	// Removing every pattern leaves no egress.
	for _, h := range []string{"a.example.com", "b.example.com"} {
		if err := p.RemoveHost(h); err != nil {
			t.Fatal(err)
		}
	}
	if allowed, _ := p.Hosts(); len(allowed) != 0 || p.HostAllowed("a.example.com") {
		t.Errorf("after removing everything: %q", allowed)
	}
}

func TestRuntimeHostUpdatesConcurrent(t *testing.T) {
	p := newPolicy(t, Config{AllowedHosts: []string{"stable.example.com"}}, Options{})
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if !p.HostAllowed("stable.example.com") {
					t.Error("stable host lost during updates")
					return
				}
				p.HostAllowed("h1.example.com")
				p.Hosts()
			}
		}()
	}
	for i := 0; i < 500; i++ {
		h := fmt.Sprintf("h%d.example.com", i%7)
		if err := p.AllowHost(h); err != nil {
			t.Fatal(err)
		}
		if err := p.DenyHost(h); err != nil {
			t.Fatal(err)
		}
		if err := p.RemoveHost(h); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
}

func TestReasonOf(t *testing.T) {
	if ReasonOf(nil) != "" {
		t.Error("ReasonOf(nil)")
	}
	if ReasonOf(errors.New("x")) != ReasonPolicyError {
		t.Error("a plain error is not a policy error")
	}
	err := fmt.Errorf("wrapped: %w", &BlockError{Reason: ReasonSecretLeak, Detail: "d"})
	if ReasonOf(err) != ReasonSecretLeak || !errors.Is(err, ErrSecretLeak) || errors.Is(err, ErrSecretUnrewritable) {
		t.Errorf("ReasonOf(%v) = %q", err, ReasonOf(err))
	}
	if ReasonCode("blocked_ip: 10.0.0.1 is in 10.0.0.0/8") != ReasonBlockedIP || ReasonCode("secret_leak") != ReasonSecretLeak {
		t.Error("ReasonCode")
	}
}

func TestCheckURL(t *testing.T) {
	abs := "https://api.example.com/v1?q=1"
	for _, tt := range []struct {
		orig, got string
		ok        bool
	}{
		{abs, "https://api.example.com/v2", true},
		{abs, "HTTPS://API.example.com./v2", true},
		{abs, "https://api.example.com", true},
		{abs, "https://evil.com/v1", false},
		{abs, "http://api.example.com/v1", false},
		{abs, "https://api.example.com:8443/v1", false},
		{abs, "https://api.example.com@evil.com/v1", false},
		{abs, "https:evil.com", false},
		{abs, "//evil.com/x", false},
		{abs, "/v1", false},
		{abs, "%zz", false},
		{"/v1?q=1", "/v2", true},
		{"/v1", "https://evil.com/v1", false},
		{"/v1", "//evil.com/v1", false},
		{"/v1", "v1", false},
		{"https://api.example.com:8443/", "https://api.example.com:8443/x", true},
	} {
		err := checkURL(tt.orig, tt.got)
		if (err == nil) != tt.ok {
			t.Errorf("checkURL(%q, %q) = %v, want ok %v", tt.orig, tt.got, err, tt.ok)
		}
	}
}
