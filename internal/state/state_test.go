package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func newStore(t *testing.T) (*Store, string) {
	t.Helper()
	home := t.TempDir()
	s, err := Open(home)
	if err != nil {
		t.Fatal(err)
	}
	return s, filepath.Join(home, "sandboxes")
}

// self is a live supervisor: this test process.
func self(t *testing.T) Supervisor {
	t.Helper()
	start, err := ProcessStartTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	return Supervisor{PID: os.Getpid(), StartTime: start}
}

func running(t *testing.T, id string, created time.Time) Record {
	return Record{ID: id, Status: StatusRunning, CreatedAt: created, Supervisor: self(t), Kind: KindDetached}
}

func mustRegister(t *testing.T, s *Store, rec Record) {
	t.Helper()
	if err := s.Register(rec); err != nil {
		t.Fatal(err)
	}
}

func ids(recs []Record) []string {
	var out []string
	for _, r := range recs {
		out = append(out, r.ID)
	}
	return out
}

// onDisk reads state.json directly.
func onDisk(t *testing.T, dir, id string) Record {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, id, "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rec Record
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatalf("state.json of %s: %v\n%s", id, err, b)
	}
	return rec
}

func TestRegisterGetUpdateList(t *testing.T) {
	s, _ := newStore(t)
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

	first := running(t, "sb-first", t0)
	first.Isolation = "process"
	first.Image = "host"
	first.Command = []string{"python3", "-c", "print(1)"}
	first.Config = json.RawMessage(`{"isolation":"process","resources":{"memory_mb":256}}`)
	mustRegister(t, s, first)
	mustRegister(t, s, running(t, "sb-third", t0.Add(2*time.Minute)))
	mustRegister(t, s, running(t, "sb-second", t0.Add(time.Minute)))

	got, err := s.Get("sb-first")
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != StatusRunning || !got.CreatedAt.Equal(t0) || !slices.Equal(got.Command, first.Command) ||
		got.Isolation != "process" || got.Image != "host" || got.Kind != KindDetached ||
		got.Supervisor != first.Supervisor || string(got.Config) != string(first.Config) || got.ExitCode != nil {
		t.Errorf("Get = %+v, want %+v", got, first)
	}

	if err := s.Register(running(t, "sb-first", t0)); !errors.Is(err, ErrExists) {
		t.Errorf("Register of an existing id: %v, want ErrExists", err)
	}

	stoppedAt := t0.Add(time.Hour)
	err = s.Update("sb-first", func(r *Record) {
		r.Status = StatusStopped
		r.StoppedAt = stoppedAt
		r.ExitCode = new(3)
		r.Reason = "exited"
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err = s.Get("sb-first")
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != StatusStopped || got.ExitCode == nil || *got.ExitCode != 3 || got.Reason != "exited" ||
		!got.StoppedAt.Equal(stoppedAt) || !slices.Equal(got.Command, first.Command) {
		t.Errorf("after Update, Get = %+v", got)
	}

	recs, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"sb-third", "sb-second", "sb-first"}; !slices.Equal(ids(recs), want) {
		t.Errorf("List = %v, want newest first %v", ids(recs), want)
	}
	if recs[2].Status != StatusStopped || recs[0].Status != StatusRunning {
		t.Errorf("List statuses: %+v", recs)
	}

	if _, err := s.Get("sb-none"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get of a missing id: %v, want ErrNotFound", err)
	}
	if err := s.Update("sb-none", func(*Record) {}); !errors.Is(err, ErrNotFound) {
		t.Errorf("Update of a missing id: %v, want ErrNotFound", err)
	}
}

func TestRegisterDefaultsAndValidation(t *testing.T) {
	s, _ := newStore(t)
	before := time.Now()
	mustRegister(t, s, Record{ID: "sb-defaults", Supervisor: self(t)})
	got, err := s.Get("sb-defaults")
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != StatusRunning || got.CreatedAt.Before(before.Add(-time.Second)) {
		t.Errorf("defaults: %+v", got)
	}

	for _, rec := range []Record{
		{ID: "", Status: StatusStopped},
		{ID: "../escape", Status: StatusStopped},
		{ID: "a/b", Status: StatusStopped},
		{ID: ".hidden", Status: StatusStopped},
		{ID: strings.Repeat("a", 65), Status: StatusStopped},
		{ID: "sb-nopid", Status: StatusRunning},
		{ID: "sb-status", Status: "paused"},
	} {
		if err := s.Register(rec); err == nil {
			t.Errorf("Register(%+v) succeeded", rec)
		}
	}
	if err := s.Register(Record{ID: strings.Repeat("a", 64), Status: StatusStopped}); err != nil {
		t.Errorf("64-character id: %v", err)
	}

	err = s.Update("sb-defaults", func(r *Record) { r.ID = "sb-other" })
	if err == nil {
		t.Error("Update changed the id")
	}
	if _, err := s.Get("sb-other"); !errors.Is(err, ErrNotFound) {
		t.Errorf("sb-other: %v", err)
	}
}

func TestRegisterConcurrentSameID(t *testing.T) {
	s, dir := newStore(t)
	const n = 20
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			rec := Record{ID: "sb-race", Status: StatusStopped, Reason: strconv.Itoa(i)}
			errs <- s.Register(rec)
		})
	}
	wg.Wait()
	close(errs)
	ok := 0
	for err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, ErrExists):
			t.Errorf("Register: %v", err)
		}
	}
	if ok != 1 {
		t.Errorf("%d registrations of the same id succeeded, want 1", ok)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("state directory holds %v, want only sb-race", entries)
	}
}

