package redteam_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
)

// stateHome drives the airlock CLI (bins.cli) as a user does, with a
// state directory of its own.
type stateHome struct {
	t   *testing.T
	dir string
	lv  airlock.Isolation
}

// newStateHome uses dir (made when "") as the CLI's state directory for
// sandboxes of level lv; whatever the test leaves running is killed and
// pruned when it ends.
func newStateHome(t *testing.T, lv airlock.Isolation, dir string) *stateHome {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	h := &stateHome{t: t, dir: dir, lv: lv}
	t.Cleanup(func() {
		h.run("kill", "--all")
		h.run("prune")
	})
	return h
}

type cliOut struct {
	stdout, stderr string
	code           int
}

func (h *stateHome) run(args ...string) cliOut {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bins.cli, args...)
	cmd.Env = append(os.Environ(), "AIRLOCK_HOME="+h.dir)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		h.t.Fatalf("airlock %q did not finish in time; stderr: %s", args, errb.String())
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		h.t.Fatalf("airlock %q: %v", args, err)
	}
	return cliOut{out.String(), errb.String(), code}
}

// must runs the CLI and fails the test unless it exits 0.
func (h *stateHome) must(args ...string) cliOut {
	h.t.Helper()
	r := h.run(args...)
	if r.code != 0 {
		h.t.Fatalf("airlock %q: exit %d\nstdout: %s\nstderr: %s", args, r.code, r.stdout, r.stderr)
	}
	return r
}

// detached starts a detached sandbox running sleep and returns its id.
func (h *stateHome) detached() string {
	h.t.Helper()
	return strings.TrimSpace(h.must("run", "-d", "--isolation", string(h.lv), "--", "sleep", "600").stdout)
}

// cliRecord is what list --json and get print of a sandbox.
type cliRecord struct {
	ID         string `json:"id"`
	Status     string `json:"status"`
	Reason     string `json:"reason"`
	Damaged    string `json:"damaged"`
	Supervisor struct {
		PID int `json:"pid"`
	} `json:"supervisor"`
}

func (h *stateHome) list() map[string]cliRecord {
	h.t.Helper()
	var recs []cliRecord
	out := h.must("list", "-a", "--json").stdout
	if err := json.Unmarshal([]byte(out), &recs); err != nil {
		h.t.Fatalf("list --json: %v\n%s", err, out)
	}
	m := map[string]cliRecord{}
	for _, r := range recs {
		m[r.ID] = r
	}
	return m
}

func (h *stateHome) get(id string) (cliRecord, cliOut) {
	h.t.Helper()
	out := h.must("get", id)
	var r cliRecord
	if err := json.Unmarshal([]byte(out.stdout), &r); err != nil {
		h.t.Fatalf("get %s: %v\n%s", id, err, out.stdout)
	}
	return r, out
}

