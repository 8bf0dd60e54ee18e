package egress_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/testnet"
	"github.com/airlock-sandbox/airlock/policy"
)

// TestPortsDefaultWebOnly proves that an allowed name is reachable with
// HTTP and TLS on ports 80 and 443 only: the same clients on the other
// ports of the same host (its other HTTPS and HTTP servers, its TCP echo
// service spoken to in HTTP or TLS, a port nothing listens on) are
// refused before anything is dialled, with a port_not_allowed event that
// says how to open the port, and no server there gets a connection.
func TestPortsDefaultWebOnly(t *testing.T) {
	e := start(t)
	sb := e.box(t, e.network(testnet.API, testnet.Other))
	for _, c := range []struct {
		cmd  string
		port uint16
	}{
		{"curl -4 -sS --max-time 10 https://api.example.com:8443/", 8443},
		{"curl -4 -sS --max-time 10 http://api.example.com:8080/", 8080},
		{"curl -4 -sS --max-time 10 http://api.example.com:2222/", 2222}, // HTTP at the echo service
		{"curl -4 -sS --max-time 10 https://api.example.com:2222/", 2222},
		{"curl -4 -sS --max-time 10 http://other.example.org:25/", 25},
		{"curl -4 -sS --max-time 10 --http2-prior-knowledge http://other.example.org:8080/", 8080},
	} {
		m := e.mark()
		fails(t, sb, c.cmd)
		ev := e.since(t, m, fmt.Sprintf("tcp event for port %d", c.port), func(ev api.NetworkEvent) bool {
			return ev.Kind == api.NetTCP && ev.Port == c.port
		})
		wantBlocked(t, ev, api.NetTCP, policy.ReasonPortNotAllowed)
		pattern := fmt.Sprintf("%s:%d", ev.Host, c.port)
		if !strings.Contains(ev.Reason, "--allow-host "+pattern) || !strings.Contains(ev.Reason, "ports 80, 443 only") {
			t.Errorf("%s: reason %q does not say the open ports and --allow-host %s", c.cmd, ev.Reason, pattern)
		}
	}
	// A python client that speaks HTTP on a raw socket to the echo
	// service is refused the same way: the cross-protocol request never
	// reaches it.
	m := e.mark()
	if out := tool(t, sb, "tcp api.example.com 2222 'GET / HTTP/1.1\r\nHost: api.example.com\r\n\r\n'"); strings.HasPrefix(out, "echo:") {
		t.Errorf("HTTP to the echo port: %q", out)
	}
	e.blocked(t, m, api.NetTCP, policy.ReasonPortNotAllowed, testnet.APIAddr, testnet.PortEcho)
	e.unreached(t, "api.example.com:8443", "api.example.com:8080", "api.example.com:2222", "other.example.org:8080")

	// 80 and 443 work.
	ok(t, sb, "curl -4 -sS --max-time 10 https://api.example.com/ http://other.example.org/")
}

// TestPortsNamedByPattern proves that a pattern with a port opens that
// port alone, for exact and wildcard patterns and for patterns added
// while the sandbox runs; that the interceptor decides each request's
// own name on the port (an address pinned to two names, one allowed on
// the port and one not); and that egress rules keep their own ports.
func TestPortsNamedByPattern(t *testing.T) {
	e := start(t)
	n := e.network(testnet.API+":8443", "*.example.org:8080", testnet.Files, testnet.WrongName)
	n.Egress = []policy.EgressRule{{Destination: testnet.Files, Ports: []uint16{testnet.PortEcho}}}
	sb := e.box(t, n)

	m := e.mark()
	echo := echoOf(t, ok(t, sb, "curl -4 -sS --max-time 10 https://api.example.com:8443/echo"))
	if echo.Server != testnet.APIAddr+":8443" || !echo.TLS {
		t.Errorf("api.example.com:8443: the server saw %+v", echo)
	}
	e.allowed(t, m, "GET", "https://api.example.com:8443/echo", testnet.API, 200)
	m = e.mark()
	echo = echoOf(t, ok(t, sb, "curl -4 -sS --max-time 10 http://other.example.org:8080/echo"))
	if echo.Server != testnet.OtherAddr+":8080" {
		t.Errorf("other.example.org:8080: the server saw %+v", echo)
	}
	e.allowed(t, m, "GET", "http://other.example.org:8080/echo", testnet.Other, 200)

	// A pattern with a port opens that port only: not 443, nor 80.
	for _, c := range []struct {
		url  string
		port uint16
		open string
	}{
		{"https://api.example.com/", 443, "port 8443 only"},
		{"http://api.example.com/", 80, "port 8443 only"},
		{"https://other.example.org/", 443, "port 8080 only"},
		{"https://files.example.net:8443/", 8443, "ports 80, 443 only"},
	} {
		m := e.mark()
		fails(t, sb, "curl -4 -sS --max-time 10 "+c.url)
		ev := e.since(t, m, "tcp event for "+c.url, func(ev api.NetworkEvent) bool {
			return ev.Kind == api.NetTCP && ev.Port == c.port
		})
		wantBlocked(t, ev, api.NetTCP, policy.ReasonPortNotAllowed)
		if !strings.Contains(ev.Reason, c.open) {
			t.Errorf("%s: reason %q does not say %q", c.url, ev.Reason, c.open)
		}
	}

	// wrongname.example.com shares api.example.com's address, where
	// 8443 is open for api.example.com alone: the interceptor refuses
	// wrongname.example.com there, by SNI and by Host.
	m = e.mark()
	fails(t, sb, "curl -4 -sS --max-time 10 -k https://wrongname.example.com:8443/")
	if ev := e.blocked(t, m, api.NetTCP, policy.ReasonPortNotAllowed, testnet.APIAddr, 8443); ev.Host != testnet.WrongName {
		t.Errorf("the refusal names %q, want %s", ev.Host, testnet.WrongName)
	}
	n8080 := len(e.w.Requests(testnet.APIAddr + ":8080"))
	if err := sb.AllowHost(testnet.API + ":8080"); err != nil {
		t.Fatal(err)
	}
	m = e.mark()
	res := sh(t, sb, "curl -4 -sS --max-time 10 -o /dev/null -w '%{http_code}' http://wrongname.example.com:8080/")
	if string(res.Stdout) != "403" {
		t.Errorf("plain HTTP to wrongname.example.com:8080: status %q, want 403", res.Stdout)
	}
	if ev := e.request(t, m, "http://wrongname.example.com:8080/"); !ev.Blocked || policy.ReasonCode(ev.Reason) != policy.ReasonPortNotAllowed {
		t.Errorf("event %+v, want blocked with port_not_allowed", ev)
	}
	if got := len(e.w.Requests(testnet.APIAddr + ":8080")); got != n8080 {
		t.Errorf("%s:8080 got %d requests, want %d", testnet.APIAddr, got, n8080)
	}

	// Opened while it runs: api.example.com:8080 now works.
	m = e.mark()
	ok(t, sb, "curl -4 -sS --max-time 10 http://api.example.com:8080/")
	e.allowed(t, m, "GET", "http://api.example.com:8080/", testnet.API, 200)

	// Egress rules are unchanged: files.example.net's echo service is
	// reached on the port the rule names.
	if out := tool(t, sb, "tcp files.example.net 2222 hello banner"); !strings.Contains(out, "echo: 'hello'") {
		t.Errorf("egress rule to files.example.net:2222: %q", out)
	}
}
