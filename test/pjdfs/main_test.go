// Package pjdfs_test runs pjdfstest, a POSIX file system conformance
// suite (owners, modes, set-id bits, links, renames, times, name and
// path limits), inside a sandbox, at once on the sandbox's own writable
// root, in a programmable mount of each built-in provider (memory,
// real_fs, overlay) and in a direct mount, and on a tmpfs of the host
// for reference, and checks that each place in the sandbox agrees with
// the host but for a known list of differences of its own, each with
// its reason (see knownFailuresDir and the README's section on it).
//
// The suite is built from its source at test time (autoreconf,
// configure, make), into a cache directory keyed by the source's
// content, so that later runs reuse it. Its source is looked for in
// $AIRLOCK_PJDFSTEST_SRC, or in shared/testsuites/pjdfstest beside the
// module or any directory above it.
package pjdfs_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testbin"
)

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	dir, err := testbin.Dir("airlock-pjdfs-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "TestMain:", err)
		return 2
	}
	defer os.RemoveAll(dir)
	built, err := testbin.Build(dir, "airlock-guest")
	if err != nil {
		fmt.Fprintln(os.Stderr, "TestMain:", err)
		return 2
	}
	home, err := os.MkdirTemp(dir, "home-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "TestMain:", err)
		return 2
	}
	os.Setenv("AIRLOCK_AGENT", built[0])
	os.Setenv("AIRLOCK_HOME", home)
	return m.Run()
}