func TestPaths(t *testing.T) {
	s, dir := newStore(t)
	mustRegister(t, s, running(t, "sb-1", time.Now()))
	if got := s.Dir("sb-1"); got != filepath.Join(dir, "sb-1") {
		t.Errorf("Dir = %s", got)
	}
	if got := s.SocketPath("sb-1"); got != filepath.Join(dir, "sb-1", "ctl.sock") {
		t.Errorf("SocketPath = %s", got)
	}
	log := s.LogPath("sb-1")
	if log != filepath.Join(dir, "sb-1", "logs", "main.log") {
		t.Errorf("LogPath = %s", log)
	}
	if fi, err := os.Stat(filepath.Dir(log)); err != nil || !fi.IsDir() {
		t.Errorf("logs folder: %v", err)
	}
}

func TestPermissions(t *testing.T) {
	home := t.TempDir()
	dir := filepath.Join(home, "sandboxes")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := Open(home)
	if err != nil {
		t.Fatal(err)
	}
	mustRegister(t, s, running(t, "sb-perm", time.Now()))
	if err := s.Update("sb-perm", func(r *Record) { r.Reason = "x" }); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]fs.FileMode{
		"":                        fs.ModeDir | 0o700, // tightened from 0755
		"sb-perm":                 fs.ModeDir | 0o700,
		"sb-perm/logs":            fs.ModeDir | 0o700,
		"sb-perm/state.json":      0o600,
		"sb-perm/lock":            0o600,
		"sb-perm/.state.json.tmp": 0, // must not be left behind
	} {
		fi, err := os.Lstat(filepath.Join(dir, name))
		if want == 0 {
			if !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("%s: %v, want it gone", name, err)
			}
			continue
		}
		if err != nil {
			t.Error(err)
			continue
		}
		if fi.Mode() != want {
			t.Errorf("%s: mode %v, want %v", name, fi.Mode(), want)
		}
	}
}

func TestOpenRefusesForeignOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give the directory away")
	}
	home := t.TempDir()
	dir := filepath.Join(home, "sandboxes")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	_, err := Open(home)
	if err == nil || !strings.Contains(err.Error(), "AIRLOCK_HOME") || !strings.Contains(err.Error(), "65534") {
		t.Errorf("Open of a directory owned by someone else: %v", err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("refused directory was changed: %v %v", fi.Mode(), err)
	}
}

