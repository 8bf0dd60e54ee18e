package airlock_test

import (
	"os"
	"os/user"
	"strconv"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/subid"
	"github.com/airlock-sandbox/airlock/internal/testbin"
)

// unprivTests selects the tests the unprivileged run repeats: all of them
// but this one. The attacks on the boundary are re-run unprivileged by
// their own package, test/redteam.
const unprivTests = "^Test(Exec|Files|Limits|Teardown|Supervisor|RootFS|IDs|VFS)"

// TestUnprivilegedSuite runs this package's tests again as an unprivileged
// user, where cgroups are unavailable and every limit that needs them must
// be reported in Notes instead. Each of the child's tests is reported as a
// subtest here.
func TestUnprivilegedSuite(t *testing.T) {
	if os.Getenv(envUnprivChild) != "" {
		t.Skip("already the unprivileged run")
	}
	t.Parallel()
	// The agent built by TestMain sits in a world-readable directory.
	if fi, err := os.Stat(agentPath); err != nil || fi.Mode().Perm()&0o005 != 0o005 {
		t.Fatalf("agent %s is not executable by others: %v", agentPath, err)
	}
	// Most distributions let every user open /dev/fuse (0666), which
	// unprivileged programmable mounts need; where this machine does
	// not, it does for the run.
	if fi, err := os.Stat("/dev/fuse"); err == nil && os.Getuid() == 0 && fi.Mode().Perm() != 0o666 {
		if err := os.Chmod("/dev/fuse", 0o666); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod("/dev/fuse", fi.Mode().Perm()) })
	}
	results := testbin.RerunUnprivileged(t, unprivTests, 4*time.Minute, envUnprivChild+"=1", "AIRLOCK_AGENT="+agentPath)
	// It really ran unprivileged and degraded explicitly.
	for _, name := range []string{"TestLimitsMemoryOOM", "TestLimitsForkBomb", "TestExecTTY", "TestFilesRoundTrip", "TestVFSCloseWhileFileAPIWaitsOnMount"} {
		if _, ok := results[name]; !ok {
			t.Errorf("the unprivileged run did not run %s", name)
		}
	}
	// With subordinate ids (useradd gives them on Debian), pulled
	// images keep their owners without root too.
	if u, err := user.Lookup(testbin.UnprivilegedUser); err == nil {
		uid, _ := strconv.Atoi(u.Uid)
		if _, err := subid.LookupWith(uid, u.Username, subid.SubUIDFile, subid.SubGIDFile, subid.FindHelper); err == nil {
			if r := results["TestIDsPulledImageOwners"]; r.Status != "PASS" {
				t.Errorf("TestIDsPulledImageOwners as %s, who has subordinate ids: %s", testbin.UnprivilegedUser, r.Status)
			}
		}
	}
	if _, err := os.Stat("/dev/fuse"); err == nil {
		for _, name := range []string{"TestVFSMemoryMount", "TestVFSCloseWhileFileAPIWaitsOnMount", "TestVFSServerHidden"} {
			if r := results[name]; r.Status != "PASS" {
				t.Errorf("%s as %s: %s, want PASS (programmable mounts without root)", name, testbin.UnprivilegedUser, r.Status)
			}
		}
	}
	if r := results["TestLimitsMemoryOOM"]; r.Status != "SKIP" {
		t.Errorf("TestLimitsMemoryOOM as %s: %s, want SKIP (memory limit not enforced, and Notes says so)", testbin.UnprivilegedUser, r.Status)
	}
}
