package vm

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

// TestSweep removes the private directory of a VM whose supervisor is
// gone, and leaves one whose supervisor lives and one still being made.
func TestSweep(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	mk := func(id string) string {
		d, err := os.MkdirTemp("", privatePrefix+id+"-")
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	gone, live, making := mk("sb-gone"), mk("sb-live"), mk("sb-making")
	if err := os.WriteFile(filepath.Join(gone, ownerFile), fmt.Appendf(nil, "%d 1\n", dead.Process.Pid), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := writeOwner(live); err != nil {
		t.Fatal(err)
	}
	ids := Sweep()
	if !slices.Equal(ids, []string{"sb-gone"}) {
		t.Errorf("Sweep cleaned %v, want [sb-gone]", ids)
	}
	for d, want := range map[string]bool{gone: false, live: true, making: true} {
		if _, err := os.Stat(d); (err == nil) != want {
			t.Errorf("%s exists: %v, want %v", d, err == nil, want)
		}
	}
	if err := Reclaim("sb-live"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(live); err == nil {
		t.Error("Reclaim left the directory of sb-live")
	}
}