func TestOpenRefusesFile(t *testing.T) {
	home := t.TempDir()
	if err := os.WriteFile(filepath.Join(home, "sandboxes"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(home); err == nil {
		t.Error("Open succeeded with a file as the state directory")
	}
}

func TestLivenessWithChild(t *testing.T) {
	s, dir := newStore(t)
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := false
	t.Cleanup(func() {
		if !waited {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	pid := cmd.Process.Pid
	start, err := ProcessStartTime(pid)
	if err != nil {
		t.Fatal(err)
	}
	if !Alive(pid, start) {
		t.Fatal("Alive is false for a running child")
	}
	mustRegister(t, s, Record{ID: "sb-child", Status: StatusRunning, CreatedAt: time.Now(),
		Supervisor: Supervisor{PID: pid, StartTime: start}, Kind: KindRPC})

	got, err := s.Get("sb-child")
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != StatusRunning {
		t.Fatalf("Get with a live supervisor: status %q", got.Status)
	}
	if err := s.Remove("sb-child"); !errors.Is(err, ErrRunning) {
		t.Errorf("Remove with a live supervisor: %v, want ErrRunning", err)
	}

	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS == "linux" {
		// Not reaped yet: a zombie is not a live supervisor.
		deadline := time.Now().Add(10 * time.Second)
		for Alive(pid, start) {
			if time.Now().After(deadline) {
				t.Fatal("a killed, unreaped child is still alive")
			}
			time.Sleep(time.Millisecond)
		}
	}
	cmd.Wait()
	waited = true
	if Alive(pid, start) {
		t.Fatal("Alive is true for a reaped child")
	}

	got, err = s.Get("sb-child")
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != StatusCrashed || got.Reason != ReasonSupervisorDied || !got.StoppedAt.IsZero() {
		t.Errorf("Get after the supervisor died: %+v", got)
	}
	// Reading never writes: a full disk must not stop it.
	if rec := onDisk(t, dir, "sb-child"); rec.Status != StatusRunning || rec.Reason != "" {
		t.Errorf("Get wrote state.json after the supervisor died: %+v", rec)
	}
	if err := s.Remove("sb-child"); err != nil {
		t.Errorf("Remove of a crashed sandbox: %v", err)
	}
}

func TestPIDReuse(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("start times are known only on Linux")
	}
	s, dir := newStore(t)
	sup := self(t)
	sup.StartTime++ // this pid, but another process
	mustRegister(t, s, Record{ID: "sb-reused", Status: StatusRunning, CreatedAt: time.Now(), Supervisor: sup})
	mustRegister(t, s, running(t, "sb-live", time.Now()))

	recs, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	status := map[string]string{}
	for _, r := range recs {
		status[r.ID] = r.Status + "/" + r.Reason
	}
	if status["sb-reused"] != StatusCrashed+"/"+ReasonSupervisorDied || status["sb-live"] != StatusRunning+"/" {
		t.Errorf("List: %v", status)
	}
	if rec := onDisk(t, dir, "sb-reused"); rec.Status != StatusRunning {
		t.Errorf("List wrote state.json: %+v", rec)
	}
	if got, err := s.Get("sb-reused"); err != nil || got.Status != StatusCrashed {
		t.Errorf("Get: %+v, %v", got, err)
	}
}

func TestResolve(t *testing.T) {
	s, _ := newStore(t)
	for _, id := range []string{"sb-abc123", "sb-abd456", "sb-x", "sb-x2", "sb-y1", "sb-y2", "sb-y3", "sb-y4", "sb-y5", "sb-y6"} {
		mustRegister(t, s, Record{ID: id, Status: StatusStopped})
	}
	for prefix, want := range map[string]string{
		"sb-abc123": "sb-abc123",
		"sb-abc":    "sb-abc123",
		"sb-abd":    "sb-abd456",
		"sb-x":      "sb-x", // exact wins over the prefix of sb-x2
		"sb-x2":     "sb-x2",
		// The hex part alone, as docker takes an id's prefix.
		"abc":    "sb-abc123",
		"abd456": "sb-abd456",
		"x":      "sb-x",
	} {
		if got, err := s.Resolve(prefix); err != nil || got != want {
			t.Errorf("Resolve(%q) = %q, %v; want %q", prefix, got, err, want)
		}
	}

	_, err := s.Resolve("sb-ab")
	if !errors.Is(err, ErrAmbiguous) || err.Error() != `"sb-ab" matches several sandboxes (sb-abc123, sb-abd456): give more of the id` {
		t.Errorf("Resolve(sb-ab): %v", err)
	}
	_, err = s.Resolve("sb-y")
	if !errors.Is(err, ErrAmbiguous) || !strings.Contains(err.Error(), "(sb-y1, sb-y2, sb-y3, sb-y4, sb-y5, ...)") {
		t.Errorf("Resolve(sb-y): %v", err)
	}
	if _, err := s.Resolve("ab"); !errors.Is(err, ErrAmbiguous) {
		t.Errorf("Resolve(ab): %v, want ErrAmbiguous", err)
	}
	for _, prefix := range []string{"nope", "", "../", "sb-abc1234", ".new", "abc1234"} {
		_, err := s.Resolve(prefix)
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("Resolve(%q): %v, want ErrNotFound", prefix, err)
		}
	}
	_, err = s.Resolve("nope")
	if want := "no sandbox matches \"nope\": `airlock ps -a` lists every sandbox"; err.Error() != want {
		t.Errorf("Resolve(nope): %q, want %q", err, want)
	}
}

func TestRemove(t *testing.T) {
	s, dir := newStore(t)
	mustRegister(t, s, running(t, "sb-rm", time.Now()))

	err := s.Remove("sb-rm")
	if !errors.Is(err, ErrRunning) || !strings.Contains(err.Error(), "airlock kill sb-rm") {
		t.Errorf("Remove of a running sandbox: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "sb-rm", "state.json")); err != nil {
		t.Fatalf("refused Remove touched the folder: %v", err)
	}

	if err := s.Update("sb-rm", func(r *Record) { r.Status = StatusStopped }); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove("sb-rm"); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Errorf("after Remove the state directory holds %v", entries)
	}
	if _, err := s.Get("sb-rm"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after Remove: %v", err)
	}
	if err := s.Remove("sb-rm"); !errors.Is(err, ErrNotFound) {
		t.Errorf("second Remove: %v", err)
	}
	if err := s.Remove("../x"); err == nil {
		t.Error("Remove accepted an invalid id")
	}
}

func TestSymlinksRefused(t *testing.T) {
	s, dir := newStore(t)
	// A complete sandbox folder elsewhere, reached by a link.
	outside := t.TempDir()
	other, err := Open(outside)
	if err != nil {
		t.Fatal(err)
	}
	mustRegister(t, other, Record{ID: "sb-evil", Status: StatusStopped})
	target := other.Dir("sb-evil")
	if err := os.Symlink(target, filepath.Join(dir, "sb-evil")); err != nil {
		t.Fatal(err)
	}
	// And a relative link inside the state directory.
	mustRegister(t, s, Record{ID: "sb-real", Status: StatusStopped})
	if err := os.Symlink("sb-real", filepath.Join(dir, "sb-alias")); err != nil {
		t.Fatal(err)
	}

	for _, id := range []string{"sb-evil", "sb-alias"} {
		if _, err := s.Get(id); err == nil || errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "symbolic link") {
			t.Errorf("Get(%s) through a link: %v", id, err)
		}
		if err := s.Update(id, func(r *Record) { r.Reason = "changed" }); err == nil {
			t.Errorf("Update(%s) through a link succeeded", id)
		}
		if err := s.Remove(id); err == nil {
			t.Errorf("Remove(%s) through a link succeeded", id)
		}
		if _, err := s.Resolve(id); !errors.Is(err, ErrNotFound) {
			t.Errorf("Resolve(%s) found a link: %v", id, err)
		}
		if err := s.Register(Record{ID: id, Status: StatusStopped}); !errors.Is(err, ErrExists) {
			t.Errorf("Register(%s) over a link: %v", id, err)
		}
	}
	recs, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids(recs), []string{"sb-real"}) {
		t.Errorf("List = %v, want only sb-real", ids(recs))
	}
	if rec := onDisk(t, filepath.Dir(target), "sb-evil"); rec.Reason != "" {
		t.Errorf("the link's target was changed: %+v", rec)
	}
	if rec := onDisk(t, dir, "sb-real"); rec.Reason != "" {
		t.Errorf("sb-real was changed through a link: %+v", rec)
	}

	// state.json itself replaced by a link leading out of the folder.
	state := filepath.Join(dir, "sb-real", "state.json")
	if err := os.Remove(state); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(target, "state.json"), state); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get("sb-real"); err != nil || !strings.Contains(got.Damaged, "symbolic link") || got.Reason != ReasonUnreadable {
		t.Errorf("Get of a state.json link out of the folder: %+v, %v", got, err)
	}
}

