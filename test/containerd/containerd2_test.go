//go:build linux

package containerd_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testbin"
)

// TestContainerd2 runs the main tests again under containerd 2.x (the
// binary $AIRLOCK_TEST_CONTAINERD2 names, which make test builds from the
// Go module proxy), with Debian's ctr: standalone containers at every
// level, a task's life, pods, the CRI path and a restart. The shim is the
// same binary, built on containerd 1.7's shim library, and serves task
// API v2 to both.
func TestContainerd2(t *testing.T) {
	if os.Getenv(testbin.ContainerdEnv) != "" {
		t.Skip("already a run under another containerd")
	}
	bin := os.Getenv("AIRLOCK_TEST_CONTAINERD2")
	if bin == "" {
		t.Skip("no containerd 2.x: make test builds one (make containerd2) and sets AIRLOCK_TEST_CONTAINERD2")
	}
	if os.Geteuid() != 0 {
		t.Skip("containerd runs as root")
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), " 2.") {
		t.Fatalf("%s --version: %v: %s, want containerd 2.x", bin, err, out)
	}
	t.Logf("%s", strings.TrimSpace(string(out)))
	testbin.Rerun(t, testbin.RerunOptions{
		Pattern: "^(TestRun|TestTaskLifecycle|TestPod|TestCRI|TestContainerdRestarted)$",
		Timeout: 15 * time.Minute,
		Env:     []string{testbin.ContainerdEnv + "=" + bin, binsEnv + "=" + bins.dir},
	})
}
