package state

import (
	"bytes"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// damages are the ways a state.json is found damaged: each replaces the
// file at path (whose valid content is good).
var damages = []struct {
	name   string
	damage func(t *testing.T, path string, good []byte)
}{
	{"missing", func(t *testing.T, path string, _ []byte) { must(t, os.Remove(path)) }},
	{"empty", func(t *testing.T, path string, _ []byte) { must(t, os.WriteFile(path, nil, 0o600)) }},
	{"truncated-1", truncated(1)},
	{"truncated-third", truncated(3)},
	{"truncated-half", truncated(2)},
	{"truncated-last", func(t *testing.T, path string, good []byte) {
		must(t, os.WriteFile(path, good[:len(good)-3], 0o600))
	}},
	{"garbage", func(t *testing.T, path string, _ []byte) {
		must(t, os.WriteFile(path, []byte("\x00\xff\x1b[2J\x89PNG\r\n garbage"), 0o600))
	}},
	{"spaces", func(t *testing.T, path string, _ []byte) { must(t, os.WriteFile(path, []byte(" \n\t "), 0o600)) }},
	{"null", func(t *testing.T, path string, _ []byte) { must(t, os.WriteFile(path, []byte("null"), 0o600)) }},
	{"array", func(t *testing.T, path string, _ []byte) { must(t, os.WriteFile(path, []byte(`[1,2]`), 0o600)) }},
	{"wrong-types", func(t *testing.T, path string, good []byte) {
		b := bytes.Replace(good, []byte(`"status":"running"`), []byte(`"status":7`), 1)
		must(t, os.WriteFile(path, b, 0o600))
	}},
	{"id-number", func(t *testing.T, path string, _ []byte) {
		must(t, os.WriteFile(path, []byte(`{"id":5,"status":"running"}`), 0o600))
	}},
	{"unknown-status", func(t *testing.T, path string, good []byte) {
		b := bytes.Replace(good, []byte(`"status":"running"`), []byte(`"status":"dancing"`), 1)
		must(t, os.WriteFile(path, b, 0o600))
	}},
	{"no-pid", func(t *testing.T, path string, good []byte) {
		b := bytes.Replace(good, []byte(`"supervisor":{"pid":`), []byte(`"supervisor":{"was":`), 1)
		must(t, os.WriteFile(path, b, 0o600))
	}},
	{"other-id", func(t *testing.T, path string, good []byte) {
		must(t, os.WriteFile(path, bytes.Replace(good, []byte(`"id":"sb-`), []byte(`"id":"xx-`), 1), 0o600))
	}},
	{"huge", func(t *testing.T, path string, good []byte) {
		f, err := os.Create(path)
		must(t, err)
		must(t, f.Truncate(1<<40)) // sparse: reading it whole would never end
		f.Close()
	}},
	{"symlink-to-record", func(t *testing.T, path string, good []byte) {
		other := filepath.Join(t.TempDir(), "state.json")
		must(t, os.WriteFile(other, good, 0o600))
		must(t, os.Remove(path))
		must(t, os.Symlink(other, path))
	}},
	{"symlink-to-zero", func(t *testing.T, path string, _ []byte) {
		must(t, os.Remove(path))
		must(t, os.Symlink("/dev/zero", path))
	}},
	{"dangling-symlink", func(t *testing.T, path string, _ []byte) {
		must(t, os.Remove(path))
		must(t, os.Symlink("nowhere", path))
	}},
	{"directory", func(t *testing.T, path string, _ []byte) {
		must(t, os.Remove(path))
		must(t, os.Mkdir(path, 0o700))
		must(t, os.WriteFile(filepath.Join(path, "x"), []byte("x"), 0o600))
	}},
	{"fifo", func(t *testing.T, path string, _ []byte) {
		must(t, os.Remove(path))
		must(t, syscall.Mkfifo(path, 0o600))
	}},
}

func truncated(frac int) func(t *testing.T, path string, good []byte) {
	return func(t *testing.T, path string, good []byte) {
		n := len(good) / frac
		if frac == 1 {
			n = 1
		}
		must(t, os.WriteFile(path, good[:n], 0o600))
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// deadSupervisor is a process that existed and is gone.
func deadSupervisor(t *testing.T) Supervisor {
	t.Helper()
	cmd := exec.Command("true")
	must(t, cmd.Start())
	pid := cmd.Process.Pid
	start, _ := ProcessStartTime(pid)
	cmd.Wait()
	return Supervisor{PID: pid, StartTime: start}
}

// serveSocket makes this process the server of sandbox id's control
// socket until the test ends.
func serveSocket(t *testing.T, s *Store, id string) {
	t.Helper()
	ln, err := net.Listen("unix", s.SocketPath(id))
	must(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
}

// TestDamagedRecords damages the state.json of live and dead sandboxes
// in every way: reading must not block or grow, must say which file is
// damaged and what to do, must tell a live sandbox from a dead one, and
// the sandbox must stay removable (once dead) and repairable.
func TestDamagedRecords(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("liveness without the record uses Linux start times and socket credentials")
	}
	sups := []struct {
		name string
		// setup registers sandbox id and returns its expected status.
		setup func(t *testing.T, s *Store, id string) string
		// noInfo damages supervisor.json as well.
		noInfo bool
	}{
		{"live-detached", func(t *testing.T, s *Store, id string) string {
			mustRegister(t, s, Record{ID: id, Supervisor: self(t), Kind: KindDetached, Command: []string{"sleep", "1"}})
			return StatusRunning
		}, false},
		{"live-rpc", func(t *testing.T, s *Store, id string) string {
			mustRegister(t, s, Record{ID: id, Supervisor: self(t), Kind: KindRPC})
			serveSocket(t, s, id)
			return StatusRunning
		}, false},
		{"rpc-closed", func(t *testing.T, s *Store, id string) string {
			// Its server lives on, but closed it (and removed the socket).
			mustRegister(t, s, Record{ID: id, Supervisor: self(t), Kind: KindRPC})
			return StatusStopped
		}, false},
		{"socket-only", func(t *testing.T, s *Store, id string) string {
			mustRegister(t, s, Record{ID: id, Supervisor: self(t), Kind: KindRPC})
			serveSocket(t, s, id)
			return StatusRunning
		}, true},
		{"dead", func(t *testing.T, s *Store, id string) string {
			mustRegister(t, s, Record{ID: id, Supervisor: deadSupervisor(t), Kind: KindDetached})
			return StatusCrashed
		}, false},
		{"dead-stale-socket", func(t *testing.T, s *Store, id string) string {
			mustRegister(t, s, Record{ID: id, Supervisor: deadSupervisor(t), Kind: KindRPC})
			ln, err := net.Listen("unix", s.SocketPath(id))
			must(t, err)
			ln.(*net.UnixListener).SetUnlinkOnClose(false)
			ln.Close() // the file stays, no one serves it
			return StatusCrashed
		}, true},
	}
	for _, sup := range sups {
		for _, d := range damages {
			t.Run(sup.name+"/"+d.name, func(t *testing.T) {
				s, dir := newStore(t)
				const id = "sb-damaged"
				want := sup.setup(t, s, id)
				path := filepath.Join(dir, id, "state.json")
				good, err := os.ReadFile(path)
				must(t, err)
				d.damage(t, path, good)
				if sup.noInfo {
					must(t, os.WriteFile(filepath.Join(dir, id, "supervisor.json"), []byte("{trunc"), 0o600))
				}

				done := make(chan struct{})
				var got Record
				go func() {
					defer close(done)
					got, err = s.Get(id)
				}()
				select {
				case <-done:
				case <-time.After(30 * time.Second):
					t.Fatal("Get blocked on a damaged record")
				}
				if err != nil {
					t.Fatalf("Get: %v", err)
				}
				if got.ID != id || got.Status != want || !strings.Contains(got.Damaged, path) || !strings.Contains(got.Damaged, "airlock rm") {
					t.Fatalf("Get = %+v; want status %s, damaged naming %s and how to remove it", got, want, path)
				}
				if want == StatusRunning && got.Supervisor.PID != os.Getpid() {
					t.Errorf("Get found supervisor %+v, want this process", got.Supervisor)
				}
				if got.CreatedAt.IsZero() {
					t.Errorf("Get: no creation time")
				}
				recs, err := s.List()
				if err != nil || len(recs) != 1 || recs[0].Status != want || recs[0].Damaged != got.Damaged {
					t.Fatalf("List = %+v, %v; want what Get says", recs, err)
				}
				if err := s.Update(id, func(r *Record) { r.Reason = "x" }); !errors.Is(err, ErrDamaged) {
					t.Errorf("Update of a damaged record: %v, want ErrDamaged", err)
				}

				if want == StatusRunning {
					if err := s.Remove(id); !errors.Is(err, ErrRunning) {
						t.Fatalf("Remove of a running sandbox with a damaged record: %v, want ErrRunning", err)
					}
					// Its supervisor knows the whole record.
					repaired := Record{ID: id, Status: StatusStopped, Reason: "killed", Supervisor: self(t), Kind: KindDetached}
					if err := s.Replace(repaired); err != nil {
						t.Fatalf("Replace: %v", err)
					}
					if got, err := s.Get(id); err != nil || got.Damaged != "" || got.Status != StatusStopped || got.Reason != "killed" {
						t.Fatalf("Get after Replace = %+v, %v", got, err)
					}
				}
				if err := s.Remove(id); err != nil {
					t.Fatalf("Remove: %v", err)
				}
				if _, err := os.Lstat(filepath.Join(dir, id)); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("the folder is still there: %v", err)
				}
				if entries, _ := os.ReadDir(dir); len(entries) != 0 {
					t.Errorf("left in the state directory: %v", entries)
				}
			})
		}
	}
}

// TestDamagedLockFile: a lock file that cannot be used keeps neither
// reading nor removing from working.
func TestDamagedLockFile(t *testing.T) {
	for name, damage := range map[string]func(path string) error{
		"missing":   os.Remove,
		"directory": func(p string) error { os.Remove(p); return os.Mkdir(p, 0o700) },
		"symlink":   func(p string) error { os.Remove(p); return os.Symlink("/dev/null", p) },
		"fifo":      func(p string) error { os.Remove(p); return syscall.Mkfifo(p, 0o600) },
	} {
		t.Run(name, func(t *testing.T) {
			s, dir := newStore(t)
			mustRegister(t, s, Record{ID: "sb-lock", Status: StatusStopped})
			must(t, damage(filepath.Join(dir, "sb-lock", "lock")))
			if got, err := s.Get("sb-lock"); err != nil || got.Status != StatusStopped {
				t.Fatalf("Get: %+v, %v", got, err)
			}
			if err := s.Remove("sb-lock"); err != nil {
				t.Fatalf("Remove: %v", err)
			}
			if _, err := os.Lstat(filepath.Join(dir, "sb-lock")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the folder is still there: %v", err)
			}
		})
	}
}

// TestRecordWritesAreAtomic checks what a crash between writes could
// leave: a stale temporary file (even one replaced by a directory or a
// link) is not a problem for the next write, and state.json is only ever
// replaced by rename, never rewritten in place (its inode changes).
func TestRecordWritesAreAtomic(t *testing.T) {
	s, dir := newStore(t)
	mustRegister(t, s, running(t, "sb-atomic", time.Now()))
	folder := filepath.Join(dir, "sb-atomic")
	for _, stale := range []func(string) error{
		func(p string) error { return os.WriteFile(p, []byte("{half"), 0o644) },
		func(p string) error { return os.Mkdir(p, 0o700) },
		func(p string) error { return os.Symlink(filepath.Join(folder, "state.json"), p) },
	} {
		before, err := os.Stat(filepath.Join(folder, "state.json"))
		must(t, err)
		must(t, stale(filepath.Join(folder, ".state.json.tmp")))
		if err := s.Update("sb-atomic", func(r *Record) { r.Reason = "again" }); err != nil {
			t.Fatalf("Update over a stale temporary file: %v", err)
		}
		after, err := os.Stat(filepath.Join(folder, "state.json"))
		must(t, err)
		if os.SameFile(before, after) {
			t.Error("state.json was rewritten in place")
		}
		if after.Mode().Perm() != 0o600 {
			t.Errorf("state.json mode %v", after.Mode())
		}
		if _, err := os.Lstat(filepath.Join(folder, ".state.json.tmp")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a temporary file is left: %v", err)
		}
		if rec := onDisk(t, dir, "sb-atomic"); rec.Reason != "again" {
			t.Errorf("state.json: %+v", rec)
		}
	}
}