func TestGarbageListedAsCrashed(t *testing.T) {
	s, dir := newStore(t)
	mustRegister(t, s, Record{ID: "sb-good", Status: StatusStopped, CreatedAt: time.Now().Add(time.Hour)})
	write := func(id, content string) {
		t.Helper()
		if err := os.Mkdir(filepath.Join(dir, id), 0o700); err != nil {
			t.Fatal(err)
		}
		if content != "" {
			if err := os.WriteFile(filepath.Join(dir, id, "state.json"), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	write("sb-garbage", "{not json")
	write("sb-empty", "")
	write("sb-wrongid", `{"id":"sb-good","status":"running"}`)
	write("sb-huge", `{"id":"sb-huge","status":"stopped","reason":"`+strings.Repeat("x", 1<<20)+`"}`)
	write(".new-sb-staging-0123", "")                                               // hidden: a folder being registered
	if err := os.WriteFile(filepath.Join(dir, "sb-file"), nil, 0o600); err != nil { // not a folder
		t.Fatal(err)
	}

	recs, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	if recs[0].ID != "sb-good" || recs[0].Status != StatusStopped {
		t.Errorf("List[0] = %+v, want sb-good", recs[0])
	}
	var bad []string
	for _, r := range recs[1:] {
		if r.Status != StatusCrashed || r.Reason != ReasonUnreadable || r.CreatedAt.IsZero() {
			t.Errorf("garbage listed as %+v", r)
		}
		bad = append(bad, r.ID)
	}
	slices.Sort(bad)
	if want := []string{"sb-empty", "sb-garbage", "sb-huge", "sb-wrongid"}; !slices.Equal(bad, want) {
		t.Errorf("unreadable sandboxes %v, want %v", bad, want)
	}
	for _, id := range bad {
		if _, err := os.Stat(filepath.Join(dir, id)); err != nil {
			t.Errorf("List removed %s: %v", id, err)
		}
		if got, err := s.Get(id); err != nil || got.Damaged == "" || got.Status != StatusCrashed {
			t.Errorf("Get(%s) of garbage: %+v, %v", id, got, err)
		}
		if err := s.Remove(id); err != nil {
			t.Errorf("Remove(%s): %v", id, err)
		}
	}
}

func TestConcurrentUpdates(t *testing.T) {
	s, dir := newStore(t)
	mustRegister(t, s, running(t, "sb-busy", time.Now()))
	const n = 50
	var writers, readers sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		readers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				recs, err := s.List()
				if err != nil || len(recs) != 1 || recs[0].Status != StatusRunning {
					t.Errorf("List during updates: %+v, %v", recs, err)
					return
				}
				if _, err := s.Get("sb-busy"); err != nil {
					t.Errorf("Get during updates: %v", err)
					return
				}
			}
		})
	}
	for i := range n {
		writers.Go(func() {
			err := s.Update("sb-busy", func(r *Record) {
				r.Command = append(r.Command, strconv.Itoa(i))
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	writers.Wait()
	close(stop)
	readers.Wait()

	rec := onDisk(t, dir, "sb-busy")
	if len(rec.Command) != n {
		t.Fatalf("%d updates kept, want %d: %v", len(rec.Command), n, rec.Command)
	}
	seen := map[string]bool{}
	for _, c := range rec.Command {
		seen[c] = true
	}
	for i := range n {
		if !seen[strconv.Itoa(i)] {
			t.Errorf("update %d lost", i)
		}
	}
}

func TestValidateID(t *testing.T) {
	for _, id := range []string{"a", "sb-5f21a0bd831e", "A_b-9", strings.Repeat("z", 64)} {
		if err := ValidateID(id); err != nil {
			t.Errorf("ValidateID(%q): %v", id, err)
		}
	}
	for _, id := range []string{"", ".", "..", "a.b", "a/b", "a b", "é", "a\x00", strings.Repeat("z", 65)} {
		if err := ValidateID(id); err == nil {
			t.Errorf("ValidateID(%q) accepted it", id)
		}
	}
}

func ExampleHumanAge() {
	fmt.Println(HumanAge(90 * time.Second))
	// Output: 1 minute ago
}

func TestRegisterWritesRedactedConfig(t *testing.T) {
	s, _ := newStore(t)
	rec := running(t, "sb-config", time.Now())
	rec.Config = json.RawMessage(`{"env":{"A":"1"},"network":{"secrets":{"KEY":{"value":"sk-real","hosts":["api.example.com"]}}}}`)
	mustRegister(t, s, rec)
	path := filepath.Join(s.Dir("sb-config"), "config.json")
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("config.json mode %v, want 0600", fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "sk-real") || !strings.Contains(string(b), Redacted) || !strings.Contains(string(b), "api.example.com") {
		t.Errorf("config.json = %s", b)
	}
	got, err := s.Get("sb-config")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(got.Config), "sk-real") {
		t.Errorf("state.json config = %s", got.Config)
	}
}

// TestNames: a name, given once, names its sandbox wherever an id does;
// another sandbox cannot take it, even at the same time, until the
// record is removed; a name whose folder is gone is taken over; bad
// names are refused.
func TestNames(t *testing.T) {
	s, dir := newStore(t)
	mustRegister(t, s, Record{ID: "sb-aaa111", Name: "web", Status: StatusStopped})
	if id, err := s.Resolve("web"); err != nil || id != "sb-aaa111" {
		t.Errorf("Resolve(web) = %q, %v", id, err)
	}
	if r, err := s.Get("sb-aaa111"); err != nil || r.Name != "web" {
		t.Errorf("Get: %+v %v", r, err)
	}
	if err := s.Register(Record{ID: "sb-bbb222", Name: "web", Status: StatusStopped}); !errors.Is(err, ErrExists) || !strings.Contains(err.Error(), "sb-aaa111") {
		t.Errorf("a second sandbox named web: %v", err)
	}
	if _, err := s.Get("sb-bbb222"); !errors.Is(err, ErrNotFound) {
		t.Errorf("the refused sandbox was recorded: %v", err)
	}
	// Many at once: one wins.
	var wg sync.WaitGroup
	var won atomic.Int32
	for i := range 8 {
		wg.Go(func() {
			if s.Register(Record{ID: fmt.Sprintf("sb-race%d", i), Name: "raced", Status: StatusStopped}) == nil {
				won.Add(1)
			}
		})
	}
	wg.Wait()
	if won.Load() != 1 {
		t.Errorf("%d sandboxes got the name raced, want 1", won.Load())
	}
	// Removed, the name is free again.
	if err := s.Remove("sb-aaa111"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Resolve("web"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Resolve(web) after removal: %v", err)
	}
	mustRegister(t, s, Record{ID: "sb-ccc333", Name: "web", Status: StatusStopped})
	// A name whose sandbox's folder went by hand is taken over.
	if err := os.RemoveAll(filepath.Join(dir, "sb-ccc333")); err != nil {
		t.Fatal(err)
	}
	mustRegister(t, s, Record{ID: "sb-ddd444", Name: "web", Status: StatusStopped})
	if id, _ := s.Resolve("web"); id != "sb-ddd444" {
		t.Errorf("Resolve(web) after a take-over: %q", id)
	}
	// Names are never listed as sandboxes.
	recs, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if strings.HasPrefix(r.ID, "@") {
			t.Errorf("List shows %q", r.ID)
		}
	}
	for _, bad := range []string{"-x", ".x", "a b", "a/b", "@x", "../x", strings.Repeat("n", 200), "é"} {
		if err := s.Register(Record{ID: "sb-bad", Name: bad, Status: StatusStopped}); err == nil {
			t.Errorf("the name %q was taken", bad)
			s.Remove("sb-bad")
		}
	}
}

// Rename moves a sandbox's name: the new one resolves to it, the old one
// is free, a name another has is refused, and the same name twice is
// nothing.
func TestRename(t *testing.T) {
	s, _ := newStore(t)
	mustRegister(t, s, Record{ID: "sb-aaa111", Name: "web", Status: StatusStopped})
	mustRegister(t, s, Record{ID: "sb-bbb222", Name: "db", Status: StatusStopped})
	mustRegister(t, s, Record{ID: "sb-ccc333", Status: StatusStopped})
	if err := s.Rename("sb-aaa111", "front"); err != nil {
		t.Fatal(err)
	}
	if id, err := s.Resolve("front"); err != nil || id != "sb-aaa111" {
		t.Errorf("Resolve(front) = %q, %v", id, err)
	}
	if _, err := s.Resolve("web"); !errors.Is(err, ErrNotFound) {
		t.Errorf("the old name still resolves: %v", err)
	}
	if r, _ := s.Get("sb-aaa111"); r.Name != "front" {
		t.Errorf("the record's name: %q", r.Name)
	}
	if err := s.Rename("sb-aaa111", "db"); !errors.Is(err, ErrExists) {
		t.Errorf("to a name another has: %v", err)
	}
	if r, _ := s.Get("sb-aaa111"); r.Name != "front" {
		t.Errorf("a refused rename changed the record: %q", r.Name)
	}
	if err := s.Rename("sb-aaa111", "front"); err != nil {
		t.Errorf("to its own name: %v", err)
	}
	if err := s.Rename("sb-ccc333", "web"); err != nil {
		t.Errorf("a sandbox without a name, to a freed name: %v", err)
	}
	for _, bad := range []string{"", "-x", "a b"} {
		if err := s.Rename("sb-ccc333", bad); err == nil {
			t.Errorf("renamed to %q", bad)
		}
	}
	if err := s.Rename("sb-nosuch", "x"); !errors.Is(err, ErrNotFound) {
		t.Errorf("an unknown sandbox: %v", err)
	}
}

func TestTrimStopped(t *testing.T) {
	s, _ := newStore(t)
	base := time.Now().Add(-time.Hour)
	stopped := func(id, kind string, at time.Time) Record {
		return Record{ID: id, Status: StatusStopped, Kind: kind, CreatedAt: at.Add(-time.Minute), StoppedAt: at}
	}
	for i := range 6 {
		mustRegister(t, s, stopped(fmt.Sprintf("sb-rpc%d", i), KindRPC, base.Add(time.Duration(i)*time.Minute)))
	}
	mustRegister(t, s, stopped("sb-detached", KindDetached, base))
	mustRegister(t, s, Record{ID: "sb-crashed", Status: StatusCrashed, Kind: KindRPC, CreatedAt: base, StoppedAt: base})
	mustRegister(t, s, running(t, "sb-running", base))
	n, err := s.TrimStopped(2, KindRPC)
	if err != nil || n != 4 {
		t.Fatalf("TrimStopped: %d removed, %v; want 4", n, err)
	}
	recs, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range recs {
		ids = append(ids, r.ID)
	}
	slices.Sort(ids)
	if want := []string{"sb-crashed", "sb-detached", "sb-rpc4", "sb-rpc5", "sb-running"}; !slices.Equal(ids, want) {
		t.Errorf("after TrimStopped: %v, want %v", ids, want)
	}
	if n, err := s.TrimStopped(2, KindRPC); n != 0 || err != nil {
		t.Errorf("a second TrimStopped: %d, %v", n, err)
	}
}
