package vm

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestPruneSnapshots keeps the snapshots used last and those used within
// the hour, whatever their number, and one being restored; it removes
// the others, with their locks, and what old unfinished saves left.
func TestPruneSnapshots(t *testing.T) {
	root := t.TempDir()
	now := time.Now()
	mk := func(key string, used time.Duration) {
		t.Helper()
		dir := filepath.Join(root, key)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{snapState, snapInitrd, "../" + key + ".lock"} {
			if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		at := now.Add(-used)
		if err := os.Chtimes(filepath.Join(dir, snapState), at, at); err != nil {
			t.Fatal(err)
		}
	}
	// Nine used within the hour: more than the cache keeps, all kept.
	var recent []string
	for i := range 9 {
		key := "recent" + string(rune('a'+i))
		mk(key, time.Duration(i+1)*time.Minute)
		recent = append(recent, key)
	}
	mk("old1", 2*time.Hour)
	mk("old2", 3*time.Hour)
	mk("restoring", 4*time.Hour)
	// Locks of saves that never finished: an old one goes, a new one
	// (a save under way) stays.
	for name, age := range map[string]time.Duration{"failed.lock": 2 * time.Hour, "saving.lock": time.Minute} {
		p := filepath.Join(root, name)
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		at := now.Add(-age)
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
	}
	for name, age := range map[string]time.Duration{"k.part-old": 2 * time.Hour, "k.part-new": time.Minute} {
		p := filepath.Join(root, name)
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		at := now.Add(-age)
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
	}
	// A restore holds this one (and marks it used: put its time back).
	f, err := openSnapshot(filepath.Join(root, "restoring"))
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := f.Stat(); err != nil || now.Sub(fi.ModTime()) > time.Minute {
		t.Errorf("openSnapshot did not mark the snapshot used: %v, %v", fi.ModTime(), err)
	}
	old := now.Add(-4 * time.Hour)
	if err := os.Chtimes(f.Name(), old, old); err != nil {
		t.Fatal(err)
	}

	removed, err := pruneSnapshots(root, now)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	if want := []string{"old1", "old2"}; !slices.Equal(removed, want) {
		t.Errorf("removed %v, want %v", removed, want)
	}
	ents, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range ents {
		left = append(left, e.Name())
	}
	want := []string{"k.part-new", "restoring", "restoring.lock", "saving.lock"}
	for _, k := range recent {
		want = append(want, k, k+".lock")
	}
	slices.Sort(want)
	if !slices.Equal(left, want) {
		t.Errorf("left %v, want %v", left, want)
	}

	// Once the restore is over, it goes too, and a restore that comes
	// after the removal finds nothing to restore.
	f.Close()
	if removed, err := pruneSnapshots(root, now); err != nil || !slices.Equal(removed, []string{"restoring"}) {
		t.Errorf("after the restore: removed %v (%v), want [restoring]", removed, err)
	}
	if f, err := openSnapshot(filepath.Join(root, "restoring")); err == nil {
		f.Close()
		t.Error("a removed snapshot opened")
	}
}

// TestOpenSnapshotRemovedWhileWaiting: a snapshot removed while a restore
// waited for its lock is not restored.
func TestOpenSnapshotRemovedWhileWaiting(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "k")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, snapState), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(filepath.Join(dir, snapState), old, old); err != nil {
		t.Fatal(err)
	}
	// Held as removeSnapshot holds it while it removes.
	holder, err := os.Open(filepath.Join(dir, snapState))
	if err != nil {
		t.Fatal(err)
	}
	if err := lockEx(holder); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		f, err := openSnapshot(dir)
		if err == nil {
			f.Close()
		}
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	holder.Close()
	if err := <-done; err == nil {
		t.Error("a snapshot removed while the restore waited was opened")
	}
}

func lockEx(f *os.File) error { return unix.Flock(int(f.Fd()), unix.LOCK_EX) }
