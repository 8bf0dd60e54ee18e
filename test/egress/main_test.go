// Package egress_test drives real clients inside real sandboxes (curl,
// python3, openssl, git) against the stand-in internet of package
// testnet, which lives in this test binary's own network namespace: what
// the sandbox may reach, and every way out it must not have.
package egress_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/testbin"
	"github.com/airlock-sandbox/airlock/internal/testnet"
	"github.com/airlock-sandbox/airlock/policy"
)

const envBuilt = "AIRLOCK_EGRESS_TEST_BUILT"

func TestMain(m *testing.M) {
	if os.Getenv(envBuilt) == "" {
		// Built once, here, before testnet re-executes this binary in
		// its own network namespace.
		dir, err := testbin.Dir("airlock-egress-test-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "TestMain:", err)
			os.Exit(2)
		}
		code := func() int {
			defer os.RemoveAll(dir)
			bins, err := testbin.Build(dir, "airlock-guest")
			if err != nil {
				fmt.Fprintln(os.Stderr, "TestMain:", err)
				return 2
			}
			home := filepath.Join(dir, "home")
			os.Setenv("AIRLOCK_AGENT", bins[0])
			os.Setenv("AIRLOCK_HOME", home)
			os.Setenv(envBuilt, "1")
			return testnet.Main(m)
		}()
		os.Exit(code)
	}
	os.Exit(testnet.Main(m))
}

// env is one test's world and the network events of its sandboxes.
type env struct {
	w  *testnet.World
	mu sync.Mutex
	ev []airlock.NetworkEvent
	// values are secret values that no event may carry (see start).
	values []string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network egress needs root")
	}
	return &env{w: testnet.Start(t)}
}

// network returns a policy config that resolves through the World's DNS
// and trusts its CA upstream, with allowed hosts.
func (e *env) network(allowed ...string) *policy.Config {
	return &policy.Config{
		AllowedHosts: allowed,
		DNSServers:   []string{e.w.DNSAddr},
		ExtraRootCAs: []string{e.w.CAFile},
	}
}

// sandbox creates a sandbox with network n whose events e records.
func (e *env) sandbox(t *testing.T, n *policy.Config, tweak ...func(*airlock.Config)) *airlock.Sandbox {
	t.Helper()
	cfg := airlock.Config{
		Isolation: level(),
		Network:   n,
		OnEvent: func(ev airlock.Event) {
			if ev.Network != nil {
				e.mu.Lock()
				e.ev = append(e.ev, *ev.Network)
				e.mu.Unlock()
			}
		},
	}
	if cache := os.Getenv("AIRLOCK_TEST_IMAGE_CACHE"); level() == airlock.IsolationVM && cache != "" {
		// A VM on an image is restored from a snapshot rather than
		// booted, which under TCG is several times faster; the
		// minimal image has what the tests run (curl, python3,
		// openssl). The host's root stays the default without the
		// test image cache, and for a test that asks for it (hostRoot).
		cfg.Image, cfg.ImageCacheDir = "minimal", cache
	}
	for _, f := range tweak {
		f(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb, err := airlock.Create(ctx, cfg)
	if err != nil {
		t.Fatalf("create sandbox: %v", err)
	}
	t.Cleanup(func() { sb.Close() })
	return sb
}

// hostRoot is a tweak for a sandbox on the host's root, whatever the
// level: for a test that needs a program the minimal image lacks (ip,
// git).
func hostRoot(cfg *airlock.Config) { cfg.Image, cfg.ImageCacheDir = "", "" }

// event waits for a network event that match accepts.
func (e *env) event(t *testing.T, what string, match func(airlock.NetworkEvent) bool) airlock.NetworkEvent {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		e.mu.Lock()
		for _, ev := range e.ev {
			if match(ev) {
				e.mu.Unlock()
				return ev
			}
		}
		all := append([]airlock.NetworkEvent(nil), e.ev...)
		e.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("no event %s among %d:\n%s", what, len(all), eventList(all))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func eventList(evs []airlock.NetworkEvent) string {
	var b strings.Builder
	for _, ev := range evs {
		fmt.Fprintf(&b, "  %+v\n", ev)
	}
	return b.String()
}

// sh runs a shell command line in sb and returns its result.
func sh(t *testing.T, sb *airlock.Sandbox, command string) *airlock.ExecResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience()*60*time.Second)
	defer cancel()
	res, err := sb.Exec(ctx, command)
	if err != nil {
		t.Fatalf("exec %q: %v", command, err)
	}
	return res
}

// ok runs command and fails the test unless it exits 0; it returns stdout.
func ok(t *testing.T, sb *airlock.Sandbox, command string) string {
	t.Helper()
	res := sh(t, sb, command)
	if res.ExitCode != 0 {
		t.Fatalf("%q: exit %d\nstdout: %s\nstderr: %s", command, res.ExitCode, res.Stdout, res.Stderr)
	}
	return string(res.Stdout)
}
