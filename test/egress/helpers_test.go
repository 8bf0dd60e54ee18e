package egress_test

import (
	"context"
	_ "embed"
	"encoding/json"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/testnet"
	"github.com/airlock-sandbox/airlock/policy"
)

// toolPy is the client side of the tests that need more than curl:
// raw DNS, TCP and UDP, WebSocket, urllib and http.client.
//
//go:embed testdata/tool.py
var toolPy []byte

// toolPath is where box puts tool.py inside each sandbox.
const toolPath = "/tmp/tool.py"

// reasonCodes are the codes a blocked event's reason may start with.
var reasonCodes = []string{
	policy.ReasonHostNotAllowed,
	policy.ReasonHostDenied,
	policy.ReasonPortNotAllowed,
	policy.ReasonInvalidHost,
	policy.ReasonScriptDenied,
	policy.ReasonBlockedIP,
	policy.ReasonNoEgressRule,
	policy.ReasonSecretLeak,
	policy.ReasonSecretUnrewritable,
	policy.ReasonSecretPlaintext,
	policy.ReasonScriptBlocked,
	policy.ReasonHookBlocked,
	policy.ReasonPolicyError,
	policy.ReasonNoSNI,
	policy.ReasonSNIMismatch,
	policy.ReasonHostMismatch,
	policy.ReasonProxyRequest,
	policy.ReasonBadRequest,
	policy.ReasonUpstreamError,
	policy.ReasonLimit,
}

// start is newEnv with checks that hold for every event of every test,
// made once the test's sandboxes are closed and their events are all in:
// a blocked event gives a reason that starts with one of the codes of
// policy/errors.go, and no event carries any of e.values (the values of
// the secrets given to the test's sandboxes).
func start(t *testing.T) *env {
	t.Helper()
	e := newEnv(t)
	t.Cleanup(func() {
		e.mu.Lock()
		values := slices.Clone(e.values)
		e.mu.Unlock()
		for _, ev := range e.events() {
			if ev.Blocked && !slices.Contains(reasonCodes, policy.ReasonCode(ev.Reason)) {
				t.Errorf("blocked event with reason %q, whose code is not one of policy/errors.go: %+v", ev.Reason, ev)
			}
			b, _ := json.Marshal(ev)
			for _, s := range values {
				if strings.Contains(string(b), s) {
					t.Errorf("an event carries a secret value: %s", b)
				}
			}
		}
	})
	return e
}

// box is e.sandbox with tool.py in /tmp.
func (e *env) box(t *testing.T, n *policy.Config, tweak ...func(*airlock.Config)) *airlock.Sandbox {
	t.Helper()
	sb := e.sandbox(t, n, tweak...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sb.WriteFile(ctx, toolPath, toolPy, 0o644); err != nil {
		t.Fatalf("write %s: %v", toolPath, err)
	}
	return sb
}

// events returns the events so far.
func (e *env) events() []airlock.NetworkEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.ev)
}

// mark returns the position of the next event, for since.
func (e *env) mark() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.ev)
}

