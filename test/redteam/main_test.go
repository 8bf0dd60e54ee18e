// Package redteam_test attacks airlock's boundaries as hostile code would,
// from inside real sandboxes, and tries the faults that a supervisor
// meets in the field (a pause, a closed pipe, a full disk, a damaged
// record, a killed agent). Every test runs over every isolation level
// that works on this machine (see eachLevel), so a new boundary inherits
// the whole suite unchanged.
//
// Each attack asserts that the attack failed in the way the defence
// promises (an errno, an event, a refusal), never only that "something"
// failed: a test that cannot fail proves nothing.
package redteam_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testbin"
)

// bins holds the commands this test binary built: the agent every
// sandbox runs, and the CLI for the tests that drive airlock as a user
// does.
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
	built, err := testbin.Build(dir, "airlock-guest", "airlock")
	if err != nil {
		fmt.Fprintln(os.Stderr, "TestMain:", err)
		return 2
	}
	bins.agent, bins.cli = built[0], built[1]
	home := filepath.Join(dir, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		fmt.Fprintln(os.Stderr, "TestMain:", err)
		return 2
	}
	os.Setenv("AIRLOCK_AGENT", bins.agent)
	os.Setenv("AIRLOCK_HOME", home)
	return m.Run()
}
