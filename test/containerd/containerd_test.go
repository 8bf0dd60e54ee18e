//go:build linux

package containerd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/ctrshim"
	"github.com/airlock-sandbox/airlock/internal/testbin"
)

// testImage is the image the tests import: busybox's applets.
const testImage = "airlock.test/busybox:latest"

// daemon is a containerd of the test's own.
type daemon struct {
	*testbin.Containerd
	t *testing.T
	// eventLog is the shim's node event log.
	eventLog string
}

// startContainerd starts Debian's containerd on a private socket, root
// and state directory, with the shim first on its PATH and a node
// configuration of the test's, and imports the test image. It stops
// when the test ends.
func startContainerd(t *testing.T) *daemon {
	t.Helper()
	return startContainerdCRI(t, nil)
}

// startContainerdCRI is startContainerd with the CRI plugin on, as cri
// configures it given containerd's folder, when cri is not nil.
func startContainerdCRI(t *testing.T, cri func(dir string) string) *daemon {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("containerd runs as root")
	}
	dir := t.TempDir()
	d := &daemon{t: t, eventLog: filepath.Join(dir, "events.jsonl")}
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte(nodeSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	shimConfig := fmt.Sprintf(`{"event_log": %q, "secrets": {"api": {"file": %q, "hosts": ["api.example.com"]}}}`, d.eventLog, secret)
	if err := os.WriteFile(filepath.Join(dir, "shim.json"), []byte(shimConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	criConfig := ""
	if cri != nil {
		criConfig = cri(dir)
	}
	c, err := testbin.StartContainerdCRI(dir, criConfig,
		"PATH="+bins.dir+":"+os.Getenv("PATH"),
		"AIRLOCK_AGENT="+bins.agent,
		"AIRLOCK_HOME="+filepath.Join(dir, "airlock"),
		"AIRLOCK_SHIM_CONFIG="+filepath.Join(dir, "shim.json"),
	)
	if err != nil {
		t.Fatal(err)
	}
	d.Containerd = c
	t.Cleanup(func() {
		c.Stop()
		if t.Failed() {
			t.Logf("containerd's log:\n%s", tail(c.Log(), 8000))
			if b, err := os.ReadFile(d.eventLog); err == nil {
				t.Logf("the shim's event log:\n%s", tail(string(b), 8000))
			}
		}
	})
	if err := c.ImportBusybox(dir, testImage, v1.Config{Cmd: []string{"sh"}}); err != nil {
		t.Fatal(err)
	}
	return d
}

// nodeSecret is the value of the node's secret "api".
const nodeSecret = "sk-node-secret-4f9a"

// ctrErr runs ctr against the daemon.
func (d *daemon) ctrErr(args ...string) (string, error) {
	return d.Ctr(context.Background(), args...)
}

// ctr runs ctr and fails the test unless it succeeds.
func (d *daemon) ctr(args ...string) string {
	d.t.Helper()
	out, err := d.ctrErr(args...)
	if err != nil {
		d.t.Fatalf("ctr %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "...\n" + s[len(s)-n:]
}

// TestRun runs a container to its end, at each isolation level that
// works here (airlock.dev/isolation), and at the process level from each
// snapshotter's root: its output and exit code come back through
// containerd, the node's event log has the sandbox's events, and nothing
// is left behind. From either snapshotter's root, the native one's (a
// plain directory) and overlayfs's (an overlay mount, whose layers are
// idmapped one by one), the sandbox maps a range of ids of its own.
func TestRun(t *testing.T) {
	d := startContainerd(t)
	type run struct {
		level airlock.Isolation
		snap  string
	}
	runs := []run{{airlock.IsolationProcess, "native"}, {airlock.IsolationProcess, "overlayfs"}, {airlock.IsolationGVisor, "native"}, {airlock.IsolationVM, "native"}}
	for i, r := range runs {
		t.Run(string(r.level)+"/"+r.snap, func(t *testing.T) {
			if why := unavailable(r.level); why != "" {
				t.Skip(why)
			}
			id := "run" + strconv.Itoa(i)
			out, err := d.ctrErr("run", "--rm", "--snapshotter", r.snap, "--runtime", ctrshim.RuntimeName,
				"--annotation", ctrshim.AnnotationIsolation+"="+string(r.level), testImage, id,
				"sh", "-c", "echo hello from $(hostname); cat /proc/self/uid_map; exit 7")
			if code := exitCode(err); code != 7 {
				t.Fatalf("ctr run: exit %d (%v), want 7\n%s", code, err, out)
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if len(lines) != 2 || lines[0] != "hello from "+ctrshim.SandboxID(id) {
				t.Fatalf("ctr run printed %q", out)
			}
			uidMap := strings.Fields(lines[1])
			if r.level == airlock.IsolationProcess && (len(uidMap) != 3 || uidMap[1] == "0" || uidMap[2] != "65536") {
				t.Errorf("the sandbox's uid map is %q, want 65536 ids of its own", lines[1])
			}
			d.checkNothingLeft(t, id)
			events := d.events(id)
			for _, want := range []string{`"state":"started"`, `"type":"exec"`, `"state":"stopped"`} {
				if !strings.Contains(events, want) {
					t.Errorf("the event log has no %s for %s:\n%s", want, id, events)
				}
			}
			if r.level == airlock.IsolationProcess && strings.Contains(events, `"type":"confinement_note"`) {
				t.Errorf("the sandbox ran with less confinement than the process level's:\n%s", events)
			}
		})
	}
}

// unavailable says why sandboxes of level lv cannot run here, or "".
func unavailable(lv airlock.Isolation) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := airlock.Create(ctx, airlock.Config{Isolation: lv})
	if err != nil {
		return err.Error()
	}
	sb.Close()
	return ""
}

// events are the lines of the node's event log about task id.
func (d *daemon) events(id string) string {
	b, _ := os.ReadFile(d.eventLog)
	var out []string
	for line := range strings.SplitSeq(string(b), "\n") {
		if strings.Contains(line, `"task":"`+id+`"`) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return -1
}

// TestTaskLifecycle drives a detached task as a user of ctr does: an
// exec's output and exit code, ps, a signal the process handles, kill,
// delete; then nothing of it is left.
func TestTaskLifecycle(t *testing.T) {
	d := startContainerd(t)
	d.ctr("run", "-d", "--runtime", ctrshim.RuntimeName, testImage, "t2", "sh", "-c", "trap 'echo got TERM > /tmp/term; exit 42' TERM; while :; do sleep 1; done")

	out, err := d.ctrErr("task", "exec", "--exec-id", "e1", "t2", "sh", "-c", "echo in exec; id -u; exit 3")
	if code := exitCode(err); code != 3 {
		t.Fatalf("ctr task exec: exit %d (%v), want 3\n%s", code, err, out)
	}
	if out != "in exec\n0\n" {
		t.Errorf("ctr task exec printed %q, want %q", out, "in exec\n0\n")
	}
	if ps := d.ctr("task", "ps", "t2"); len(strings.Fields(ps)) < 3 {
		t.Errorf("ctr task ps lists no process:\n%s", ps)
	}
	if ls := d.ctr("task", "ls"); !strings.Contains(ls, "t2") || !strings.Contains(ls, "RUNNING") {
		t.Errorf("ctr task ls:\n%s", ls)
	}

	// SIGTERM reaches the process, which handles it.
	d.ctr("task", "kill", "-s", "SIGTERM", "t2")
	if !testbin.WaitFor(30*time.Second, func() bool { return strings.Contains(d.ctr("task", "ls"), "STOPPED") }) {
		t.Fatalf("the task did not stop on SIGTERM:\n%s", d.ctr("task", "ls"))
	}
	del := d.ctr("task", "delete", "t2")
	if !strings.Contains(del, "42") {
		t.Errorf("ctr task delete: %q, want the exit status 42", del)
	}
	d.ctr("container", "rm", "t2")
	d.checkNothingLeft(t, "t2")
}

// TestKill kills a task that ignores SIGTERM.
func TestKill(t *testing.T) {
	d := startContainerd(t)
	d.ctr("run", "-d", "--runtime", ctrshim.RuntimeName, testImage, "t3", "sh", "-c", "trap '' TERM; sleep 300 & wait")
	d.ctr("task", "kill", "-s", "SIGKILL", "t3")
	if !testbin.WaitFor(30*time.Second, func() bool { return strings.Contains(d.ctr("task", "ls"), "STOPPED") }) {
		t.Fatalf("the task did not stop on SIGKILL:\n%s", d.ctr("task", "ls"))
	}
	if del := d.ctr("task", "delete", "t3"); !strings.Contains(del, "137") {
		t.Errorf("ctr task delete: %q, want the exit status 137", del)
	}
	d.ctr("container", "rm", "t3")
	d.checkNothingLeft(t, "t3")
}

// TestMemoryLimit holds a container to the spec's memory limit: a
// process that takes more is killed.
func TestMemoryLimit(t *testing.T) {
	d := startContainerd(t)
	out, err := d.ctrErr("run", "--rm", "--runtime", ctrshim.RuntimeName, "--memory-limit", strconv.Itoa(64<<20), testImage, "t4",
		"sh", "-c", "x=$(busybox head -c 200000000 /dev/zero | busybox tr '\\0' a); echo survived ${#x}")
	if code := exitCode(err); code == 0 || strings.Contains(out, "survived") {
		t.Fatalf("200 MB in a 64 MiB container: exit %d: %s", code, out)
	}
	// The same in a container without the limit lives.
	out = d.ctr("run", "--rm", "--runtime", ctrshim.RuntimeName, testImage, "t5",
		"sh", "-c", "x=$(busybox head -c 100000000 /dev/zero | busybox tr '\\0' a); echo survived ${#x}")
	if !strings.Contains(out, "survived 100000000") {
		t.Errorf("100 MB without a limit: %q", out)
	}
}

// TestPidsLimit runs a container whose spec limits its pids (ctr run
// --config, with the spec ctr makes by default and a root of the host's
// busybox): forks past the limit fail, and the container's shell says
// so.
func TestPidsLimit(t *testing.T) {
	d := startContainerd(t)
	out := d.ctr("oci", "spec")
	var spec map[string]any
	if err := json.Unmarshal([]byte(out), &spec); err != nil {
		t.Fatalf("ctr oci spec: %v\n%s", err, out)
	}
	process := spec["process"].(map[string]any)
	process["args"] = []string{"sh", "-c", "i=0; while [ $i -lt 80 ]; do sleep 60 & i=$((i+1)); done; echo started"}
	process["env"] = []string{"PATH=/bin"}
	process["terminal"] = false
	linux := spec["linux"].(map[string]any)
	linux["resources"] = map[string]any{"pids": map[string]any{"limit": 20}}
	// With --config, ctr takes no image: the root is a directory of
	// the host's busybox.
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "/bin/busybox", filepath.Join(root, "bin")).CombinedOutput(); err != nil {
		t.Skipf("no host busybox for the root: %v %s", err, out)
	}
	for _, a := range []string{"sh", "sleep"} {
		if err := os.Symlink("busybox", filepath.Join(root, "bin", a)); err != nil {
			t.Fatal(err)
		}
	}
	spec["root"] = map[string]any{"path": root, "readonly": false}
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "spec.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = d.ctrErr("run", "--rm", "--config", path, "--runtime", ctrshim.RuntimeName, "t10")
	if !strings.Contains(out, "can't fork") && !strings.Contains(out, "Resource temporarily unavailable") {
		t.Errorf("80 processes in a container of 20 pids: %v\n%s", err, out)
	}
	d.checkNothingLeft(t, "t10")
}

// TestBindMount gives a container a host directory, read-write and
// read-only, and a host file (as a Kubernetes config map's key or a
// hostPath file arrives), as ctr run --mount does.
func TestBindMount(t *testing.T) {
	d := startContainerd(t)
	rw, ro := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(ro, "given"), []byte("from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{rw, ro} {
		os.Chmod(dir, 0o777)
	}
	out, err := d.ctrErr("run", "--rm", "--runtime", ctrshim.RuntimeName,
		"--mount", "type=bind,src="+rw+",dst=/rw,options=rbind:rw",
		"--mount", "type=bind,src="+ro+",dst=/ro,options=rbind:ro",
		"--mount", "type=bind,src="+filepath.Join(ro, "given")+",dst=/etc/app/given.conf,options=rbind:ro",
		testImage, "t6", "sh", "-c", "cat /ro/given; echo written > /rw/out; echo file: $(cat /etc/app/given.conf); echo x > /ro/no && echo wrote-ro")
	if err == nil || strings.Contains(out, "wrote-ro") {
		t.Errorf("a write to the read-only mount succeeded: %v\n%s", err, out)
	}
	if !strings.Contains(out, "from the host") {
		t.Errorf("the read-only mount's file: %q", out)
	}
	if !strings.Contains(out, "file: from the host") {
		t.Errorf("the bound file: %q", out)
	}
	if b, err := os.ReadFile(filepath.Join(rw, "out")); err != nil || string(b) != "written\n" {
		t.Errorf("the read-write mount: %q, %v", b, err)
	}
}

// checkNothingLeft says what task id left behind: a running shim, a
// mount of its root, an airlock sandbox's cgroup.
func (d *daemon) checkNothingLeft(t *testing.T, id string) {
	t.Helper()
	sb := ctrshim.SandboxID(id)
	if !testbin.WaitFor(10*time.Second, func() bool { return len(leftBehind(id, sb)) == 0 }) {
		t.Errorf("task %s left behind: %v", id, leftBehind(id, sb))
	}
}

func leftBehind(id, sb string) []string {
	var left []string
	procs, _ := testbin.HostProcs()
	for pid, cmdline := range procs {
		if strings.Contains(cmdline, "containerd-shim-airlock-v2") && strings.Contains(cmdline, "-id\x00"+id+"\x00") {
			left = append(left, fmt.Sprintf("shim process %d", pid))
		}
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if strings.Contains(line, "/"+id+"/rootfs") {
				left = append(left, "mount: "+line)
			}
		}
	}
	for _, root := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/memory", "/sys/fs/cgroup/pids", "/sys/fs/cgroup/unified"} {
		matches, _ := filepath.Glob(filepath.Join(root, "airlock*", "*"+sb+"*"))
		for _, m := range matches {
			left = append(left, "cgroup "+m)
		}
	}
	return left
}

// TestTTY runs a container on a terminal, as ctr run -t does from one:
// the process sees a terminal of the client's size.
func TestTTY(t *testing.T) {
	d := startContainerd(t)
	cmd := exec.Command("ctr", "--address", d.Address, "run", "-t", "--rm", "--runtime", ctrshim.RuntimeName, testImage, "t7",
		"sh", "-c", `test -t 0 && test -t 1 && echo on-a-tty
# ctr resizes the terminal once the task has started (as it does with
# runc): the size is the client's by then, not always at the start.
for i in $(seq 100); do s=$(busybox stty size); [ "$s" = "33 101" ] && break; sleep 0.1; done; echo "$s"`)
	cmd.Env = d.Env
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 33, Cols: 101})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out bytes.Buffer
	copied := make(chan struct{})
	go func() { io.Copy(&out, f); close(copied) }()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		t.Fatalf("ctr run -t did not end; it printed %q", out.String())
	}
	select {
	case <-copied:
	case <-time.After(5 * time.Second):
	}
	if err != nil {
		t.Fatalf("ctr run -t: %v\n%s", err, out.String())
	}
	if s := out.String(); !strings.Contains(s, "on-a-tty") || !strings.Contains(s, "33 101") {
		t.Errorf("ctr run -t printed %q, want on-a-tty and the size 33 101", s)
	}
}

