package egress_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/testnet"
)

// TestCurlHTTPS is the shortest allowed flow, and what NetworkStats says
// after it: one leaf minted for the one name, and its addresses pinned.
func TestCurlHTTPS(t *testing.T) {
	e := newEnv(t)
	sb := e.sandbox(t, e.network(testnet.API))
	for range 3 {
		out := ok(t, sb, "curl -sS --max-time 10 https://api.example.com/echo")
		if !strings.Contains(out, `"host"`) {
			t.Fatalf("unexpected answer: %s", out)
		}
	}
	st, err := sb.NetworkStats()
	if err != nil {
		t.Fatal(err)
	}
	if st.LeavesMinted != 1 || st.Pins < 1 {
		t.Errorf("stats after three connections to one name: %+v", st)
	}
}

// TestNetworkStatsWithoutNetwork: a sandbox without a network has no
// counters, and says why.
func TestNetworkStatsWithoutNetwork(t *testing.T) {
	e := newEnv(t)
	sb := e.sandbox(t, nil)
	if _, err := sb.NetworkStats(); !errors.Is(err, airlock.ErrNoNetwork) {
		t.Errorf("NetworkStats without a network: %v", err)
	}
}