// crash kills the supervisor of sandbox id with SIGKILL and waits until
// the CLI sees it crashed.
func (h *stateHome) crash(id string) {
	h.t.Helper()
	r, _ := h.get(id)
	if r.Status != "running" || r.Supervisor.PID <= 0 {
		h.t.Fatalf("sandbox %s to crash: %+v", id, r)
	}
	if err := syscall.Kill(r.Supervisor.PID, syscall.SIGKILL); err != nil {
		h.t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if r, _ := h.get(id); r.Status == "crashed" {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("sandbox %s not crashed after its supervisor was killed", id)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// gone checks that nothing is left of sandbox id: no state folder, no
// process, no cgroup.
func (h *stateHome) gone(id string) {
	h.t.Helper()
	if _, err := os.Lstat(filepath.Join(h.dir, "sandboxes", id)); !errors.Is(err, os.ErrNotExist) {
		h.t.Errorf("%s: state folder left: %v", id, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(sandboxProcesses(id)) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if p := sandboxProcesses(id); len(p) > 0 {
		h.t.Errorf("%s: processes left: %v", id, p)
	}
	if c := sandboxCgroups(id); len(c) > 0 {
		h.t.Errorf("%s: cgroups left: %v", id, c)
	}
}

// sandboxCgroups lists the cgroup directories that exist for sandbox id.
func sandboxCgroups(id string) []string {
	v1, _ := filepath.Glob("/sys/fs/cgroup/*/airlock/" + id)
	v2, _ := filepath.Glob("/sys/fs/cgroup/airlock/" + id)
	return append(v1, v2...)
}

// sandboxProcesses lists host processes in a cgroup of sandbox id.
func sandboxProcesses(id string) []string {
	var pids []string
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cgroup"))
		if err == nil && strings.Contains(string(b), "/airlock/"+id) {
			pids = append(pids, d.Name())
		}
	}
	return pids
}

// recordDamages replace a sandbox's state.json (path; good is its valid
// content) in the ways a crash, a full disk, a bad tool or a user can
// leave it.
var recordDamages = []struct {
	name   string
	damage func(path string, good []byte) error
}{
	{"empty", func(p string, _ []byte) error { return os.WriteFile(p, nil, 0o600) }},
	{"truncated-start", func(p string, good []byte) error { return os.WriteFile(p, good[:1], 0o600) }},
	{"truncated-middle", func(p string, good []byte) error { return os.WriteFile(p, good[:len(good)/2], 0o600) }},
	{"truncated-end", func(p string, good []byte) error { return os.WriteFile(p, good[:len(good)-3], 0o600) }},
	{"garbage", func(p string, _ []byte) error {
		return os.WriteFile(p, []byte("\x00\x01\xfe\xff\x1b]52;c;aGk=\x07 not json"), 0o600)
	}},
	{"wrong-types", func(p string, good []byte) error {
		return os.WriteFile(p, bytes.Replace(good, []byte(`"status":"`), []byte(`"status":["`), 1), 0o600)
	}},
	{"symlink", func(p string, _ []byte) error {
		if err := os.Remove(p); err != nil {
			return err
		}
		return os.Symlink("/dev/zero", p)
	}},
	{"directory", func(p string, _ []byte) error {
		if err := os.Remove(p); err != nil {
			return err
		}
		return os.Mkdir(p, 0o700)
	}},
	{"fifo", func(p string, _ []byte) error {
		if err := os.Remove(p); err != nil {
			return err
		}
		return syscall.Mkfifo(p, 0o600)
	}},
	{"huge", func(p string, _ []byte) error {
		// Sparse: a reader that does not bound what it reads never ends.
		return os.Truncate(p, 1<<40)
	}},
	{"missing", func(p string, _ []byte) error { return os.Remove(p) }},
}

// damageRecord damages the state.json of sandbox id with d.
func (h *stateHome) damageRecord(id string, damage func(string, []byte) error) string {
	h.t.Helper()
	path := filepath.Join(h.dir, "sandboxes", id, "state.json")
	good, err := os.ReadFile(path)
	if err != nil {
		h.t.Fatal(err)
	}
	if !bytes.Contains(good, []byte(`"id":"`+id+`"`)) {
		h.t.Fatalf("state.json of %s: %s", id, good)
	}
	if err := damage(path, good); err != nil {
		h.t.Fatalf("damage state.json: %v", err)
	}
	return path
}

// TestFaultDamagedRecord damages the record of live and crashed
// sandboxes in every way: every command names the damaged file and what
// to do, a live sandbox is never called crashed and stays reachable, and
// kill, rm -f and prune still stop and remove sandboxes, leaving nothing.
// The record is read above the boundary seam, the same at every level:
// the process level takes every kind of damage, the others two (one
// removed by prune, one by rm -f), which show that a damaged record
// still reaches and stops their sandboxes.
func TestFaultDamagedRecord(t *testing.T) {
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		for i, d := range recordDamages {
			if lv != airlock.IsolationProcess && d.name != "truncated-start" && d.name != "garbage" {
				continue
			}
			t.Run(d.name, func(t *testing.T) {
				h := newStateHome(t, lv, "")
				killed, forced, crashed := h.detached(), h.detached(), h.detached()
				h.crash(crashed)
				paths := map[string]string{}
				for _, id := range []string{killed, forced, crashed} {
					paths[id] = h.damageRecord(id, d.damage)
				}
				names := func(what string, out string, id string) {
					t.Helper()
					if !strings.Contains(out, paths[id]) {
						t.Errorf("%s does not name the damaged file %s:\n%s", what, paths[id], out)
					}
				}

				// list: live ones are running, the crashed one crashed;
				// all are flagged, and the message names the file.
				l := h.must("list", "-a")
				for _, id := range []string{killed, forced, crashed} {
					names("list", l.stderr, id)
				}
				for line := range strings.Lines(l.stdout) {
					switch {
					case strings.HasPrefix(line, crashed):
						if !strings.Contains(line, "crashed (damaged record)") {
							t.Errorf("list: %q", line)
						}
					case strings.HasPrefix(line, killed), strings.HasPrefix(line, forced):
						if !strings.Contains(line, "running (damaged record)") {
							t.Errorf("list: %q", line)
						}
					}
				}
				m := h.list()
				if m[killed].Status != "running" || m[forced].Status != "running" || m[crashed].Status != "crashed" {
					t.Errorf("list --json: %+v", m)
				}
				for id, r := range m {
					if r.Damaged == "" {
						t.Errorf("list --json: %s not flagged damaged: %+v", id, r)
					}
				}

				// get: what is known, and the damage.
				r, out := h.get(killed)
				names("get", out.stderr, killed)
				if r.Status != "running" || r.Supervisor.PID <= 0 || !strings.Contains(r.Damaged, "airlock kill") {
					t.Errorf("get of a live sandbox with a damaged record: %+v", r)
				}
				r, out = h.get(crashed)
				names("get", out.stderr, crashed)
				if r.Status != "crashed" || !strings.Contains(r.Damaged, "airlock rm") {
					t.Errorf("get of a crashed sandbox with a damaged record: %+v", r)
				}

				// exec reaches a live sandbox all the same, and refuses
				// a crashed one, saying why.
				if out := h.must("exec", killed, "--", "echo", "still-here"); out.stdout != "still-here\n" {
					t.Errorf("exec in a live sandbox with a damaged record: %q", out.stdout)
				} else {
					names("exec", out.stderr, killed)
				}
				if out := h.run("exec", crashed, "--", "true"); out.code == 0 || !strings.Contains(out.stderr, "crashed") {
					t.Errorf("exec in a crashed sandbox: exit %d, %s", out.code, out.stderr)
				} else {
					names("exec", out.stderr, crashed)
				}

				// prune keeps the live ones and says what is damaged.
				var pruned cliOut
				if i%2 == 0 {
					pruned = h.must("prune")
				} else {
					pruned = h.must("rm", "-f", crashed)
				}
				if !strings.Contains(pruned.stdout, crashed) || strings.Contains(pruned.stdout, killed) || strings.Contains(pruned.stdout, forced) {
					t.Errorf("removing the crashed sandbox printed:\n%s", pruned.stdout)
				}
				h.gone(crashed)
				if i%2 == 0 {
					names("prune", pruned.stderr, killed)
				}

				// kill stops a live one; its supervisor writes the record
				// anew, and rm removes it.
				h.must("kill", killed)
				r, out = h.get(killed)
				if r.Status != "stopped" || r.Damaged != "" || out.stderr != "" {
					t.Errorf("after kill: %+v\n%s", r, out.stderr)
				}
				h.must("rm", killed)
				h.gone(killed)

				// rm -f stops and removes one in one go.
				if out := h.must("rm", "-f", forced); !strings.Contains(out.stdout, forced) {
					t.Errorf("rm -f printed %q", out.stdout)
				}
				h.gone(forced)
				if m := h.list(); len(m) != 0 {
					t.Errorf("left in list: %+v", m)
				}
			})
		}
	})
}