// TestShimKilled kills the shim of a running task with SIGKILL:
// containerd sees the task end and cleans up through the shim's delete,
// and nothing of the sandbox stays: no process, mount or cgroup.
func TestShimKilled(t *testing.T) {
	d := startContainerd(t)
	d.ctr("run", "-d", "--runtime", ctrshim.RuntimeName, testImage, "t8", "sleep", "300")
	procs, shimPid := shimOf(t, "t8")
	// What is left behind is seen while it runs: the check can fail.
	sb := ctrshim.SandboxID("t8")
	if running := leftBehind("t8", sb); !slices.ContainsFunc(running, func(s string) bool { return strings.Contains(s, "cgroup") }) ||
		!slices.ContainsFunc(running, func(s string) bool { return strings.HasPrefix(s, "mount") }) {
		t.Fatalf("a running task's sandbox shows no cgroup and no mount of its root: %v", running)
	}
	agents := childrenOf(procs, shimPid)
	if len(agents) == 0 {
		t.Fatalf("the shim %d has no child: where does the sandbox run?", shimPid)
	}
	if err := syscall.Kill(shimPid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !testbin.WaitFor(time.Minute, func() bool {
		out, _ := d.ctrErr("task", "ls")
		return !strings.Contains(out, "RUNNING")
	}) {
		t.Fatalf("containerd still lists the task as running:\n%s", d.ctr("task", "ls"))
	}
	if !testbin.WaitFor(30*time.Second, func() bool {
		for _, pid := range agents {
			if testbin.Alive(pid) {
				return false
			}
		}
		return true
	}) {
		t.Errorf("the sandbox's processes %v outlived their shim", agents)
	}
	d.ctrErr("task", "delete", "t8")
	d.ctr("container", "rm", "t8")
	d.checkNothingLeft(t, "t8")
}

// childrenOf lists the descendants of pid among procs.
// TestPodShimKilled kills a pod's shim with SIGKILL: containerd sees
// every task of the pod end, and cleans up after each of them through
// the shim's delete; nothing of the pod is left.
func TestPodShimKilled(t *testing.T) {
	d := startContainerd(t)
	d.ctr("run", "-d", "--runtime", ctrshim.RuntimeName, "--annotation", "io.kubernetes.cri.container-type=sandbox", testImage, "kpod", "sleep", "300")
	d.ctr("run", "-d", "--runtime", ctrshim.RuntimeName, "--annotation", "io.kubernetes.cri.container-type=container",
		"--annotation", "io.kubernetes.cri.sandbox-id=kpod", testImage, "kapp", "sleep", "300")
	procs, shimPid := shimOf(t, "kpod")
	agents := childrenOf(procs, shimPid)
	if err := syscall.Kill(shimPid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !testbin.WaitFor(time.Minute, func() bool {
		out, _ := d.ctrErr("task", "ls")
		return !strings.Contains(out, "RUNNING")
	}) {
		t.Fatalf("containerd still lists the pod's tasks as running:\n%s", d.ctr("task", "ls"))
	}
	if !testbin.WaitFor(30*time.Second, func() bool { return !slices.ContainsFunc(agents, testbin.Alive) }) {
		t.Errorf("the pod's sandbox processes %v outlived their shim", agents)
	}
	for _, id := range []string{"kapp", "kpod"} {
		d.ctrErr("task", "delete", id)
		d.ctr("container", "rm", id)
		d.checkNothingLeft(t, id)
	}
}

// shimOf finds the shim process that serves task id, and returns it
// with the host's processes.
func shimOf(t *testing.T, id string) (map[int]string, int) {
	t.Helper()
	procs, err := testbin.HostProcs()
	if err != nil {
		t.Fatal(err)
	}
	for pid, cmdline := range procs {
		if strings.Contains(cmdline, "containerd-shim-airlock-v2") && strings.Contains(cmdline, "-id\x00"+id+"\x00") {
			return procs, pid
		}
	}
	t.Fatalf("no shim process for %s", id)
	return nil, 0
}

func childrenOf(procs map[int]string, pid int) []int {
	var out []int
	for p := range procs {
		for q := p; q > 1; {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", q))
			if err != nil {
				break
			}
			// The parent is the second field after the command's ")".
			fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
			if len(fields) < 2 {
				break
			}
			q, _ = strconv.Atoi(fields[1])
			if q == pid {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// TestContainerdRestarted kills containerd under a running task, as a
// crash would, and starts it again: it finds the task through its shim,
// which still serves it (exec, kill, delete). A shim that died while
// containerd was down is cleaned up when containerd comes back: its
// sandbox, root mount and cgroups are gone.
func TestContainerdRestarted(t *testing.T) {
	d := startContainerd(t)
	d.ctr("run", "-d", "--runtime", ctrshim.RuntimeName, testImage, "t11", "sleep", "300")
	d.ctr("run", "-d", "--runtime", ctrshim.RuntimeName, testImage, "t12", "sleep", "300")
	procs, shim12 := shimOf(t, "t12")
	agents := childrenOf(procs, shim12)

	d.Stop()
	if err := syscall.Kill(shim12, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := d.Restart(); err != nil {
		t.Fatal(err)
	}

	// t11's shim lived through it and still serves its task.
	if !testbin.WaitFor(30*time.Second, func() bool {
		out, _ := d.ctrErr("task", "ls")
		return strings.Contains(out, "t11") && strings.Contains(out, "RUNNING")
	}) {
		t.Fatalf("after a restart, containerd does not list t11 as running:\n%s", d.ctr("task", "ls"))
	}
	if out := d.ctr("task", "exec", "--exec-id", "e1", "t11", "echo", "still here"); out != "still here\n" {
		t.Errorf("an exec after the restart printed %q", out)
	}
	d.ctr("task", "kill", "-s", "SIGKILL", "t11")
	if !testbin.WaitFor(30*time.Second, func() bool { return strings.Contains(d.ctr("task", "ls"), "STOPPED") }) {
		t.Fatalf("t11 did not stop on SIGKILL after the restart:\n%s", d.ctr("task", "ls"))
	}
	if del := d.ctr("task", "delete", "t11"); !strings.Contains(del, "137") {
		t.Errorf("ctr task delete t11: %q, want the exit status 137", del)
	}
	d.ctr("container", "rm", "t11")
	d.checkNothingLeft(t, "t11")

	// t12's shim died while containerd was down: containerd cleaned up
	// after it, through the shim binary's delete.
	if ls := d.ctr("task", "ls"); strings.Contains(ls, "t12") {
		t.Errorf("containerd lists t12, whose shim is dead:\n%s", ls)
	}
	if !testbin.WaitFor(30*time.Second, func() bool {
		return !slices.ContainsFunc(agents, testbin.Alive)
	}) {
		t.Errorf("t12's sandbox processes %v outlived its shim", agents)
	}
	d.ctr("container", "rm", "t12")
	d.checkNothingLeft(t, "t12")
}

// TestSecretsFromTheNode gives a container the node's secret by name: the
// process sees a placeholder, never the value.
func TestSecretsFromTheNode(t *testing.T) {
	d := startContainerd(t)
	out := d.ctr("run", "--rm", "--runtime", ctrshim.RuntimeName, "--annotation", ctrshim.AnnotationSecrets+"=API_KEY=api",
		testImage, "s1", "sh", "-c", "echo key=$API_KEY")
	if strings.Contains(out, nodeSecret) || strings.TrimSpace(out) == "key=" || !strings.HasPrefix(out, "key=") {
		t.Errorf("the container sees %q: want a placeholder, not the value nor nothing", out)
	}
	// A secret the node does not have, and one given in the spec, are
	// refused before anything runs.
	for _, annotation := range []string{
		ctrshim.AnnotationSecrets + "=API_KEY=other",
		ctrshim.AnnotationNetwork + `={"secrets": {"K": {"value": "v", "hosts": ["evil.example"]}}}`,
	} {
		out, err := d.ctrErr("run", "--rm", "--runtime", ctrshim.RuntimeName, "--annotation", annotation, testImage, "s2", "sh", "-c", "echo ran")
		if err == nil || strings.Contains(out, "ran\n") {
			t.Errorf("%s: the container ran: %v\n%s", annotation, err, out)
		}
		d.ctrErr("container", "rm", "s2")
	}
}

// TestPod runs a Kubernetes pod as the CRI plugin lays it out (the
// sandbox container first, then app containers that name it), through
// ctr with CRI's annotations: the pod is one sandbox served by one shim;
// each app container runs on its own root inside it, sees a volume the
// others see, and not their processes; app containers end and are
// deleted on their own, and the pod's sandbox container takes all with
// it.
func TestPod(t *testing.T) {
	d := startContainerd(t)
	for _, lv := range []airlock.Isolation{airlock.IsolationProcess, airlock.IsolationGVisor, airlock.IsolationVM} {
		t.Run(string(lv), func(t *testing.T) {
			if why := unavailable(lv); why != "" {
				t.Skip(why)
			}
			d.pod(t, lv)
		})
	}
}

func (d *daemon) pod(t *testing.T, lv airlock.Isolation) {
	d = &daemon{Containerd: d.Containerd, t: t, eventLog: d.eventLog}
	pod1, app1, app2 := "pod-"+string(lv), "app1-"+string(lv), "app2-"+string(lv)
	vol := t.TempDir()
	pod := []string{"--runtime", ctrshim.RuntimeName, "--annotation", "io.kubernetes.cri.container-type=container", "--annotation", "io.kubernetes.cri.sandbox-id=" + pod1,
		"--mount", "type=bind,src=" + vol + ",dst=/shared,options=rbind:rw"}
	d.ctr("run", "-d", "--runtime", ctrshim.RuntimeName, "--annotation", "io.kubernetes.cri.container-type=sandbox",
		"--annotation", ctrshim.AnnotationIsolation+"="+string(lv), testImage, pod1, "sleep", "300")
	d.ctr(append(append([]string{"run", "-d"}, pod...), testImage, app1, "sh", "-c", "echo from app1 > /shared/note; exec sleep 300")...)
	if !testbin.WaitFor(30*time.Second, func() bool { _, err := os.Stat(filepath.Join(vol, "note")); return err == nil }) {
		t.Fatalf("app1 wrote nothing to its volume:\n%s", d.ctr("task", "ls"))
	}
	out, err := d.ctrErr(append(append([]string{"run", "--rm"}, pod...), testImage, app2,
		"sh", "-c", "cat /shared/note; hostname; ps -o comm | grep -c sleep; test -e /run/airlock-pod || echo own-root; exit 5")...)
	if code := exitCode(err); code != 5 {
		t.Fatalf("app2: exit %d (%v), want 5\n%s", code, err, out)
	}
	if want := "from app1\n" + ctrshim.SandboxID(pod1) + "\n0\nown-root\n"; out != want {
		t.Errorf("app2 printed %q, want %q", out, want)
	}
	// One shim serves the pod.
	procs, _ := testbin.HostProcs()
	podShims, appShims := 0, 0
	for _, cmdline := range procs {
		if !strings.Contains(cmdline, "containerd-shim-airlock-v2") || strings.Contains(cmdline, "\x00start\x00") {
			continue
		}
		switch {
		case strings.Contains(cmdline, "-id\x00"+pod1+"\x00"):
			podShims++
		case strings.Contains(cmdline, "-id\x00"+app1+"\x00"), strings.Contains(cmdline, "-id\x00"+app2+"\x00"):
			appShims++
		}
	}
	if podShims != 1 || appShims != 0 {
		t.Errorf("%d shim processes serve the pod and %d its app containers, want 1 and 0", podShims, appShims)
	}
	if got := d.ctr("task", "exec", "--exec-id", "e1", app1, "cat", "/shared/note"); got != "from app1\n" {
		t.Errorf("an exec in app1: %q", got)
	}
	d.ctr("task", "kill", "-s", "SIGKILL", app1)
	if !testbin.WaitFor(30*time.Second, func() bool {
		out, _ := d.ctrErr("task", "ls")
		for line := range strings.Lines(out) {
			if strings.HasPrefix(line, app1+" ") {
				return strings.Contains(line, "STOPPED")
			}
		}
		return false
	}) {
		t.Fatalf("app1 did not stop:\n%s", d.ctr("task", "ls"))
	}
	d.ctr("task", "delete", app1)
	d.ctr("container", "rm", app1)
	if ls := d.ctr("task", "ls"); !strings.Contains(ls, pod1) || !strings.Contains(ls, "RUNNING") {
		t.Errorf("the pod's sandbox container after app1 left:\n%s", ls)
	}
	d.ctr("task", "kill", "-s", "SIGKILL", pod1)
	if !testbin.WaitFor(30*time.Second, func() bool {
		out, _ := d.ctrErr("task", "ls")
		return !strings.Contains(out, pod1) || strings.Contains(out, "STOPPED")
	}) {
		t.Fatalf("the pod did not stop:\n%s", d.ctr("task", "ls"))
	}
	d.ctr("task", "delete", pod1)
	d.ctr("container", "rm", pod1)
	for _, id := range []string{pod1, app1, app2} {
		d.checkNothingLeft(t, id)
	}
}

// TestPause pauses and resumes a task (ctr task pause, resume): paused,
// it is PAUSED and its processes stand still; resumed, they go on; a
// kill of a paused task reaches it.
func TestPause(t *testing.T) {
	d := startContainerd(t)
	d.ctr("run", "-d", "--runtime", ctrshim.RuntimeName, testImage, "t9", "sh", "-c", "i=0; while :; do i=$((i+1)); echo $i > /tmp/n; sleep 0.05; done")
	count := func() string {
		out, err := d.ctrErr("task", "exec", "--exec-id", fmt.Sprintf("c%d", time.Now().UnixNano()), "t9", "cat", "/tmp/n")
		if err != nil {
			t.Fatalf("ctr task exec: %v\n%s", err, out)
		}
		return strings.TrimSpace(out)
	}
	if !testbin.WaitFor(30*time.Second, func() bool { return count() != "" }) {
		t.Fatal("the task never counted")
	}
	d.ctr("task", "pause", "t9")
	if ls := d.ctr("task", "ls"); !strings.Contains(ls, "PAUSED") {
		t.Errorf("ctr task ls of a paused task:\n%s", ls)
	}
	if out, err := d.ctrErr("task", "exec", "--exec-id", "p1", "t9", "true"); err == nil || !strings.Contains(out, "paused") {
		t.Errorf("ctr task exec in a paused task: %v\n%s", err, out)
	}
	d.ctr("task", "resume", "t9")
	if ls := d.ctr("task", "ls"); !strings.Contains(ls, "RUNNING") {
		t.Errorf("ctr task ls after resume:\n%s", ls)
	}
	first := count()
	if !testbin.WaitFor(30*time.Second, func() bool { return count() != first }) {
		t.Error("the task does not count on after resume")
	}
	d.ctr("task", "pause", "t9")
	d.ctr("task", "kill", "-s", "SIGKILL", "t9")
	if !testbin.WaitFor(30*time.Second, func() bool { return strings.Contains(d.ctr("task", "ls"), "STOPPED") }) {
		t.Fatalf("a paused task did not stop on SIGKILL:\n%s", d.ctr("task", "ls"))
	}
	d.ctr("task", "delete", "t9")
	d.ctr("container", "rm", "t9")
	d.checkNothingLeft(t, "t9")
}