// since waits for an event at position from or later that match
// accepts.
func (e *env) since(t *testing.T, from int, what string, match func(airlock.NetworkEvent) bool) airlock.NetworkEvent {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		evs := e.events()
		for _, ev := range evs[min(from, len(evs)):] {
			if match(ev) {
				return ev
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no event %s among the %d since #%d:\n%s", what, len(evs)-from, from, eventList(evs[min(from, len(evs)):]))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// blocked waits for an event at position from or later of kind kind, for
// destination ip:port (port 0: any; ip "": any), and checks that it is
// blocked with reason code code.
func (e *env) blocked(t *testing.T, from int, kind, code, ip string, port uint16) airlock.NetworkEvent {
	t.Helper()
	ev := e.since(t, from, kind+" event for "+ip, func(ev airlock.NetworkEvent) bool {
		return ev.Kind == kind && (ip == "" || ev.IP == ip) && (port == 0 || ev.Port == port)
	})
	wantBlocked(t, ev, kind, code)
	return ev
}

// blockedDNS waits for a DNS event at position from or later about name
// and type qtype, and checks that it is blocked with reason code code.
func (e *env) blockedDNS(t *testing.T, from int, name, qtype, code string) airlock.NetworkEvent {
	t.Helper()
	ev := e.since(t, from, "dns "+qtype+" "+name, func(ev airlock.NetworkEvent) bool {
		return ev.Kind == api.NetDNS && ev.Host == name && ev.QType == qtype
	})
	wantBlocked(t, ev, api.NetDNS, code)
	if len(ev.Answers) != 0 {
		t.Errorf("blocked DNS event has answers %v: %+v", ev.Answers, ev)
	}
	return ev
}

// request waits for the http event at position from or later for url.
func (e *env) request(t *testing.T, from int, url string) airlock.NetworkEvent {
	t.Helper()
	return e.since(t, from, "http "+url, func(ev airlock.NetworkEvent) bool {
		return ev.Kind == api.NetHTTP && ev.URL == url
	})
}

// allowed waits for the http event at position from or later for url,
// and checks that it passed with the fields an allowed request has.
func (e *env) allowed(t *testing.T, from int, method, url, host string, status int) airlock.NetworkEvent {
	t.Helper()
	ev := e.request(t, from, url)
	if ev.Blocked || ev.Reason != "" {
		t.Errorf("%s %s: blocked (%q), want allowed: %+v", method, url, ev.Reason, ev)
	}
	if ev.Method != method || ev.Host != host || ev.StatusCode != status {
		t.Errorf("%s %s: event has method %q host %q status %d, want %q %q %d: %+v", method, url, ev.Method, ev.Host, ev.StatusCode, method, host, status, ev)
	}
	if ev.ResponseBytes <= 0 || ev.DurationMs < 0 {
		t.Errorf("%s %s: event has response_bytes %d, duration_ms %d: %+v", method, url, ev.ResponseBytes, ev.DurationMs, ev)
	}
	return ev
}

// wantBlocked checks an event's kind, that it is blocked, and its reason
// code.
func wantBlocked(t *testing.T, ev airlock.NetworkEvent, kind, code string) {
	t.Helper()
	if ev.Kind != kind || !ev.Blocked || policy.ReasonCode(ev.Reason) != code {
		t.Errorf("want a blocked %s event with reason %s, got %+v", kind, code, ev)
	}
}

// fails runs command in sb and fails the test unless it exits non-zero;
// it returns the result.
func fails(t *testing.T, sb *airlock.Sandbox, command string) *airlock.ExecResult {
	t.Helper()
	res := sh(t, sb, command)
	if res.ExitCode == 0 {
		t.Fatalf("%q succeeded, want a failure\nstdout: %s\nstderr: %s", command, res.Stdout, res.Stderr)
	}
	return res
}

// tool runs tool.py with args (a shell command line tail) and returns
// its standard output; it fails the test when tool.py fails.
func tool(t *testing.T, sb *airlock.Sandbox, args string) string {
	t.Helper()
	return strings.TrimSpace(ok(t, sb, "python3 "+toolPath+" "+args))
}

// unreached fails the test when any of the World's servers got a
// connection or datagram at one of addrs (in the form Reached takes).
func (e *env) unreached(t *testing.T, addrs ...string) {
	t.Helper()
	for _, a := range addrs {
		if !wellFormed(a) {
			t.Fatalf("unreached(%q): not an address, address and port, or name that Reached knows", a)
		}
		if n := e.w.Reached(a); n != 0 {
			t.Errorf("%s was reached %d times, want never", a, n)
		}
	}
}

// wellFormed reports whether a is in a form that Reached reads (a
// malformed one would match nothing, and prove nothing).
func wellFormed(a string) bool {
	if _, err := netip.ParseAddrPort(a); err == nil {
		return true
	}
	if _, err := netip.ParseAddr(a); err == nil {
		return true
	}
	if h, _, err := net.SplitHostPort(a); err == nil {
		a = h
	}
	return slices.Contains([]string{testnet.API, testnet.Other, testnet.Files, testnet.Private, testnet.Loop, testnet.Metadata}, a)
}
