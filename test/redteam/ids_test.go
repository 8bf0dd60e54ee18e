package redteam_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/boundary/process"
)

// hostUID is the real uid, seen from the host, of process pid.
func hostUID(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Uid:"); ok {
			var uid int
			if _, err := fmt.Sscan(v, &uid); err != nil {
				t.Fatal(err)
			}
			return uid
		}
	}
	t.Fatalf("no Uid in /proc/%d/status", pid)
	return 0
}

// sentryOf is the Sentry (runsc-sandbox) of the runsc whose pid is
// runsc.
func sentryOf(t *testing.T, runsc int) int {
	t.Helper()
	pid := childOf(runsc, func(_, argv0 string) bool { return argv0 == "runsc-sandbox" })
	if pid == 0 {
		t.Fatalf("no Sentry under runsc %d", runsc)
	}
	return pid
}

// hostMap is process pid's uid_map or gid_map (f), as the host reads it.
func hostMap(t *testing.T, pid int, f string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, f))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// idLeases lists the lease files in the host's uid registry that hold
// sandbox id.
func idLeases(t *testing.T, id string) []string {
	t.Helper()
	ents, err := os.ReadDir(process.HostIDsDir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(process.HostIDsDir, e.Name()))
		if err == nil && strings.TrimSpace(string(b)) == id {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestIDsDistinct starts sandboxes at once and reads, from the host, the
// uid each sandbox's processes run as and the block of host ids each
// maps: no two blocks share an id, each is a whole block of the sandbox
// range that its uid_map and gid_map name and its lease holds, and a
// closed sandbox's block goes back to the registry.
func TestIDsDistinct(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("an unprivileged caller maps its own uid and subordinate ids into every sandbox; distinct blocks are airlock's as root")
	}
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		// Two of them have ids that a hash of the id modulo the range
		// (as uids were once chosen) maps to one uid.
		ids := []string{"sb-uid-5338", "sb-uid-7480"}
		for range 6 {
			ids = append(ids, airlock.NewID())
		}
		sbs := make([]*airlock.Sandbox, len(ids))
		var wg sync.WaitGroup
		for i, id := range ids {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				sb, err := airlock.CreateWithID(ctx, id, airlock.Config{Isolation: lv})
				if err != nil {
					t.Errorf("create sandbox %d: %v", i, err)
					return
				}
				sbs[i] = sb
			})
		}
		wg.Wait()
		for _, sb := range sbs {
			if sb != nil {
				t.Cleanup(func() { sb.Close() })
			}
		}
		if t.Failed() {
			return
		}
		type block struct {
			first int
			id    string
		}
		var blocks []block
		// A VM's ids are its guest kernel's own: what runs on the host is
		// QEMU, as one unprivileged uid leased for it alone.
		size := process.SandboxIDs
		if lv == airlock.IsolationVM {
			size = 1
		}
		for _, sb := range sbs {
			if lv == airlock.IsolationVM {
				uid := hostUID(t, sb.PID())
				if uid < process.SandboxUIDBase || uid >= process.SandboxUIDBase+process.SandboxUIDRange {
					t.Errorf("the QEMU of %s runs as host uid %d, outside the sandbox range", sb.ID(), uid)
				}
				if ls := idLeases(t, sb.ID()); len(ls) != 1 || !strings.HasPrefix(ls[0], fmt.Sprintf("%d+1@%d.", uid, os.Getpid())) {
					t.Errorf("the QEMU of %s (uid %d): leases %q, want the one of its uid held by this process", sb.ID(), uid, ls)
				}
				blocks = append(blocks, block{uid, sb.ID()})
				continue
			}
			// The uid of a command (seen from the host through the
			// agent's, which every process of the sandbox shares); at
			// gvisor, the Sentry's, whose tasks the commands are.
			holder := sb.PID()
			if lv == airlock.IsolationGVisor {
				holder = sentryOf(t, holder)
			}
			uid := hostUID(t, holder)
			if uid < process.SandboxUIDBase || uid+process.SandboxIDs > process.SandboxUIDBase+process.SandboxUIDRange || (uid-process.SandboxUIDBase)%process.SandboxIDs != 0 {
				t.Errorf("sandbox %s runs as host uid %d, not the first of a block of the sandbox range", sb.ID(), uid)
			}
			blocks = append(blocks, block{uid, sb.ID()})
			want := fmt.Sprintf("0 %d %d", uid, process.SandboxIDs)
			for _, f := range []string{"uid_map", "gid_map"} {
				// The Sentry's user namespaces are its own (its first
				// maps every id to itself): the host's map of the
				// Sentry is the sandbox's.
				m := ""
				if lv == airlock.IsolationGVisor {
					m = hostMap(t, holder, f)
				} else {
					m = ok(t, sb, "cat /proc/self/"+f)
				}
				if m := strings.Join(strings.Fields(m), " "); m != want {
					t.Errorf("sandbox %s: %s %q, want %q", sb.ID(), f, m, want)
				}
			}
			if ls := idLeases(t, sb.ID()); len(ls) != 1 || !strings.HasPrefix(ls[0], fmt.Sprintf("%d+%d@%d.", uid, process.SandboxIDs, os.Getpid())) {
				t.Errorf("sandbox %s (uid %d): leases %q, want one of the block from %d held by this process", sb.ID(), uid, ls, uid)
			}
		}
		slices.SortFunc(blocks, func(a, b block) int { return a.first - b.first })
		for i := 1; i < len(blocks); i++ {
			if blocks[i].first < blocks[i-1].first+size {
				t.Errorf("sandboxes %s and %s share host ids: blocks from %d and %d", blocks[i-1].id, blocks[i].id, blocks[i-1].first, blocks[i].first)
			}
		}
		sbs[0].Close()
		if ls := idLeases(t, sbs[0].ID()); len(ls) != 0 {
			t.Errorf("a closed sandbox still holds %q", ls)
		}
	})
}

