//go:build linux

// Package containerd_test runs airlock's containerd shim under a real
// containerd (Debian's), started by the tests on a private socket, root
// and state directory, with an image the tests build and import.
package containerd_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testbin"
	"github.com/airlock-sandbox/airlock/internal/testnet"
)

// bins are what the tests built: the shim, in a directory of its own
// that goes first on containerd's PATH, and the agent its sandboxes run.
var bins struct {
	dir, shim, agent string
}

// TestMain runs the tests in a network namespace of their own, with
// testnet's stand-in internet in it, for the pods' egress.
func TestMain(m *testing.M) { os.Exit(testnet.MainFunc(func() int { return testMain(m) })) }

// binsEnv names, in a re-run of the tests (TestContainerd2), the folder
// of the binaries the first run built.
const binsEnv = "AIRLOCK_CONTAINERD_TEST_BINS"

func testMain(m *testing.M) int {
	dir := os.Getenv(binsEnv)
	if dir != "" {
		bins.dir = dir
		bins.shim, bins.agent = filepath.Join(dir, "containerd-shim-airlock-v2"), filepath.Join(dir, "airlock-guest")
	} else {
		var err error
		if dir, err = testbin.Dir("airlock-containerd-"); err != nil {
			fmt.Fprintln(os.Stderr, "TestMain:", err)
			return 2
		}
		defer os.RemoveAll(dir)
		built, err := testbin.Build(dir, "containerd-shim-airlock-v2", "airlock-guest")
		if err != nil {
			fmt.Fprintln(os.Stderr, "TestMain:", err)
			return 2
		}
		bins.dir, bins.shim, bins.agent = dir, built[0], built[1]
	}
	// For the tests' own sandboxes, which find out which levels work.
	home, err := os.MkdirTemp(dir, "home-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "TestMain:", err)
		return 2
	}
	os.Setenv("AIRLOCK_AGENT", bins.agent)
	os.Setenv("AIRLOCK_HOME", home)
	return m.Run()
}
