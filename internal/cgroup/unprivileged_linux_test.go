//go:build linux

package cgroup

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const (
	testUser    = "airlock-cgtest"
	envUnpriv   = "AIRLOCK_CGTEST_UNPRIVILEGED"
	childTestRe = "^TestDetectUnprivilegedChild$"
)

// TestDetectUnprivileged re-runs this test binary as an unprivileged user,
// where TestDetectUnprivilegedChild does the checking.
func TestDetectUnprivileged(t *testing.T) {
	requireRoot(t)
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("setpriv not installed")
	}
	u, err := user.Lookup(testUser)
	if err != nil {
		out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", testUser).CombinedOutput()
		if err != nil {
			t.Fatalf("useradd %s: %v: %s", testUser, err, out)
		}
		if u, err = user.Lookup(testUser); err != nil {
			t.Fatal(err)
		}
	}

	// The go test build directory is private to root: copy the binary
	// somewhere the user can execute it.
	dir, err := os.MkdirTemp("", "airlock-cgtest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "cgroup.test")
	copyExecutable(t, bin)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, setpriv, "--reuid="+u.Uid, "--regid="+u.Gid, "--clear-groups",
		bin, "-test.run="+childTestRe, "-test.v", "-test.count=1")
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), envUnpriv + "=1"}
	out, err := cmd.CombinedOutput()
	t.Logf("unprivileged run:\n%s", out)
	if err != nil {
		t.Fatalf("unprivileged run failed: %v", err)
	}
	if !strings.Contains(string(out), "--- PASS: TestDetectUnprivilegedChild") {
		t.Fatal("the unprivileged check did not run")
	}
}

// TestDetectUnprivilegedChild runs only when re-executed by
// TestDetectUnprivileged.
func TestDetectUnprivilegedChild(t *testing.T) {
	if os.Getenv(envUnpriv) != "1" {
		t.Skip("run by TestDetectUnprivileged as an unprivileged user")
	}
	if os.Geteuid() == 0 {
		t.Fatal("running as root")
	}
	info := Detect()
	t.Logf("Detect() = %+v", info)
	if info.Writable {
		t.Errorf("Writable = true for uid %d", os.Geteuid())
	}
	if info.Reason == "" {
		t.Error("no reason given")
	}
	if _, err := New(context.Background(), "unprivileged", Limits{}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("New = %v, want ErrUnavailable", err)
	}
	if _, err := Sweep(time.Hour); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Sweep = %v, want ErrUnavailable", err)
	}
}

func copyExecutable(t *testing.T, dst string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
