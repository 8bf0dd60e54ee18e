//go:build linux

package redteam_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock"
)

// smallDisk mounts a tmpfs of the given size for the test, unmounted
// when it ends.
func smallDisk(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a small filesystem needs root")
	}
	dir := t.TempDir()
	if err := unix.Mount("airlock-full", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size="+size+",mode=0700"); err != nil {
		t.Fatalf("mount a tmpfs: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			unix.Unmount(dir, unix.MNT_DETACH)
		}
	})
	return dir
}

// fillDisk writes to a file in dir until its filesystem is full, and
// returns the file's path.
func fillDisk(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill the disk: %v", err)
			}
			break
		}
	}
	// The last blocks, a page at a time.
	for {
		if _, err := f.Write(buf[:512]); err != nil {
			break
		}
	}
	return path
}

func diskFree(t *testing.T, dir string) uint64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return st.Bavail * uint64(st.Bsize)
}

// TestFaultFullDisk fills the filesystem of the state directory: every
// command that reads or removes still works, so airlock can free its own
// space, and running sandboxes can still be killed and removed.
func TestFaultFullDisk(t *testing.T) {
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		h := newStateHome(t, lv, smallDisk(t, "8m"))
		crashed, crashedToo, stopped := h.detached(), h.detached(), h.detached()
		killed, forced := h.detached(), h.detached()
		h.crash(crashed)
		h.crash(crashedToo)
		h.must("kill", stopped)
		fillDisk(t, h.dir)
		if out := h.run("run", "-d", "--isolation", string(lv), "--", "true"); out.code == 0 {
			t.Fatalf("a sandbox could be created and recorded on a full disk: is it full?\n%s", out.stdout)
		}

		// Reading works and writes nothing.
		m := h.list()
		want := map[string]string{crashed: "crashed", crashedToo: "crashed", stopped: "stopped", killed: "running", forced: "running"}
		for id, st := range want {
			if m[id].Status != st {
				t.Errorf("list on a full disk: %s is %+v, want %s", id, m[id], st)
			}
			if r, _ := h.get(id); r.Status != st {
				t.Errorf("get on a full disk: %s is %+v, want %s", id, r, st)
			}
		}
		if out := h.must("list", "-a"); strings.Contains(out.stderr, "space") {
			t.Errorf("list on a full disk complains: %s", out.stderr)
		}

		// Removing frees space.
		free := diskFree(t, h.dir)
		h.must("rm", stopped)
		h.gone(stopped)
		h.must("rm", "-f", crashedToo)
		h.gone(crashedToo)
		if out := h.must("prune"); !strings.Contains(out.stdout, crashed) {
			t.Errorf("prune on a full disk did not remove %s:\n%s", crashed, out.stdout)
		}
		h.gone(crashed)
		if after := diskFree(t, h.dir); after <= free {
			t.Errorf("removing three sandboxes freed nothing: %d bytes free before, %d after", free, after)
		}

		// Running sandboxes are killed and removed on a full disk too.
		fillDisk(t, h.dir)
		h.must("kill", killed)
		if r, _ := h.get(killed); r.Status == "running" {
			t.Errorf("after kill on a full disk: %+v", r)
		}
		h.must("rm", killed)
		h.gone(killed)
		h.must("rm", "-f", forced)
		h.gone(forced)
		if m := h.list(); len(m) != 0 {
			t.Errorf("left in list: %+v", m)
		}
	})
}