// TestIDsReclaimed kills a sandbox's supervisor with SIGKILL, which
// leaves its uid lease behind: the next sandbox's start takes it back.
func TestIDsReclaimed(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("an unprivileged caller maps its own uid into every sandbox; the registry is airlock's as root")
	}
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, bins.cli, "run", "-d", "--isolation", string(lv), "--", "sleep", "600").Output()
		if err != nil {
			t.Fatalf("airlock run -d: %v", err)
		}
		id := strings.TrimSpace(string(out))
		t.Cleanup(func() { exec.Command(bins.cli, "rm", "-f", id).Run() })
		out, err = exec.CommandContext(ctx, bins.cli, "get", id).Output()
		if err != nil {
			t.Fatalf("airlock get: %v", err)
		}
		var rec struct {
			Supervisor struct{ PID int } `json:"supervisor"`
		}
		if err := json.Unmarshal(out, &rec); err != nil || rec.Supervisor.PID <= 0 {
			t.Fatalf("airlock get %s: %q (%v)", id, out, err)
		}
		held := idLeases(t, id)
		if len(held) != 1 || !strings.Contains(held[0], fmt.Sprintf("@%d.", rec.Supervisor.PID)) {
			t.Fatalf("sandbox %s (supervisor %d): leases %q, want one held by its supervisor", id, rec.Supervisor.PID, held)
		}
		if err := syscall.Kill(rec.Supervisor.PID, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		// The supervisor is gone once its pid is (it is not our child:
		// it detached).
		for syscall.Kill(rec.Supervisor.PID, 0) == nil && ctx.Err() == nil {
			time.Sleep(20 * time.Millisecond)
		}
		// The registry is the host's: a start elsewhere (another test
		// package, run at once) may take the lease back first, which is
		// as good.
		if ls := idLeases(t, id); len(ls) != 1 {
			t.Logf("another start took the dead supervisor's lease back already: %q", ls)
		}
		box(t, lv, airlock.Config{})
		if ls := idLeases(t, id); len(ls) != 0 {
			t.Errorf("a start after the supervisor's death left its lease %q", ls)
		}
	})
}

// TestIDsWithoutSubIDs runs airlock as a user with no subordinate ids
// (nobody): its sandboxes have the one id they had before, and say why,
// and doctor names the command that gives the user a range.
func TestIDsWithoutSubIDs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run airlock as another user")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("setpriv is not installed")
	}
	home, err := os.MkdirTemp("", "airlock-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	if err := os.Chown(home, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	as := func(args ...string) *exec.Cmd {
		pre := []string{"--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
			"env", "-i", "HOME=" + home, "AIRLOCK_HOME=" + home, "AIRLOCK_AGENT=" + bins.agent,
			"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", bins.cli}
		return exec.Command(setpriv, append(pre, args...)...)
	}
	for _, f := range []string{"/etc/subuid", "/etc/subgid"} {
		if b, err := os.ReadFile(f); err == nil && (strings.Contains(string(b), "\nnobody:") || strings.HasPrefix(string(b), "nobody:") || strings.Contains(string(b), "65534:")) {
			t.Skipf("%s gives nobody subordinate ids", f)
		}
	}
	var stdout, stderr strings.Builder
	cmd := as("run", "--", "cat", "/proc/self/uid_map", "/proc/self/gid_map")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("airlock run as nobody: %v\n%s", err, stderr.String())
	}
	if got := strings.Join(strings.Fields(stdout.String()), " "); got != "0 65534 1 0 65534 1" {
		t.Errorf("uid_map and gid_map of nobody's sandbox: %q, want root mapped to nobody alone", got)
	}
	if w := stderr.String(); !strings.Contains(w, "one uid and one gid") || !strings.Contains(w, "usermod --add-subuids") || !strings.Contains(w, "airlock doctor") {
		t.Errorf("airlock run as nobody warned %q, want why the sandbox has one id and the fix", w)
	}
	out, err := as("doctor", "--json").Output()
	if err != nil {
		t.Fatalf("airlock doctor as nobody: %v", err)
	}
	var report struct {
		Levels []struct {
			Name   string
			Checks []struct{ Name, Status, Detail, Fix string }
		}
	}
	if err := json.Unmarshal(out, &report); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, l := range report.Levels {
		for _, c := range l.Checks {
			if l.Name == "process" && c.Name == "sandbox ids" {
				found = true
				if c.Status != "warn" || !strings.Contains(c.Detail, "nobody") || !strings.HasPrefix(c.Fix, "usermod --add-subuids ") || !strings.HasSuffix(c.Fix, " nobody (as root)") {
					t.Errorf("doctor's sandbox ids check for nobody: %+v", c)
				}
			}
		}
	}
	if !found {
		t.Errorf("doctor has no sandbox ids check: %s", out)
	}
}
