package state

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// smallDisk mounts a tmpfs of size bytes for the test (root only).
func smallDisk(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a small filesystem needs root")
	}
	dir := t.TempDir()
	if err := unix.Mount("airlock-test", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size="+size+",mode=0700"); err != nil {
		t.Fatalf("mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// fill writes to a file in dir until the filesystem is full.
func fill(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill the disk: %v", err)
			}
			return
		}
	}
}

func freeBytes(t *testing.T, dir string) uint64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return st.Bavail * uint64(st.Bsize)
}

// TestFullDisk: with the state directory's filesystem full, nothing that
// reads or removes needs to write, so airlock can always free its own
// space.
func TestFullDisk(t *testing.T) {
	home := smallDisk(t, "512k")
	s, err := Open(home)
	if err != nil {
		t.Fatal(err)
	}
	dead := deadSupervisor(t)
	mustRegister(t, s, Record{ID: "sb-crashed", Supervisor: dead, Kind: KindDetached, Config: []byte(`{"env":{"X":"y"}}`)})
	mustRegister(t, s, Record{ID: "sb-stopped", Status: StatusStopped, CreatedAt: time.Now()})
	mustRegister(t, s, Record{ID: "sb-damaged", Supervisor: dead, Kind: KindRPC})
	if err := os.WriteFile(filepath.Join(home, "sandboxes", "sb-damaged", "state.json"), []byte(`{"id":`), 0o600); err != nil {
		t.Fatal(err)
	}
	mustRegister(t, s, running(t, "sb-live", time.Now()))
	fill(t, home)
	if err := s.Register(Record{ID: "sb-new", Status: StatusStopped}); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Register on a full disk: %v, want ENOSPC (the disk is not full?)", err)
	}

	recs, err := s.List()
	if err != nil {
		t.Fatalf("List on a full disk: %v", err)
	}
	status := map[string]string{}
	for _, r := range recs {
		status[r.ID] = r.Status
	}
	want := map[string]string{"sb-crashed": StatusCrashed, "sb-stopped": StatusStopped, "sb-damaged": StatusCrashed, "sb-live": StatusRunning}
	for id, st := range want {
		if status[id] != st {
			t.Errorf("List on a full disk: %s is %q, want %q", id, status[id], st)
		}
		if _, err := s.Get(id); err != nil {
			t.Errorf("Get(%s) on a full disk: %v", id, err)
		}
	}
	if err := s.Update("sb-live", func(r *Record) { r.Reason = "x" }); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("Update on a full disk: %v, want ENOSPC", err)
	}
	if got, err := s.Get("sb-live"); err != nil || got.Reason != "" || got.Status != StatusRunning {
		t.Errorf("a failed Update changed the record: %+v, %v", got, err)
	}

	before := freeBytes(t, home)
	for _, id := range []string{"sb-crashed", "sb-stopped", "sb-damaged"} {
		if err := s.Remove(id); err != nil {
			t.Errorf("Remove(%s) on a full disk: %v", id, err)
		}
	}
	if err := s.Remove("sb-live"); !errors.Is(err, ErrRunning) {
		t.Errorf("Remove of a running sandbox on a full disk: %v, want ErrRunning", err)
	}
	if after := freeBytes(t, home); after <= before {
		t.Errorf("removing three sandboxes freed nothing: %d bytes free before, %d after", before, after)
	}
	recs, _ = s.List()
	if len(recs) != 1 || recs[0].ID != "sb-live" {
		t.Errorf("List after removing: %+v", recs)
	}
}
