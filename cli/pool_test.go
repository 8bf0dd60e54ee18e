package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

type poolListedJSON struct {
	Pools []poolListed `json:"pools"`
}

// poolLs returns pool ls --json.
func (h *cliHome) poolLs() []poolListed {
	h.t.Helper()
	out := h.must(nil, "pool", "ls", "--json")
	var l poolListedJSON
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		h.t.Fatalf("pool ls --json: %v\n%s", err, out)
	}
	return l.Pools
}

// processesWithHome lists the processes whose environment names home as
// AIRLOCK_HOME: the supervisors the CLI started for it.
func processesWithHome(home string) []int {
	var pids []int
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "environ"))
		if err == nil && strings.Contains("\x00"+string(b), "\x00AIRLOCK_HOME="+home+"\x00") {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestPoolCLI: a pool of 2 runs 5 commands in a row, each in a fresh
// sandbox that leaves no record; run -d --pool leaves a sandbox that exec
// and rm reach; pool ls counts the pool's sandboxes; an unknown pool is a
// clear error; pool rm leaves no process or state behind.
func TestPoolCLI(t *testing.T) {
	t.Parallel()
	h := newCLIHome(t)
	t.Cleanup(func() { h.run(nil, "pool", "rm", "warm") })

	name := strings.TrimSpace(h.must(nil, "pool", "create", "--name", "warm", "--size", "2", "-e", "FROM=pool"))
	if name != "warm" {
		t.Fatalf("pool create printed %q, want warm", name)
	}
	r := h.run(nil, "pool", "create", "--name", "warm", "--size", "1", "--json")
	if r.code != 125 || !strings.Contains(r.stderr, `a pool named "warm" exists`) {
		t.Errorf("pool create with a name taken: exit %d, stderr %q", r.code, r.stderr)
	}

	for i := range 5 {
		r := h.run(nil, "run", "--pool", "warm", "--", "sh", "-c",
			fmt.Sprintf("test -e /tmp/mark && echo reused; touch /tmp/mark; echo run-%d $FROM; exit 7", i))
		if r.code != 7 || r.stdout != fmt.Sprintf("run-%d pool\n", i) {
			t.Fatalf("run %d through the pool: exit %d, stdout %q, stderr %q", i, r.code, r.stdout, r.stderr)
		}
	}
	if l := h.list(); len(l) != 0 {
		t.Errorf("run --pool left records: %+v", l)
	}
	if r := h.run(nil, "run", "--pool", "warm", "--memory", "1g", "--", "true"); r.code != 125 || !strings.Contains(r.stderr, "--memory") {
		t.Errorf("run --pool with a configuration flag: exit %d, stderr %q", r.code, r.stderr)
	}

	id := strings.TrimSpace(h.must(nil, "run", "-d", "--pool", "warm"))
	if !strings.HasPrefix(id, "sb-") {
		t.Fatalf("run -d --pool printed %q", id)
	}
	h.must(nil, "exec", id, "--", "sh", "-c", "echo kept > /tmp/f")
	if out := h.must(nil, "exec", id, "--", "sh", "-c", "cat /tmp/f; echo $FROM"); out != "kept\npool\n" {
		t.Errorf("exec in a sandbox taken from the pool: %q", out)
	}
	if rec := h.list()[id]; rec.Status != "running" || rec.Kind != "pool" {
		t.Errorf("ps shows the sandbox taken as %+v", rec)
	}
	h.must(nil, "rm", "-f", id)
	if l := h.list(); len(l) != 0 {
		t.Errorf("rm -f left records: %+v", l)
	}

	// A main command: its sandbox ends with it, as run -d's does.
	h.must(nil, "run", "-d", "--pool", "warm", "--name", "job", "--", "sh", "-c", "echo $FROM; exit 4")
	if out := h.must(nil, "wait", "job"); out != "4\n" {
		t.Errorf("wait on a main command run -d --pool started: %q", out)
	}
	if out := h.must(nil, "logs", "job"); out != "pool\n" {
		t.Errorf("logs of a main command run -d --pool started: %q", out)
	}
	h.must(nil, "rm", "job")

	var pools []poolListed
	deadline := time.Now().Add(30 * time.Second)
	for {
		pools = h.poolLs()
		if len(pools) == 1 && pools[0].Ready == 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(pools) != 1 || pools[0].Name != "warm" || pools[0].Size != 2 || pools[0].Ready != 2 || pools[0].Status != "running" || pools[0].Started < 8 {
		t.Fatalf("pool ls: %+v", pools)
	}
	if out := h.must(nil, "pool", "ls"); !strings.Contains(out, "warm") || !strings.Contains(out, "READY") {
		t.Errorf("pool ls:\n%s", out)
	}

	r = h.run(nil, "run", "--pool", "nope", "--", "true")
	if r.code != 125 || !strings.Contains(r.stderr, `no pool named "nope"`) {
		t.Errorf("run --pool with an unknown pool: exit %d, stderr %q", r.code, r.stderr)
	}
	r = h.run(nil, "run", "-d", "--pool", "nope")
	if r.code != 125 || !strings.Contains(r.stderr, `no pool named "nope"`) {
		t.Errorf("run -d --pool with an unknown pool: exit %d, stderr %q", r.code, r.stderr)
	}

	if out := h.must(nil, "pool", "rm", "warm"); strings.TrimSpace(out) != "warm" {
		t.Errorf("pool rm printed %q", out)
	}
	if pids := processesWithHome(h.home); len(pids) > 0 {
		t.Errorf("processes left after pool rm: %v", pids)
	}
	for _, sub := range []string{"pools", "sandboxes"} {
		if ents, err := os.ReadDir(filepath.Join(h.home, sub)); err != nil || len(ents) != 0 {
			t.Errorf("%s after pool rm: %v %v", sub, ents, err)
		}
	}
	if pools := h.poolLs(); len(pools) != 0 {
		t.Errorf("pool ls after pool rm: %+v", pools)
	}
}

// TestPoolSupervisorKilled: a pool supervisor killed with SIGKILL takes
// the sandboxes it serves with it; pool ls says so, and pool rm removes
// what it left.
func TestPoolSupervisorKilled(t *testing.T) {
	t.Parallel()
	h := newCLIHome(t)
	t.Cleanup(func() { h.run(nil, "pool", "rm", "doomed") })
	h.must(nil, "pool", "create", "--name", "doomed", "--size", "1")
	id := strings.TrimSpace(h.must(nil, "run", "-d", "--pool", "doomed", "--", "sleep", "1000"))
	pools := h.poolLs()
	if len(pools) != 1 || pools[0].PID <= 0 {
		t.Fatalf("pool ls: %+v", pools)
	}
	pid := pools[0].PID
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !waitGone(pid, 0, 10*time.Second) {
		t.Fatalf("pool supervisor %d outlived SIGKILL", pid)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(processesOf(id)) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if p := processesOf(id); len(p) > 0 {
		t.Errorf("processes of sandbox %s outlived its pool's supervisor: %v", id, p)
	}
	if rec := h.list()[id]; rec.Status != "crashed" {
		t.Errorf("sandbox of a killed pool: %+v", rec)
	}
	if pools := h.poolLs(); len(pools) != 1 || !strings.HasPrefix(pools[0].Status, "dead") {
		t.Errorf("pool ls after SIGKILL: %+v", pools)
	}
	r := h.run(nil, "run", "--pool", "doomed", "--", "true")
	if r.code != 125 || !strings.Contains(r.stderr, "died") {
		t.Errorf("run --pool on a dead pool: exit %d, stderr %q", r.code, r.stderr)
	}
	h.must(nil, "pool", "rm", "doomed")
	if ents, err := os.ReadDir(filepath.Join(h.home, "pools")); err != nil || len(ents) != 0 {
		t.Errorf("pools after pool rm: %v %v", ents, err)
	}
	h.must(nil, "rm", id)
}
