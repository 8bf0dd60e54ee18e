package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/lifecycle"
)

// cliHome runs the CLI with its own state directory, so that tests running
// in parallel do not see (or prune) each other's sandboxes.
type cliHome struct {
	t    *testing.T
	home string
}

func newCLIHome(t *testing.T) *cliHome {
	t.Helper()
	home, err := os.MkdirTemp("", "airlock-lc-")
	if err != nil {
		t.Fatal(err)
	}
	h := &cliHome{t: t, home: home}
	t.Cleanup(func() {
		// Leave nothing running behind a failed test.
		h.run(nil, "kill", "--all")
		h.run(nil, "prune")
		os.RemoveAll(home)
	})
	return h
}

func (h *cliHome) cmd(ctx context.Context, stdin io.Reader, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, cliBin, args...)
	cmd.Env = append(os.Environ(), "AIRLOCK_HOME="+h.home)
	cmd.Stdin = stdin
	return cmd
}

func (h *cliHome) run(stdin io.Reader, args ...string) cliResult {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := h.cmd(ctx, stdin, args...)
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
	return cliResult{out.String(), errb.String(), code}
}

// must runs the CLI and fails the test unless it exits 0.
func (h *cliHome) must(stdin io.Reader, args ...string) string {
	h.t.Helper()
	r := h.run(stdin, args...)
	if r.code != 0 {
		h.t.Fatalf("airlock %q: exit %d\nstdout: %s\nstderr: %s", args, r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

type listed struct {
	ID         string `json:"id"`
	Status     string `json:"status"`
	Supervisor struct {
		PID int `json:"pid"`
	} `json:"supervisor"`
	Command   []string `json:"command"`
	ExitCode  *int     `json:"exit_code"`
	Reason    string   `json:"reason"`
	Kind      string   `json:"kind"`
	Isolation string   `json:"isolation"`
}

func (h *cliHome) list() map[string]listed {
	h.t.Helper()
	var recs []listed
	out := h.must(nil, "list", "-a", "--json")
	if err := json.Unmarshal([]byte(out), &recs); err != nil {
		h.t.Fatalf("list --json: %v\n%s", err, out)
	}
	m := map[string]listed{}
	for _, r := range recs {
		m[r.ID] = r
	}
	return m
}

// startRPC starts `airlock rpc` in this home, with its stdin and stdout.
func (h *cliHome) startRPC(ctx context.Context) (*exec.Cmd, io.WriteCloser, io.Reader) {
	h.t.Helper()
	cmd := h.cmd(ctx, nil, "rpc")
	in, err := cmd.StdinPipe()
	if err != nil {
		h.t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		h.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	return cmd, in, out
}

// waitLogs waits until the log of sandbox ref (an id or name) holds s:
// a main command that prints once it is ready (its traps set) is ready.
func (h *cliHome) waitLogs(ref, s string) {
	h.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		logs := h.must(nil, "logs", ref)
		if strings.Contains(logs, s) {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("the log of %s has no %q after a minute: %q", ref, s, logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitStatus waits until list shows id with status.
func (h *cliHome) waitStatus(id, status string, d time.Duration) listed {
	h.t.Helper()
	deadline := time.Now().Add(d)
	for {
		r, ok := h.list()[id]
		if ok && r.Status == status {
			return r
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("sandbox %s: status %q after %v, want %q (%+v)", id, r.Status, d, status, r)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// cgroupsOf lists the cgroup directories that exist for sandbox id.
func cgroupsOf(id string) []string {
	matches, _ := filepath.Glob("/sys/fs/cgroup/*/airlock/" + id)
	more, _ := filepath.Glob("/sys/fs/cgroup/airlock/" + id)
	return append(matches, more...)
}

// processesOf lists host processes whose cgroup mentions sandbox id.
func processesOf(id string) []int {
	var pids []int
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cgroup"))
		if err == nil && strings.Contains(string(b), "/airlock/"+id) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestDetachedNames: --name names a detached sandbox wherever its id is
// taken, once: a second sandbox cannot have it until the first's record
// is removed.
func TestDetachedNames(t *testing.T) {
	t.Parallel()
	h := newCLIHome(t)
	id := strings.TrimSpace(h.must(nil, "run", "-d", "--name", "web", "--", "sleep", "60"))
	if out := h.must(nil, "exec", "web", "--", "echo", "hi"); out != "hi\n" {
		t.Errorf("exec web: %q", out)
	}
	if out := h.must(nil, "inspect", "--format", "{{.id}} {{.name}}", "web"); out != id+" web\n" {
		t.Errorf("inspect web: %q", out)
	}
	if table := h.must(nil, "list"); !strings.Contains(table, "NAME") || !strings.Contains(table, "web") {
		t.Errorf("list:\n%s", table)
	}
	if r := h.run(nil, "run", "-d", "--name", "web", "--", "true"); r.code == 0 || !strings.Contains(r.stderr, "taken") {
		t.Errorf("a second sandbox named web: exit %d, stderr %q", r.code, r.stderr)
	}
	for _, bad := range [][]string{{"run", "--name", "fg", "--", "true"}, {"run", "-d", "--name", "-bad", "--", "true"}} {
		if r := h.run(nil, bad...); r.code == 0 || !strings.Contains(r.stderr, "--name") {
			t.Errorf("airlock %q: exit %d, stderr %q", bad, r.code, r.stderr)
		}
	}
	// wait prints the main command's exit code once it ends; 137 for a
	// sandbox killed before its command ended, as docker reports it.
	job := strings.TrimSpace(h.must(nil, "run", "-d", "--name", "job", "--", "sh", "-c", "sleep 0.5; exit 7"))
	if out := h.must(nil, "wait", "job"); out != "7\n" {
		t.Errorf("wait job (%s): %q, want 7", job, out)
	}
	h.must(nil, "kill", "web")
	if out := h.must(nil, "wait", "web", "job"); out != "137\n7\n" {
		t.Errorf("wait web job: %q", out)
	}
	if r := h.run(nil, "wait", "nobody"); r.code == 0 {
		t.Errorf("wait of no sandbox: exit 0")
	}
	// stop: SIGTERM to the main command, which may end as it likes;
	// one that ignores it is killed after --time.
	h.must(nil, "run", "-d", "--name", "trap", "--", "sh", "-c", `trap "echo got TERM; exit 3" TERM; echo one; echo two; while :; do sleep 0.1; done`)
	h.must(nil, "run", "-d", "--name", "deaf", "--", "sh", "-c", `trap "" TERM; echo ready; while :; do sleep 0.1; done`)
	h.waitLogs("trap", "two\n") // the traps are set
	h.waitLogs("deaf", "ready\n")
	start := time.Now()
	h.must(nil, "stop", "trap")
	if out := h.must(nil, "wait", "trap"); out != "3\n" {
		t.Errorf("wait after stop of a command that exits 3 on SIGTERM: %q", out)
	}
	if logs := h.must(nil, "logs", "trap"); !strings.HasPrefix(logs, "one\ntwo\n") || !strings.Contains(logs, "got TERM\n") {
		t.Errorf("logs of the stopped sandbox: %q", logs)
	}
	// logs --tail N: the last N lines, as docker prints them.
	lines := strings.TrimSpace(h.must(nil, "run", "-d", "--", "sh", "-c", "echo one; echo two; echo three; exit 0"))
	if out := h.must(nil, "wait", lines); out != "0\n" {
		t.Errorf("wait: %q", out)
	}
	if logs := h.must(nil, "logs", "--tail", "2", lines); logs != "two\nthree\n" {
		t.Errorf("logs --tail 2: %q", logs)
	}
	if logs := h.must(nil, "logs", "-n", "0", lines); logs != "" {
		t.Errorf("logs -n 0: %q", logs)
	}
	// stdout and stderr apart, as docker logs keeps them; times with -t
	// and --since.
	apart := strings.TrimSpace(h.must(nil, "run", "-d", "--", "sh", "-c", "echo out; echo err >&2; exit 0"))
	h.must(nil, "wait", apart)
	if r := h.run(nil, "logs", apart); r.code != 0 || r.stdout != "out\n" || r.stderr != "err\n" {
		t.Errorf("logs: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := h.run(nil, "logs", "-t", "--since", "1m", apart); r.code != 0 || !strings.HasSuffix(r.stdout, "Z out\n") || !strings.HasPrefix(r.stdout, time.Now().UTC().Format("2006-")) {
		t.Errorf("logs -t --since 1m: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := h.run(nil, "logs", "--until", "1m", apart); r.code != 0 || r.stdout+r.stderr != "" {
		t.Errorf("logs --until 1m (before it ran): exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Errorf("stop of a command that ends on SIGTERM took %s", d)
	}
	start = time.Now()
	h.must(nil, "stop", "-t", "1", "deaf")
	if d := time.Since(start); d < time.Second {
		t.Errorf("stop -t 1 of a command that ignores SIGTERM returned after %s, before its grace", d)
	}
	deaf := strings.TrimSpace(h.must(nil, "inspect", "--format", "{{.id}}", "deaf"))
	h.waitStatus(deaf, "stopped", 10*time.Second)

	// kill -s: a signal to the main command, which goes on running.
	hup := strings.TrimSpace(h.must(nil, "run", "-d", "--name", "hup", "--", "sh", "-c", `trap "echo got HUP" HUP; echo ready; while :; do sleep 0.1; done`))
	idle := strings.TrimSpace(h.must(nil, "run", "-d"))
	h.waitLogs(hup, "ready\n")
	h.must(nil, "kill", "-s", "HUP", "hup")
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(h.must(nil, "logs", "hup"), "got HUP") && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if logs := h.must(nil, "logs", "hup"); !strings.Contains(logs, "got HUP") {
		t.Errorf("logs after kill -s HUP: %q", logs)
	}
	h.waitStatus(hup, "running", time.Second)
	if r := h.run(nil, "kill", "-s", "HUP", idle); r.code == 0 || !strings.Contains(r.stderr, "no main command") {
		t.Errorf("kill -s of a sandbox with no main command: exit %d, stderr %q", r.code, r.stderr)
	}
	h.must(nil, "kill", "hup", idle)
	// A killed main command ends as docker reports a killed container.
	if out := h.must(nil, "wait", "hup"); out != "137\n" {
		t.Errorf("wait after kill: %q, want 137", out)
	}
	// rename, as docker's: the new name reaches it, the old one is free,
	// a name another has is refused.
	h.must(nil, "rename", "web", "web-old")
	if out := h.must(nil, "inspect", "--format", "{{.id}} {{.name}}", "web-old"); out != id+" web-old\n" {
		t.Errorf("inspect after rename: %q", out)
	}
	if r := h.run(nil, "rename", "web-old", "job"); r.code == 0 || !strings.Contains(r.stderr, "taken") {
		t.Errorf("rename to a name another has: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := h.run(nil, "inspect", "web"); r.code == 0 {
		t.Errorf("the old name still names a sandbox")
	}
	h.must(nil, "rename", "web-old", "web")
	h.must(nil, "rm", "web")
	id2 := strings.TrimSpace(h.must(nil, "run", "-d", "--name", "web", "--", "sleep", "60"))
	if id2 == id || h.must(nil, "inspect", "--format", "{{.id}}", "web") != id2+"\n" {
		t.Errorf("after rm, web is %q, want the new sandbox %s", h.must(nil, "inspect", "--format", "{{.id}}", "web"), id2)
	}
	h.must(nil, "kill", "web")
}

func TestDetachedLifecycle(t *testing.T) {
	t.Parallel()
	h := newCLIHome(t)
	id := strings.TrimSpace(h.must(nil, "run", "-d", "--", "sh", "-c", "echo started; exec sleep 60"))
	if !strings.HasPrefix(id, "sb-") {
		t.Fatalf("run --detach printed %q, want a sandbox id", id)
	}
	r := h.waitStatus(id, "running", 5*time.Second)
	if r.Kind != "detached" || strings.Join(r.Command, " ") != "sh -c echo started; exec sleep 60" || r.Supervisor.PID <= 0 {
		t.Errorf("list shows %+v", r)
	}
	table := h.must(nil, "list")
	if !strings.Contains(table, "ID") || !strings.Contains(table, id) || !strings.Contains(table, "running") || !strings.Contains(table, "ago") && !strings.Contains(table, "just now") {
		t.Errorf("list table:\n%s", table)
	}
	var got struct {
		ID     string          `json:"id"`
		Status string          `json:"status"`
		Config json.RawMessage `json:"config"`
	}
	if err := json.Unmarshal([]byte(h.must(nil, "get", id)), &got); err != nil || got.ID != id || got.Status != "running" || len(got.Config) == 0 {
		t.Errorf("get: %+v, %v", got, err)
	}
	// As docker names things: inspect with --format, and the hex part
	// of the id alone.
	if out := h.must(nil, "inspect", "--format", "{{.status}} {{.kind}} {{.id}}", strings.TrimPrefix(id, "sb-")[:6]); out != "running detached "+id+"\n" {
		t.Errorf("inspect --format: %q", out)
	}
	if r := h.run(nil, "inspect", "--format", "{{.status", id); r.code == 0 || !strings.Contains(r.stderr, "--format") {
		t.Errorf("a bad --format: exit %d, stderr %q", r.code, r.stderr)
	}
	for typed, want := range map[string]string{"lsit": "list", "exce": "exec", "stpo": "stop", "imgae": "image"} {
		if r := h.run(nil, typed, id); r.code == 0 || !strings.Contains(r.stderr, "; did you mean "+want) || strings.Contains(r.stderr, `\x0a`) {
			t.Errorf("airlock %s: exit %d, stderr %q, want %s suggested", typed, r.code, r.stderr, want)
		}
	}

	// exec -it gets a real terminal of the caller's size.
	tty := h.cmd(context.Background(), nil, "exec", "-it", id, "sh", "-c", "tty; stty size")
	tty.Stdin = nil
	checkTTYSession(t, tty)

	// A unique prefix is enough.
	prefix := id[:6]
	if out := h.must(nil, "exec", prefix, "--", "echo", "hi"); out != "hi\n" {
		t.Errorf("exec echo = %q", out)
	}
	if r := h.run(nil, "exec", id, "--", "sh", "-c", "exit 3"); r.code != 3 {
		t.Errorf("exec exit 3: code %d, stderr %s", r.code, r.stderr)
	}
	if out := h.must(strings.NewReader("12345"), "exec", id, "--", "wc", "-c"); strings.TrimSpace(out) != "5" {
		t.Errorf("exec with stdin: %q", out)
	}
	if r := h.run(nil, "exec", id, "--", "airlock-no-such-command"); r.code != 127 {
		t.Errorf("exec of a missing command: code %d", r.code)
	}
	var res struct {
		ExitCode int    `json:"exit_code"`
		Stdout   string `json:"stdout"`
	}
	if err := json.Unmarshal([]byte(h.must(nil, "exec", "--json", id, "--", "echo", "json")), &res); err != nil || res.Stdout != "json\n" {
		t.Errorf("exec --json: %+v, %v", res, err)
	}
	// The sandbox keeps state between execs.
	h.must(nil, "exec", id, "--", "sh", "-c", "echo kept > /workspace/state")
	if out := h.must(nil, "exec", id, "--", "cat", "/workspace/state"); out != "kept\n" {
		t.Errorf("state between execs: %q", out)
	}

	// cp in and out, files and trees.
	local := t.TempDir()
	os.WriteFile(filepath.Join(local, "a.txt"), []byte("alpha\n"), 0o640)
	os.MkdirAll(filepath.Join(local, "tree", "sub"), 0o755)
	os.WriteFile(filepath.Join(local, "tree", "sub", "b.txt"), []byte("beta\n"), 0o600)
	h.must(nil, "cp", filepath.Join(local, "a.txt"), id+":/workspace/")
	h.must(nil, "cp", filepath.Join(local, "tree"), id+":/workspace/tree")
	if out := h.must(nil, "exec", id, "--", "sh", "-c", "cat /workspace/a.txt /workspace/tree/sub/b.txt; stat -c %a /workspace/a.txt"); out != "alpha\nbeta\n640\n" {
		t.Errorf("after cp in: %q", out)
	}
	h.must(nil, "exec", id, "--", "sh", "-c", "mkdir -p /workspace/out/d && echo gamma > /workspace/out/d/c.txt")
	back := t.TempDir()
	h.must(nil, "cp", id+":/workspace/out", back)
	if b, err := os.ReadFile(filepath.Join(back, "out", "d", "c.txt")); err != nil || string(b) != "gamma\n" {
		t.Errorf("cp out: %q, %v", b, err)
	}

	if out := h.must(nil, "logs", id); !strings.Contains(out, "started") {
		t.Errorf("logs = %q", out)
	}

	// kill stops it; the record stays until rm.
	h.must(nil, "kill", prefix)
	r = h.waitStatus(id, "stopped", 15*time.Second)
	if r.Reason != "killed" {
		t.Errorf("reason after kill = %q", r.Reason)
	}
	if p := processesOf(id); len(p) > 0 {
		t.Errorf("processes left after kill: %v", p)
	}
	if c := cgroupsOf(id); len(c) > 0 {
		t.Errorf("cgroups left after kill: %v", c)
	}
	if r := h.run(nil, "exec", id, "--", "true"); r.code == 0 || !strings.Contains(r.stderr, "not running") {
		t.Errorf("exec in a stopped sandbox: code %d, stderr %q", r.code, r.stderr)
	}
	h.must(nil, "rm", id)
	if _, ok := h.list()[id]; ok {
		t.Error("sandbox still listed after rm")
	}
	if r := h.run(nil, "get", id); r.code == 0 || !strings.Contains(r.stderr, "no sandbox") {
		t.Errorf("get after rm: code %d, stderr %q", r.code, r.stderr)
	}
}

func TestDetachedMainCommandEnds(t *testing.T) {
	t.Parallel()
	h := newCLIHome(t)
	id := strings.TrimSpace(h.must(nil, "run", "-d", "--", "sh", "-c", "echo bye; exit 7"))
	r := h.waitStatus(id, "stopped", 15*time.Second)
	if r.ExitCode == nil || *r.ExitCode != 7 || r.Reason != "exited" {
		t.Errorf("after the main command ended: %+v", r)
	}
	if out := h.must(nil, "logs", id); out != "bye\n" {
		t.Errorf("logs = %q", out)
	}
	// A command that cannot start is reported by run itself.
	if r := h.run(nil, "run", "-d", "--", "airlock-no-such-command"); r.code != 127 {
		t.Errorf("run -d of a missing command: code %d, stderr %q", r.code, r.stderr)
	}
}

func TestDetachedTimeout(t *testing.T) {
	t.Parallel()
	h := newCLIHome(t)
	const lifetime = 4 * time.Second
	start := time.Now()
	id := strings.TrimSpace(h.must(nil, "run", "-d", "--timeout", lifetime.String()))
	h.waitStatus(id, "running", 5*time.Second)
	// Usable until its lifetime ends, which a loaded machine may have
	// let pass before the exec gets there.
	switch r := h.run(nil, "exec", id, "--", "echo", "alive"); {
	case r.code == 0 && r.stdout == "alive\n":
	case time.Since(start) >= lifetime:
		t.Logf("the exec came %s after the start, past the lifetime: %q", time.Since(start).Round(time.Millisecond), r.stderr)
	default:
		t.Errorf("exec %s after the start, within the lifetime: code %d, stdout %q, stderr %q", time.Since(start).Round(time.Millisecond), r.code, r.stdout, r.stderr)
	}
	r := h.waitStatus(id, "stopped", 30*time.Second)
	if !strings.Contains(r.Reason, "timeout") && !strings.Contains(r.Reason, "lifetime") {
		t.Errorf("reason = %q, want a timeout", r.Reason)
	}
}

func TestAttach(t *testing.T) {
	t.Parallel()
	h := newCLIHome(t)
	id := strings.TrimSpace(h.must(nil, "run", "-d", "--", "sh", "-c", "while read l; do echo got:$l; done; exit 4"))
	h.waitStatus(id, "running", 5*time.Second)
	r := h.run(strings.NewReader("one\ntwo\n"), "attach", id)
	if r.code != 4 || !strings.Contains(r.stdout, "got:one\ngot:two\n") {
		t.Errorf("attach: code %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	h.waitStatus(id, "stopped", 10*time.Second)
}

// TestSupervisorCrashAndPrune kills supervisors with SIGKILL: list must say
// crashed, and prune must leave no process, cgroup, socket or record.
func TestSupervisorCrashAndPrune(t *testing.T) {
	t.Parallel()
	h := newCLIHome(t)
	detached := strings.TrimSpace(h.must(nil, "run", "-d", "--", "sleep", "300"))
	rec := h.waitStatus(detached, "running", 5*time.Second)

	// A sandbox of an `airlock rpc` session.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rpcCmd, in, out := h.startRPC(ctx)
	io.WriteString(in, `{"jsonrpc":"2.0","id":1,"method":"create","params":{}}`+"\n")
	var created struct {
		ID     json.RawMessage `json:"id"`
		Result struct {
			SandboxID string `json:"sandbox_id"`
		} `json:"result"`
		Error any `json:"error"`
	}
	dec := json.NewDecoder(out)
	for len(created.ID) == 0 { // event notifications may come first
		if err := dec.Decode(&created); err != nil {
			t.Fatalf("create over rpc: %v", err)
		}
	}
	if created.Result.SandboxID == "" {
		t.Fatalf("create over rpc: %+v", created)
	}
	viaRPC := created.Result.SandboxID
	r := h.waitStatus(viaRPC, "running", 5*time.Second)
	if r.Kind != "rpc" || r.Supervisor.PID != rpcCmd.Process.Pid {
		t.Errorf("rpc sandbox listed as %+v", r)
	}
	// The control socket of an rpc sandbox works too.
	if out := h.must(nil, "exec", viaRPC, "--", "echo", "via-socket"); out != "via-socket\n" {
		t.Errorf("exec in an rpc sandbox = %q", out)
	}

	syscall.Kill(rec.Supervisor.PID, syscall.SIGKILL)
	rpcCmd.Process.Kill()
	rpcCmd.Wait()
	for _, id := range []string{detached, viaRPC} {
		r := h.waitStatus(id, "crashed", 10*time.Second)
		if !strings.Contains(r.Reason, "supervisor") {
			t.Errorf("%s: reason %q", id, r.Reason)
		}
	}
	out2 := h.must(nil, "prune")
	for _, id := range []string{detached, viaRPC} {
		if !strings.Contains(out2, id) {
			t.Errorf("prune output does not name %s:\n%s", id, out2)
		}
		// The sandbox died with its supervisor (parent-death signal and
		// pid namespace); prune removed what was left.
		deadline := time.Now().Add(5 * time.Second)
		for len(processesOf(id)) > 0 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if p := processesOf(id); len(p) > 0 {
			t.Errorf("%s: processes left: %v", id, p)
		}
		if c := cgroupsOf(id); len(c) > 0 {
			t.Errorf("%s: cgroups left: %v", id, c)
		}
		if _, err := os.Stat(filepath.Join(h.home, "sandboxes", id)); !os.IsNotExist(err) {
			t.Errorf("%s: state folder left: %v", id, err)
		}
	}
	if m := h.list(); len(m) != 0 {
		t.Errorf("list after prune: %+v", m)
	}
	if b, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(b), detached) || strings.Contains(string(b), viaRPC) {
		t.Error("a mount of a pruned sandbox is visible on the host")
	}
}

// TestOtherUserLockedOut checks that another unprivileged user can neither
// read the state directory nor reach a sandbox's control socket.
func TestOtherUserLockedOut(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to act as another user")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("setpriv is not installed")
	}
	if _, err := user.Lookup("airlock-test"); err != nil {
		t.Skip("user airlock-test does not exist")
	}
	t.Parallel()
	h := newCLIHome(t)
	// The home itself is reachable by others (a temp dir), as a shared
	// machine's home directories often are: the state below it must not be.
	os.Chmod(h.home, 0o755)
	id := strings.TrimSpace(h.must(nil, "run", "-d", "--", "sleep", "60"))
	h.waitStatus(id, "running", 5*time.Second)
	sock := filepath.Join(h.home, "sandboxes", id, "ctl.sock")
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("control socket: %v, mode %v", err, fi)
	}
	if fi, err := os.Stat(filepath.Join(h.home, "sandboxes", id)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("state folder: %v, mode %v", err, fi)
	}
	as := func(args ...string) cliResult {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		full := append([]string{"--reuid=airlock-test", "--regid=airlock-test", "--clear-groups", "env", "AIRLOCK_HOME=" + h.home}, args...)
		cmd := exec.CommandContext(ctx, setpriv, full...)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		}
		return cliResult{o.String(), e.String(), code}
	}
	for _, args := range [][]string{
		{cliBin, "exec", id, "--", "true"},
		{cliBin, "kill", id},
		{cliBin, "list"},
		{"ls", filepath.Join(h.home, "sandboxes")},
		{"python3", "-c", "import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])", sock},
	} {
		if r := as(args...); r.code == 0 {
			t.Errorf("as another user, %q succeeded: %s", args, r.stdout)
		}
	}
	if r := h.list()[id]; r.Status != "running" {
		t.Errorf("the sandbox did not survive the attempts: %+v", r)
	}
}

// TestListAsDocker: list shows running sandboxes unless -a; --filter and
// --format select and shape records as docker ps does.
func TestListAsDocker(t *testing.T) {
	t.Parallel()
	h := newCLIHome(t)
	web := strings.TrimSpace(h.must(nil, "run", "-d", "--name", "web", "--", "sleep", "60"))
	done := strings.TrimSpace(h.must(nil, "run", "-d", "--name", "batch", "--", "sh", "-c", "exit 3"))
	h.waitStatus(done, "stopped", 10*time.Second)

	ids := func(args ...string) string {
		t.Helper()
		f := strings.Fields(h.must(nil, append([]string{"ps", "-q"}, args...)...))
		slices.Sort(f)
		return strings.Join(f, " ")
	}
	if got := ids(); got != web {
		t.Errorf("ps -q = %q, want only the running %s", got, web)
	}
	if got := ids("-a"); !strings.Contains(got, web) || !strings.Contains(got, done) {
		t.Errorf("ps -aq = %q, want both", got)
	}
	both := []string{web, done}
	slices.Sort(both)
	for args, want := range map[string]string{
		"--filter status=stopped":                 done, // a status filter needs no -a
		"--filter exited=3":                       done,
		"--filter exited=0":                       "",
		"-a --filter name=we":                     web,
		"-a --filter name=we --filter name=batch": strings.Join(both, " "),
		"-a --filter name=web --filter kind=rpc":  "",
		"-a --filter id=" + done[3:9]:             done,
	} {
		if got := ids(strings.Fields(args)...); got != want {
			t.Errorf("ps -q %s = %q, want %q", args, got, want)
		}
	}
	if got := h.must(nil, "ps", "-a", "--filter", "name=batch", "--format", "{{.name}} {{.status}} {{.exit_code}}"); got != "batch stopped 3\n" {
		t.Errorf("--format: %q", got)
	}
	table := h.must(nil, "ps", "--format", `table {{.name}}\t{{.supervisor.pid}}`)
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "NAME ") || !strings.HasSuffix(lines[0], "PID") || !strings.HasPrefix(lines[1], "web ") {
		t.Errorf("--format table:\n%s", table)
	}
	var rec listed
	if err := json.Unmarshal([]byte(h.must(nil, "ps", "--format", "json")), &rec); err != nil || rec.ID != web {
		t.Errorf("--format json: %+v, %v", rec, err)
	}
	for _, bad := range [][]string{{"--filter", "colour=red"}, {"--filter", "status=frozen"}, {"--filter", "exited=x"}, {"--format", "{{.id"}} {
		if r := h.run(nil, append([]string{"ps"}, bad...)...); r.code == 0 || !strings.Contains(r.stderr, bad[0]) {
			t.Errorf("ps %q: exit %d, stderr %q", bad, r.code, r.stderr)
		}
	}
}

// TestStats: stats reads a running sandbox's cgroup through its control
// socket: CPU, memory against its limit, processes against theirs.
func TestStats(t *testing.T) {
	t.Parallel()
	h := newCLIHome(t)
	id := strings.TrimSpace(h.must(nil, "run", "-d", "--name", "busy", "--memory", "96m", "--pids-limit", "50", "--",
		"sh", "-c", "head -c 20m /dev/zero > /tmp/fill; while :; do :; done"))
	deadline := time.Now().Add(20 * time.Second)
	var rows []sandboxStats
	for {
		rows = nil
		out := h.must(nil, "stats", "--no-stream", "--json", "busy")
		if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 1 {
			t.Fatalf("stats --json: %v\n%s", err, out)
		}
		if rows[0].MemoryBytes >= 20<<20 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	r := rows[0]
	if r.ID != id || r.Name != "busy" || r.Error != "" {
		t.Errorf("row %+v", r)
	}
	if r.MemoryBytes < 20<<20 || r.MemoryLimitBytes != 96<<20 || r.MemoryPercent <= 0 {
		t.Errorf("memory: %d of %d bytes (%.1f%%), want the 20 MiB tmpfs file counted against 96 MiB", r.MemoryBytes, r.MemoryLimitBytes, r.MemoryPercent)
	}
	if r.Pids < 1 || r.PidsLimit != 50 {
		t.Errorf("pids %d of %d", r.Pids, r.PidsLimit)
	}
	// A busy loop uses CPU between the two readings.
	if r.CPUPercent <= 0 || r.CPUNanos == 0 {
		t.Errorf("cpu %.2f%%, %d ns", r.CPUPercent, r.CPUNanos)
	}
	table := h.must(nil, "stats", "--no-stream")
	if !strings.Contains(table, "MEM USAGE / LIMIT") || !strings.Contains(table, "96MiB") || !strings.Contains(table, "busy") {
		t.Errorf("stats table:\n%s", table)
	}
	if out := h.must(nil, "stats", "--no-stream", "--format", "{{.name}} {{.pids_limit}}"); out != "busy 50\n" {
		t.Errorf("stats --format: %q", out)
	}
	h.must(nil, "kill", "busy")
	if r := h.run(nil, "stats", "--no-stream", "busy"); !strings.Contains(r.stdout, "not running") {
		t.Errorf("stats of a stopped sandbox: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}
}

// TestRunRm: --rm as docker's. A detached sandbox run with it is listed
// while it runs, wait still gets its exit code, and then its record,
// name and state are gone; a foreground run accepts it (it keeps no
// record anyway). With --pool --detach it is refused, saying why.
func TestRunRm(t *testing.T) {
	t.Parallel()
	h := newCLIHome(t)
	if out := h.must(nil, "run", "--rm", "--", "echo", "fg"); out != "fg\n" {
		t.Errorf("run --rm in the foreground: %q", out)
	}
	id := strings.TrimSpace(h.must(nil, "run", "-d", "--rm", "--name", "gone", "--", "sh", "-c", "read l; exit 3"))
	h.waitStatus(id, "running", 10*time.Second)
	done := make(chan cliResult, 1)
	go func() { done <- h.run(nil, "wait", id) }()
	// A wait that polls the record when the command ends; one that
	// starts later than the record's grace (rmGrace) finds no record.
	time.Sleep(500 * time.Millisecond)
	if r := h.run(strings.NewReader("go\n"), "attach", id); r.code != 3 {
		t.Errorf("attach: code %d, stderr %q; want the command's 3", r.code, r.stderr)
	}
	select {
	case r := <-done:
		if r.code != 0 || strings.TrimSpace(r.stdout) != "3" {
			t.Errorf("wait: code %d, stdout %q, stderr %q; want 3", r.code, r.stdout, r.stderr)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("wait did not return")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, ok := h.list()[id]; !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the record of a sandbox run with --rm is still there: %+v", h.list()[id])
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := os.Stat(filepath.Join(h.home, "sandboxes", id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("its state directory: %v", err)
	}
	// The name is free again.
	again := strings.TrimSpace(h.must(nil, "run", "-d", "--rm", "--name", "gone", "--", "true"))
	if again == id {
		t.Errorf("the same id twice: %s", id)
	}
	if r := h.run(nil, "run", "-d", "--rm", "--pool", "p", "--", "true"); r.code != 125 || !strings.Contains(r.stderr, "--rm with --detach --pool") {
		t.Errorf("--rm with --detach --pool: code %d, stderr %q", r.code, r.stderr)
	}
}

// TestExecDetach: exec -d returns at once and leaves its command running
// after it (and its connection) ended, as docker exec -d does; the
// command's output goes nowhere, its pid comes with --json, and what
// cannot be detached is refused.
func TestExecDetach(t *testing.T) {
	t.Parallel()
	h := newCLIHome(t)
	id := strings.TrimSpace(h.must(nil, "run", "-d"))
	h.waitStatus(id, "running", 5*time.Second)
	if out := h.must(nil, "exec", "-d", id, "--", "sh", "-c", "echo lost; sleep 1; echo $$ > /tmp/ran"); out != "" {
		t.Errorf("exec -d printed %q", out)
	}
	var res struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(h.must(nil, "exec", "-d", "--json", id, "--", "sleep", "30")), &res); err != nil || res.Pid <= 0 {
		t.Errorf("exec -d --json: %v, pid %d", err, res.Pid)
	}
	// The first command outlived its exec, which returned before it slept.
	deadline := time.Now().Add(30 * time.Second)
	for h.run(nil, "exec", id, "--", "test", "-s", "/tmp/ran").code != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the detached command did not run on after exec -d returned")
		}
		time.Sleep(200 * time.Millisecond)
	}
	if out := h.must(nil, "exec", id, "--", "sh", "-c", "kill -0 "+strconv.Itoa(res.Pid)+" && echo alive"); out != "alive\n" {
		t.Errorf("the detached sleep (pid %d): %q", res.Pid, out)
	}
	if r := h.run(nil, "exec", "-d", "-t", id, "--", "true"); r.code == 0 || !strings.Contains(r.stderr, "--detach cannot be combined") {
		t.Errorf("exec -d -t: exit %d, %q", r.code, r.stderr)
	}
	if r := h.run(nil, "exec", "-d", id, "--", "airlock-nosuch-command"); r.code != 127 {
		t.Errorf("exec -d of a missing program: exit %d, want 127; %q", r.code, r.stderr)
	}
}

// TestRPCStoppedRecordsBounded: sandboxes made and closed through airlock
// rpc leave the records of the last few only, while other kinds stay
// until rm.
func TestRPCStoppedRecordsBounded(t *testing.T) {
	t.Parallel()
	h := newCLIHome(t)
	detached := strings.TrimSpace(h.must(nil, "run", "-d", "--", "true"))
	h.must(nil, "wait", detached)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rpcCmd, in, out := h.startRPC(ctx)
	defer func() { in.Close(); rpcCmd.Wait() }()
	dec := json.NewDecoder(out)
	call := func(id int, method, params string) json.RawMessage {
		t.Helper()
		fmt.Fprintf(in, `{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`+"\n", id, method, params)
		for {
			var m struct {
				ID     int             `json:"id"`
				Result json.RawMessage `json:"result"`
				Error  any             `json:"error"`
			}
			if err := dec.Decode(&m); err != nil {
				t.Fatalf("%s over rpc: %v", method, err)
			}
			if m.ID != id { // a notification
				continue
			}
			if m.Error != nil {
				t.Fatalf("%s over rpc: %v", method, m.Error)
			}
			return m.Result
		}
	}
	var made []string
	for i := range lifecycle.KeptStoppedRPC + 3 {
		var c struct {
			SandboxID string `json:"sandbox_id"`
		}
		if err := json.Unmarshal(call(2*i+1, "create", "{}"), &c); err != nil || c.SandboxID == "" {
			t.Fatalf("create: %v %+v", err, c)
		}
		made = append(made, c.SandboxID)
		call(2*i+2, "close", fmt.Sprintf(`{"sandbox_id":%q}`, c.SandboxID))
	}
	recs := h.list()
	for i, id := range made {
		r, ok := recs[id]
		switch kept := i >= len(made)-lifecycle.KeptStoppedRPC; {
		case kept && (!ok || r.Status != "stopped" || r.Kind != "rpc"):
			t.Errorf("sandbox %d of %d (%s), among the last closed: %+v, listed %v", i+1, len(made), id, r, ok)
		case !kept && ok:
			t.Errorf("sandbox %d of %d (%s), closed before the last %d, is still listed: %+v", i+1, len(made), id, lifecycle.KeptStoppedRPC, r)
		}
	}
	if r, ok := recs[detached]; !ok || r.Status != "stopped" {
		t.Errorf("the stopped run -d sandbox went with the rpc ones: %+v, listed %v", r, ok)
	}
}

// TestManyRefsOneMissing: as docker's, stop, kill and rm act on every
// sandbox named that exists, say which names none, and exit 1.
func TestManyRefsOneMissing(t *testing.T) {
	t.Parallel()
	h := newCLIHome(t)
	for _, c := range []struct {
		args  []string
		after string // the status of the existing sandbox after
	}{
		{[]string{"stop", "-t", "1"}, "stopped"},
		{[]string{"kill"}, "stopped"},
		{[]string{"rm", "-f"}, ""},
	} {
		id := strings.TrimSpace(h.must(nil, "run", "-d", "--", "sleep", "300"))
		h.waitStatus(id, "running", 10*time.Second)
		r := h.run(nil, append(slices.Clone(c.args), "nobody", id)...)
		if r.code != 1 || !strings.Contains(r.stderr, `no sandbox matches "nobody"`) || !strings.Contains(r.stdout, id) {
			t.Errorf("%s nobody %s: exit %d, stdout %q, stderr %q", c.args[0], id, r.code, r.stdout, r.stderr)
		}
		rec, ok := h.list()[id]
		switch {
		case c.after == "" && ok:
			t.Errorf("%s: %s is still listed: %+v", c.args[0], id, rec)
		case c.after != "" && (!ok || rec.Status != c.after):
			t.Errorf("%s: %s is %+v, want %s", c.args[0], id, rec, c.after)
		}
	}
}

// pause and unpause, as docker's: a paused sandbox's main command stops
// where it is (its log does not grow), exec says the sandbox is paused,
// ps shows it paused, unpause lets it go on, and stop of a paused
// sandbox still gives its main command SIGTERM.
func TestPauseUnpause(t *testing.T) {
	t.Parallel()
	h := newCLIHome(t)
	id := strings.TrimSpace(h.must(nil, "run", "-d", "--name", "ticker", "--", "sh", "-c",
		`trap "echo got TERM; exit 3" TERM; i=0; while :; do i=$((i+1)); echo "tick $i"; sleep 0.05; done`))
	h.waitLogs("ticker", "tick 2\n")
	if out := h.must(nil, "pause", "ticker"); out != id+"\n" {
		t.Errorf("pause: %q", out)
	}
	if out := h.must(nil, "ps", "--filter", "status=paused", "--format", "{{.id}} {{.paused}}"); out != id+" true\n" {
		t.Errorf("ps --filter status=paused: %q", out)
	}
	if out := h.must(nil, "ps", "-q", "--filter", "status=running"); strings.Contains(out, id) {
		t.Errorf("ps --filter status=running lists the paused sandbox: %q", out)
	}
	if table := h.must(nil, "ps"); !strings.Contains(table, "running (paused)") {
		t.Errorf("ps:\n%s", table)
	}
	before := h.must(nil, "logs", "ticker")
	time.Sleep(500 * time.Millisecond)
	if after := h.must(nil, "logs", "ticker"); after != before {
		t.Errorf("the log of a paused sandbox grew: %q, then %q", before, after)
	}
	if r := h.run(nil, "exec", "ticker", "--", "true"); r.code == 0 || !strings.Contains(r.stderr, "paused: unpause it first (airlock unpause ID)") {
		t.Errorf("exec in a paused sandbox: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := h.run(nil, "pause", "ticker"); r.code != 1 || !strings.Contains(r.stderr, "paused already") {
		t.Errorf("pause of a paused sandbox: exit %d, stderr %q", r.code, r.stderr)
	}
	if out := h.must(nil, "unpause", "--json", "ticker"); !strings.Contains(out, `"unpaused":[{"id":"`+id+`"}]`) {
		t.Errorf("unpause --json: %q", out)
	}
	if r := h.run(nil, "unpause", "ticker"); r.code != 1 || !strings.Contains(r.stderr, "not paused") {
		t.Errorf("unpause of a running sandbox: exit %d, stderr %q", r.code, r.stderr)
	}
	n := strings.Count(h.must(nil, "logs", "ticker"), "tick")
	h.waitLogs("ticker", fmt.Sprintf("tick %d\n", n+2))
	if out := h.must(nil, "exec", "ticker", "--", "echo", "hi"); out != "hi\n" {
		t.Errorf("exec after unpause: %q", out)
	}
	h.must(nil, "pause", "ticker")
	h.must(nil, "stop", "ticker")
	if out := h.must(nil, "wait", "ticker"); out != "3\n" {
		t.Errorf("wait after stop of a paused sandbox whose command exits 3 on SIGTERM: %q", out)
	}
	if r := h.list()[id]; r.Status != "stopped" {
		t.Errorf("after stop: %+v", r)
	}
	if r := h.run(nil, "pause", "ticker"); r.code != 1 || !strings.Contains(r.stderr, "not running") {
		t.Errorf("pause of a stopped sandbox: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestTop: top lists a sandbox's processes as ps inside it would, in a
// table or as JSON, and says why it cannot for a paused or stopped one.
func TestTop(t *testing.T) {
	t.Parallel()
	h := newCLIHome(t)
	id := strings.TrimSpace(h.must(nil, "run", "-d", "--name", "busy", "--", "sh", "-c", "sleep 1000 & echo started; wait"))
	h.waitLogs("busy", "started\n")
	var res struct {
		Processes []struct {
			PID     int      `json:"pid"`
			PPID    int      `json:"ppid"`
			State   string   `json:"state"`
			Command []string `json:"command"`
		} `json:"processes"`
	}
	// Until the shell's child has become sleep.
	for deadline := time.Now().Add(30 * time.Second); ; {
		out := h.must(nil, "top", "--json", "busy")
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(out, `["sleep","1000"]`) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	pids := map[int][]string{}
	for _, p := range res.Processes {
		pids[p.PID] = p.Command
	}
	found := false
	for _, p := range res.Processes {
		if slices.Equal(p.Command, []string{"sleep", "1000"}) {
			found = true
			if parent := pids[p.PPID]; len(parent) < 3 || parent[0] != "sh" || parent[2] != "sleep 1000 & echo started; wait" {
				t.Errorf("sleep's parent: %q", parent)
			}
		}
	}
	if !found {
		t.Errorf("top --json: %+v", res)
	}
	if table := h.must(nil, "top", id[:8]); !strings.HasPrefix(table, "PID") || !strings.Contains(table, "sleep 1000\n") || !strings.Contains(table, "sh -c 'sleep 1000 & echo started; wait'") {
		t.Errorf("top:\n%s", table)
	}
	// A command line set inside to hold terminal escapes is shown
	// escaped.
	h.must(nil, "exec", "-d", "busy", "--", "python3", "-c", `import os; os.execvp("sleep", ["\x1b]0;pwned\x07", "999"])`)
	for deadline := time.Now().Add(30 * time.Second); ; {
		table := h.must(nil, "top", "busy")
		if strings.ContainsAny(table, "\x1b\x07") {
			t.Fatalf("top printed a raw escape: %q", table)
		}
		if strings.Contains(table, "pwned") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("top never listed the command named with escapes:\n%s", table)
		}
		time.Sleep(50 * time.Millisecond)
	}
	h.must(nil, "pause", "busy")
	if r := h.run(nil, "top", "busy"); r.code == 0 || !strings.Contains(r.stderr, "paused") {
		t.Errorf("top of a paused sandbox: exit %d, stderr %q", r.code, r.stderr)
	}
	h.must(nil, "kill", "busy")
	if r := h.run(nil, "top", "busy"); r.code == 0 || !strings.Contains(r.stderr, "not running") {
		t.Errorf("top of a stopped sandbox: exit %d, stderr %q", r.code, r.stderr)
	}
}
