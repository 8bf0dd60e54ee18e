package privdir

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

// TestSweep removes the private directory of a sandbox whose supervisor
// is gone, and leaves one whose supervisor lives and one still being
// made; Reclaim removes a live one's.
func TestSweep(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	const prefix = "airlock-test-"
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	gone, err := Make(prefix, "sb-gone")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(gone, ownerFile), fmt.Appendf(nil, "%d 1\n", dead.Process.Pid), 0o600); err != nil {
		t.Fatal(err)
	}
	live, err := Make(prefix, "sb-live")
	if err != nil {
		t.Fatal(err)
	}
	making, err := os.MkdirTemp("", prefix+"sb-making-")
	if err != nil {
		t.Fatal(err)
	}
	other, err := Make("airlock-other-", "sb-other")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(other, ownerFile), fmt.Appendf(nil, "%d 1\n", dead.Process.Pid), 0o600); err != nil {
		t.Fatal(err)
	}
	if ids := Sweep(prefix); !slices.Equal(ids, []string{"sb-gone"}) {
		t.Errorf("Sweep cleaned %v, want [sb-gone]", ids)
	}
	for d, want := range map[string]bool{gone: false, live: true, making: true, other: true} {
		if _, err := os.Stat(d); (err == nil) != want {
			t.Errorf("%s exists: %v, want %v", d, err == nil, want)
		}
	}
	if err := Reclaim(prefix, "sb-live"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(live); err == nil {
		t.Error("Reclaim left the directory of sb-live")
	}
}

// TestSweepWhileMade: a sweep that runs while directories are being made
// (another airlock process's, at any moment) never takes one of a live
// supervisor, whatever it reads of its owner record.
func TestSweepWhileMade(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	const prefix = "airlock-race-"
	stop := make(chan struct{})
	swept := make(chan []string)
	go func() {
		var all []string
		for {
			select {
			case <-stop:
				swept <- all
				return
			default:
				all = append(all, Sweep(prefix)...)
			}
		}
	}()
	var made []string
	for i := range 300 {
		d, err := Make(prefix, fmt.Sprintf("sb-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		made = append(made, d)
	}
	close(stop)
	if ids := <-swept; len(ids) > 0 {
		t.Errorf("a sweep took directories of this live process: %v", ids)
	}
	for _, d := range made {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s: %v", d, err)
		}
	}
}
