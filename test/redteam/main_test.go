// Package redteam_test attacks airlock's boundaries as hostile code would,
// from inside real sandboxes, and tries the faults that a supervisor
// meets in the field (a pause, a closed pipe, a full disk, a damaged
// record, a killed agent). Every test runs over every isolation level
// that works on this machine (see eachLevel), so a new boundary inherits
// the whole suite unchanged; as root, the attacks run once more as an
// unprivileged caller (TestUnprivileged).
//
// Each attack asserts that the attack failed in the way the defence
// promises (an errno, an event, a refusal), never only that "something"
// failed: a test that cannot fail proves nothing.
package redteam_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testbin"
)

// envChild marks the unprivileged re-run of this binary; AIRLOCK_AGENT
// and envCLI then name the binaries the parent built.
const (
	envChild = "AIRLOCK_REDTEAM_CHILD"
	envCLI   = "AIRLOCK_REDTEAM_CLI"
)

// bins holds the commands the tests run: the agent every sandbox runs,
// and the CLI for the tests that drive airlock as a user does.
var bins struct {
	agent, cli string
}

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	dir, err := testbin.Dir("airlock-redteam-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "TestMain:", err)
		return 2
	}
	defer os.RemoveAll(dir)
	if os.Getenv(envChild) != "" {
		bins.agent, bins.cli = os.Getenv("AIRLOCK_AGENT"), os.Getenv(envCLI)
	} else {
		built, err := testbin.Build(dir, "airlock-guest", "airlock")
		if err != nil {
			fmt.Fprintln(os.Stderr, "TestMain:", err)
			return 2
		}
		bins.agent, bins.cli = built[0], built[1]
	}
	home, err := os.MkdirTemp(dir, "home-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "TestMain:", err)
		return 2
	}
	os.Setenv("AIRLOCK_AGENT", bins.agent)
	os.Setenv("AIRLOCK_HOME", home)
	return m.Run()
}

// TestUnprivileged runs every attack again as an unprivileged user, for
// whom airlock builds the boundary without root's help.
func TestUnprivileged(t *testing.T) {
	if os.Getenv(envChild) != "" {
		t.Skip("already the unprivileged run")
	}
	t.Parallel()
	res := testbin.RerunUnprivileged(t, "^TestAttack", 5*time.Minute,
		envChild+"=1", "AIRLOCK_AGENT="+bins.agent, envCLI+"="+bins.cli)
	if r, ok := res["TestAttackKernelSurface"]; !ok || r.Status != "PASS" {
		t.Errorf("the unprivileged run did not pass TestAttackKernelSurface: %+v", r)
	}
}
