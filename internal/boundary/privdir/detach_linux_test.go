package privdir

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestRemoveDetachesMounts: a mount left beneath a private directory (a
// runsc that mounted in the host's namespace) does not keep Remove from
// removing it.
func TestRemoveDetachesMounts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	t.Setenv("TMPDIR", t.TempDir())
	dir, err := Make("airlock-test-", "sb-mounted")
	if err != nil {
		t.Fatal(err)
	}
	inner := filepath.Join(dir, "state", "m")
	if err := os.MkdirAll(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", inner, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", inner, "tmpfs", 0, "size=1m"); err != nil { // stacked
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err == nil {
		t.Fatal("RemoveAll removed a directory with mounts beneath it: the test proves nothing")
	}
	if err := Remove(dir); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s is still there: %v", dir, err)
	}
}
