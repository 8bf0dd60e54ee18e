package egress_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/testbin"
	"github.com/airlock-sandbox/airlock/policy"
)

// envLevel names the isolation level that this run of the suite gives
// its sandboxes; TestOtherLevels sets it for its re-runs.
const envLevel = "AIRLOCK_EGRESS_LEVEL"

// level is the isolation level of this run's sandboxes.
func level() airlock.Isolation {
	if v := os.Getenv(envLevel); v != "" {
		return airlock.Isolation(v)
	}
	return airlock.IsolationProcess
}

// TestOtherLevels runs the whole egress suite again for every other
// isolation level that works here with a network, so that each boundary
// is held to the same egress tests; a level that does not is skipped
// with airlock's reason.
func TestOtherLevels(t *testing.T) {
	if os.Getenv(envLevel) != "" {
		t.Skip("already a re-run for one level")
	}
	// Root, as newEnv asks, but not the test network: each re-run
	// makes its own, on the same addresses.
	if os.Geteuid() != 0 {
		t.Skip("network egress needs root")
	}
	for _, lv := range []airlock.Isolation{airlock.IsolationGVisor, airlock.IsolationVM} {
		t.Run(string(lv), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			sb, err := airlock.Create(ctx, airlock.Config{Isolation: lv, Network: &policy.Config{}})
			if errors.Is(err, airlock.ErrUnavailable) && (lv != airlock.IsolationGVisor || os.Getenv("AIRLOCK_REQUIRE_GVISOR") == "") {
				t.Skip(err)
			}
			if err != nil {
				t.Fatalf("create a %s sandbox with a network: %v", lv, err)
			}
			sb.Close()
			// The vm level's TCG guests, beside the other packages'
			// tests on a 2-core machine, take close to 20 minutes.
			testbin.Rerun(t, testbin.RerunOptions{Pattern: "^Test", Timeout: 35 * time.Minute, Env: []string{envLevel + "=" + string(lv)}})
		})
	}
}

// patience is how many times longer than at the process level this
// run's commands may take: a vm sandbox's CPU is emulated here, and
// several of them at once, beside the other packages' tests, run many
// times slower.
func patience() time.Duration {
	if level() == airlock.IsolationVM {
		return 3
	}
	return 1
}
