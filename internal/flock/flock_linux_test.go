package flock_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/flock"
)

// A lock released while a child process holds a copy of its descriptor
// is free at once; closing alone leaves it held until the child ends.
func TestReleaseWhileAChildHoldsTheDescriptor(t *testing.T) {
	p := filepath.Join(t.TempDir(), "lock")
	for _, release := range []struct {
		name     string
		do       func(*os.File) error
		freedNow bool
	}{
		{"close", (*os.File).Close, false},
		{"Release", flock.Release, true},
	} {
		f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_SH); err != nil {
			t.Fatal(err)
		}
		child := exec.Command("sleep", "60")
		child.ExtraFiles = []*os.File{f}
		if err := child.Start(); err != nil {
			t.Skip(err)
		}
		if err := release.do(f); err != nil {
			t.Fatal(err)
		}
		g, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		err = unix.Flock(int(g.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		g.Close()
		child.Process.Kill()
		child.Wait()
		if free := err == nil; free != release.freedNow {
			t.Errorf("after %s, with a child holding the descriptor: lock free %v, want %v (%v)", release.name, free, release.freedNow, err)
		}
	}
}
