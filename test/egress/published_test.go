package egress_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/testnet"
	"github.com/airlock-sandbox/airlock/policy"
)

// TestPublishedPortOpensNoEgress proves that a published port lets the
// host in and nothing out: while the host reaches a server in the
// sandbox through it, the sandbox still reaches only its allowed host,
// a host not allowed gets no connection, and the host's side of the
// port is no way out through the gateway.
func TestPublishedPortOpensNoEgress(t *testing.T) {
	e := start(t)
	sb := e.box(t, e.network(testnet.API), func(c *airlock.Config) {
		c.Ports = []airlock.PortMapping{{SandboxPort: 8000}}
	})
	ports := sb.Ports()
	if len(ports) != 1 {
		t.Fatalf("ports %+v", ports)
	}
	pub := net.JoinHostPort(ports[0].HostIP, fmt.Sprint(ports[0].HostPort))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ok(t, sb, "mkdir -p /tmp/www && echo inside > /tmp/www/index.html")
	if _, err := sb.Start(ctx, airlock.Command{Argv: []string{"python3", "-m", "http.server", "-d", "/tmp/www", "8000"}, Stdout: io.Discard, Stderr: io.Discard}); err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := hc.Get("http://" + pub + "/index.html")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(b) == "inside\n" {
				break
			}
			err = fmt.Errorf("status %s, body %q", resp.Status, b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET through the published port %s: %v", pub, err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// The allowed host, as before.
	ok(t, sb, "curl -4 -sS --max-time 10 https://api.example.com/echo")
	// A host not allowed: refused by name and by address.
	m := e.mark()
	fails(t, sb, "curl -sS --max-time 10 https://other.example.org/")
	e.blockedDNS(t, m, testnet.Other, "A", policy.ReasonHostNotAllowed)
	m = e.mark()
	if out := tool(t, sb, fmt.Sprintf("tcp %s %d hello", testnet.OtherAddr, testnet.PortEcho)); !strings.HasPrefix(out, "connect:") {
		t.Errorf("raw TCP to %s:%d with a port published: %q, want the connection refused", testnet.OtherAddr, testnet.PortEcho, out)
	}
	e.blocked(t, m, api.NetTCP, policy.ReasonNoEgressRule, testnet.OtherAddr, testnet.PortEcho)
	// The host's end of the published port is not reachable from the
	// sandbox through the gateway.
	m = e.mark()
	if out := tool(t, sb, fmt.Sprintf("tcp 10.88.0.1 %d hello", ports[0].HostPort)); !strings.HasPrefix(out, "connect:") {
		t.Errorf("the gateway at the published host port %d: %q, want the connection refused", ports[0].HostPort, out)
	}
	e.blocked(t, m, api.NetTCP, policy.ReasonBlockedIP, "10.88.0.1", ports[0].HostPort)
	e.unreached(t, testnet.Other, fmt.Sprintf("%s:%d", testnet.OtherAddr, testnet.PortEcho))
}
