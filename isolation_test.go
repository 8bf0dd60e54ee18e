package airlock_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
)

// randHex returns n random bytes in hex.
func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// sleepMarker returns a unique argument for sleep(1) (a fractional number
// of seconds), so that one process can be told apart from every other by
// its command line.
func sleepMarker(secs int) string {
	var n [6]byte
	_, _ = rand.Read(n[:])
	v := uint64(0)
	for _, b := range n {
		v = v<<8 | uint64(b)
	}
	return fmt.Sprintf("%d.%015d", secs, v%1e15)
}

// pythonErrno runs a python3 program that prints "<result> <errno>" and
// returns both numbers.
func pythonErrno(t *testing.T, ctx context.Context, sb *airlock.Sandbox, prog string) (int64, int) {
	t.Helper()
	res, err := sb.Run(ctx, airlock.Command{Argv: []string{"python3", "-c", prog}})
	if err != nil {
		t.Fatalf("python3: %v", err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("python3 exited %d: %s%s", res.ExitCode, res.Stdout, res.Stderr)
	}
	f := strings.Fields(string(res.Stdout))
	if len(f) != 2 {
		t.Fatalf("python3 printed %q, want \"<result> <errno>\"", res.Stdout)
	}
	r, err1 := strconv.ParseInt(f[0], 10, 64)
	e, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil {
		t.Fatalf("python3 printed %q, want two numbers", res.Stdout)
	}
	return r, e
}

const pyLibc = "import ctypes,os; libc=ctypes.CDLL(None, use_errno=True); "

func TestIsolationHostProcessesInvisible(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	sb := newSandbox(t, airlock.Config{})

	pids := strings.Fields(mustRun(t, ctx, sb, "cd /proc && ls -d [0-9]*"))
	if len(pids) == 0 || len(pids) > 5 {
		t.Errorf("/proc in the sandbox lists %d pids %v, want a handful (the host has %d)", len(pids), pids, len(hostProcs(t)))
	}
	for _, p := range pids {
		if p == strconv.Itoa(os.Getpid()) && os.Getpid() > 5 {
			t.Errorf("the test process's host pid %s is visible in the sandbox", p)
		}
	}
	ps := mustRun(t, ctx, sb, "ps -eo pid,args")
	lines := strings.Split(strings.TrimSpace(ps), "\n")
	if len(lines) > 6 {
		t.Errorf("ps in the sandbox shows %d lines, want only the sandbox's own processes:\n%s", len(lines), ps)
	}
	self := filepath.Base(os.Args[0])
	all := mustRun(t, ctx, sb, "cat /proc/[0-9]*/cmdline | tr '\\0' ' '")
	if strings.Contains(all, self) || strings.Contains(ps, self) {
		t.Errorf("the host test process %q is visible in the sandbox:\n%s\n%s", self, ps, all)
	}
	// Sanity: the same probe finds the sandbox's own processes.
	if !strings.Contains(all, "cat") {
		t.Errorf("cmdline probe does not even see itself: %q", all)
	}
	// The agent (outside the user processes' pid namespace) is not there
	// either: PID 1 is the spawner.
	if strings.Contains(ps, "airlock-guest\n") || strings.Count(ps, "airlock-guest") > 1 {
		t.Errorf("more than the spawner of airlock-guest is visible:\n%s", ps)
	}
}

func TestIsolationHostFilesHidden(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)

	// A host file in a directory the sandbox also has must not show up.
	secret := "airlock-secret-" + randHex(8)
	hostTmp := filepath.Join("/tmp", secret)
	if err := os.WriteFile(hostTmp, []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(hostTmp) })

	sb := newSandbox(t, airlock.Config{})
	if out := mustRun(t, ctx, sb, "ls -A /tmp /root /home /workspace"); strings.Contains(out, secret) {
		t.Errorf("a host /tmp file is visible in the sandbox:\n%s", out)
	}
	for _, dir := range []string{"/root", "/home"} {
		inside := mustRun(t, ctx, sb, "ls -A "+dir)
		if strings.TrimSpace(inside) != "" {
			t.Errorf("%s in a new sandbox is not empty: %q", dir, inside)
		}
		host, err := os.ReadDir(dir)
		if err != nil {
			continue // unprivileged: the host's /root is unreadable anyway
		}
		for _, e := range host {
			for _, name := range strings.Fields(inside) {
				if name == e.Name() {
					t.Errorf("host %s/%s is visible in the sandbox (%s lists %q)", dir, e.Name(), dir, inside)
				}
			}
		}
	}
	if _, err := os.Stat("/etc/shadow"); err == nil {
		out := mustFail(t, ctx, sb, "cat /etc/shadow")
		if strings.Contains(out, "root:") {
			t.Errorf("the host's /etc/shadow is readable in the sandbox: %q", out)
		}
	}
	// /etc/passwd is the sandbox's own, not the host's.
	passwd := mustRun(t, ctx, sb, "cat /etc/passwd")
	if strings.Contains(passwd, "airlock-test") || strings.Count(passwd, "\n") > 3 {
		t.Errorf("/etc/passwd looks like the host's:\n%s", passwd)
	}
	// Nothing of the host's runtime state.
	for _, p := range []string{"/var/run/docker.sock", "/run/systemd", "/sys/fs/cgroup", "/etc/sudoers"} {
		if res := run(t, ctx, sb, "test -e "+p); res.ExitCode == 0 {
			t.Errorf("%s exists in the sandbox", p)
		}
	}
}

func TestIsolationReadOnlySystem(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	sb := newSandbox(t, airlock.Config{})
	for _, p := range []string{"/usr/airlock-x", "/usr/bin/airlock-x", "/bin/airlock-x"} {
		out := mustFail(t, ctx, sb, "touch "+p)
		if !strings.Contains(out, "Read-only file system") {
			t.Errorf("touch %s: %q, want Read-only file system", p, out)
		}
		if _, err := os.Stat(p); err == nil {
			os.Remove(p)
			t.Errorf("%s was created on the host", p)
		}
	}
	// The writable places are writable.
	mustRun(t, ctx, sb, "touch /tmp/a /workspace/a /var/tmp/a /root/a")
}

func TestIsolationCannotMount(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	sb := newSandbox(t, airlock.Config{})
	mustFail(t, ctx, sb, "mount -t tmpfs x /mnt")
	mustFail(t, ctx, sb, "mount --bind /tmp /mnt")
	mustFail(t, ctx, sb, "unshare -r true")
	mustFail(t, ctx, sb, "unshare -m true")
	mustFail(t, ctx, sb, "unshare -U true")
	// Nothing got mounted.
	if out := mustRun(t, ctx, sb, "cat /proc/self/mountinfo"); strings.Contains(out, " /mnt ") {
		t.Errorf("/mnt got mounted:\n%s", out)
	}
	// The same mount syscall, without the mount(8) wrapper.
	r, e := pythonErrno(t, ctx, sb, pyLibc+`r=libc.mount(b"x", b"/mnt", b"tmpfs", 0, None); print(r, ctypes.get_errno())`)
	if r != -1 || e != int(syscall.EPERM) {
		t.Errorf("mount(2) = %d errno %d, want -1 EPERM", r, e)
	}
}

func TestIsolationCannotLoadModules(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	sb := newSandbox(t, airlock.Config{})
	// 313 = finit_module, 175 = init_module on x86_64.
	r, e := pythonErrno(t, ctx, sb, pyLibc+`r=libc.syscall(313, -1, b"", 0); print(r, ctypes.get_errno())`)
	if r != -1 || e != int(syscall.EPERM) {
		t.Errorf("finit_module = %d errno %d, want -1 EPERM", r, e)
	}
	r, e = pythonErrno(t, ctx, sb, pyLibc+`r=libc.syscall(175, None, 0, b""); print(r, ctypes.get_errno())`)
	if r != -1 || e != int(syscall.EPERM) {
		t.Errorf("init_module = %d errno %d, want -1 EPERM", r, e)
	}
	// 176 = delete_module.
	r, e = pythonErrno(t, ctx, sb, pyLibc+`r=libc.syscall(176, b"loop", 0); print(r, ctypes.get_errno())`)
	if r != -1 || e != int(syscall.EPERM) {
		t.Errorf("delete_module = %d errno %d, want -1 EPERM", r, e)
	}
}

func TestIsolationCannotPtraceSpawner(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	sb := newSandbox(t, airlock.Config{})
	// 101 = ptrace, 16 = PTRACE_ATTACH, 0x4206 = PTRACE_SEIZE.
	for _, req := range []int{16, 0x4206} {
		r, e := pythonErrno(t, ctx, sb, pyLibc+fmt.Sprintf(`r=libc.syscall(101, %d, 1, 0, 0); print(r, ctypes.get_errno())`, req))
		if r != -1 || e == 0 {
			t.Errorf("ptrace(%#x, 1) = %d errno %d, want failure", req, r, e)
		}
	}
	for _, f := range []string{"mem", "environ", "maps", "auxv"} {
		mustFail(t, ctx, sb, "head -c 16 /proc/1/"+f+" >/dev/null")
	}
	mustFail(t, ctx, sb, "readlink /proc/1/exe")
	mustFail(t, ctx, sb, "ls /proc/1/root/")
	// The descriptor numbers may be listed, but not where they lead.
	mustFail(t, ctx, sb, "readlink /proc/1/fd/0")
	mustFail(t, ctx, sb, "readlink /proc/1/cwd")
	// process_vm_readv (310) on PID 1.
	r, e := pythonErrno(t, ctx, sb, pyLibc+`
class iov(ctypes.Structure): _fields_=[("b",ctypes.c_void_p),("n",ctypes.c_size_t)]
buf=ctypes.create_string_buffer(8); l=iov(ctypes.cast(buf,ctypes.c_void_p),8); rm=iov(0x400000,8)
r=libc.syscall(310, 1, ctypes.byref(l), 1, ctypes.byref(rm), 1, 0); print(r, ctypes.get_errno())`)
	if r != -1 || e == 0 {
		t.Errorf("process_vm_readv(1) = %d errno %d, want failure", r, e)
	}
	// Signals cannot end PID 1 either.
	run(t, ctx, sb, "kill -KILL 1; kill -TERM 1; kill -INT 1")
	if out := mustRun(t, ctx, sb, "echo still-here"); out != "still-here\n" {
		t.Errorf("after signalling PID 1: %q", out)
	}
}

func TestIsolationAbstractUnixSocket(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	name := "airlock-test-" + randHex(8)
	ln, err := net.Listen("unix", "@"+name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	// Sanity: the host can connect.
	c, err := net.Dial("unix", "@"+name)
	if err != nil {
		t.Fatalf("host connect to @%s: %v", name, err)
	}
	c.Close()
	select {
	case a := <-accepted:
		a.Close()
	case <-time.After(10 * time.Second):
		t.Fatal("host connection was not accepted")
	}

	sb := newSandbox(t, airlock.Config{})
	r, e := pythonErrno(t, ctx, sb, fmt.Sprintf(`import socket,errno
s=socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect("\0%s"); print(0, 0)
except OSError as x:
    print(-1, x.errno)`, name))
	if r == 0 {
		t.Fatalf("the sandbox connected to the host's abstract socket @%s", name)
	}
	switch syscall.Errno(e) {
	case syscall.ECONNREFUSED, syscall.ENOENT, syscall.EPERM:
	default:
		t.Errorf("connect to @%s failed with errno %d (%v), want ECONNREFUSED, ENOENT or EPERM", name, e, syscall.Errno(e))
	}
	select {
	case a := <-accepted:
		a.Close()
		t.Error("the host listener accepted a connection from the sandbox")
	case <-time.After(200 * time.Millisecond):
	}
}

func TestIsolationNetwork(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	sb := newSandbox(t, airlock.Config{})
	// No route: nothing is sent.
	r, e := pythonErrno(t, ctx, sb, `import socket
s=socket.socket(); s.settimeout(5)
try:
    s.connect(("1.1.1.1", 53)); print(0, 0)
except OSError as x:
    print(-1, x.errno)`)
	if r == 0 || syscall.Errno(e) != syscall.ENETUNREACH {
		t.Errorf("connect 1.1.1.1:53 = %d errno %d (%v), want ENETUNREACH", r, e, syscall.Errno(e))
	}
	dev := mustRun(t, ctx, sb, "cat /proc/net/dev")
	var ifaces []string
	for _, l := range strings.Split(dev, "\n") {
		if name, _, ok := strings.Cut(l, ":"); ok && !strings.Contains(name, "|") {
			ifaces = append(ifaces, strings.TrimSpace(name))
		}
	}
	if len(ifaces) != 1 || ifaces[0] != "lo" {
		t.Errorf("interfaces in /proc/net/dev = %q, want only lo", ifaces)
	}
	if out := run(t, ctx, sb, "ls /sys/class/net"); out.ExitCode == 0 && strings.TrimSpace(string(out.Stdout)) != "lo" {
		t.Errorf("/sys/class/net lists %q, want nothing or lo", out.Stdout)
	}
	// Loopback works.
	out := mustRun(t, ctx, sb, `python3 -c '
import socket
l=socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(1)
c=socket.create_connection(l.getsockname(), timeout=5); a,_=l.accept()
c.sendall(b"ping"); print(a.recv(4).decode())'`)
	if strings.TrimSpace(out) != "ping" {
		t.Errorf("loopback round trip printed %q", out)
	}
	// Name resolution of outside names fails.
	res, err := sb.Run(ctx, airlock.Command{Argv: []string{"python3", "-c", `import socket
try:
    socket.getaddrinfo("example.com", 80); print("resolved")
except OSError as x:
    print("failed")`}, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(res.Stdout)) != "failed" {
		t.Errorf("resolving example.com: %q %q", res.Stdout, res.Stderr)
	}
}

func TestIsolationNoPersistence(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	a, err := airlock.Create(ctx, airlock.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	mustRun(t, ctx, a, "echo x > /tmp/x && echo y > /workspace/y && mkdir -p /root/.cache && echo z > /root/.cache/z")
	if err := a.WriteFile(ctx, "/workspace/api", []byte("api"), 0o644); err != nil {
		t.Fatal(err)
	}
	mustRun(t, ctx, a, "test -f /tmp/x && test -f /workspace/y && test -f /workspace/api")
	if err := a.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if _, err := a.Exec(ctx, "true"); !errors.Is(err, airlock.ErrClosed) {
		t.Errorf("Exec after Close: %v, want ErrClosed", err)
	}
	if _, err := os.Stat(filepath.Join(homeDir, "run", a.ID())); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the closed sandbox's directory remains on the host: %v", err)
	}

	b := newSandbox(t, airlock.Config{})
	for _, p := range []string{"/tmp/x", "/workspace/y", "/workspace/api", "/root/.cache/z"} {
		if res := run(t, ctx, b, "test -e "+p); res.ExitCode == 0 {
			t.Errorf("%s from a closed sandbox exists in a new one", p)
		}
	}
}

func TestIsolationSandboxesSeparate(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	a := newSandbox(t, airlock.Config{})
	b := newSandbox(t, airlock.Config{})
	if a.ID() == b.ID() {
		t.Fatalf("two sandboxes share id %s", a.ID())
	}
	marker := sleepMarker(1000)
	p, err := a.Start(ctx, airlock.Command{Argv: []string{"sleep", marker}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Kill() })
	file := "/tmp/only-in-a-" + randHex(4)
	mustRun(t, ctx, a, "echo a > "+file)

	probe := "ps -eo args; cat /proc/[0-9]*/cmdline | tr '\\0' ' '"
	// Sanity: the probe sees the process where it runs.
	if !waitFor(10*time.Second, func() bool { return strings.Contains(mustRun(t, ctx, a, probe), marker) }) {
		t.Fatalf("the probe does not see sleep %s in its own sandbox", marker)
	}
	if out := mustRun(t, ctx, b, probe); strings.Contains(out, marker) {
		t.Errorf("sandbox B sees sandbox A's process:\n%s", out)
	}
	if res := run(t, ctx, b, "test -e "+file); res.ExitCode == 0 {
		t.Errorf("sandbox B sees %s written in sandbox A", file)
	}
	// Signals do not cross either: B cannot kill A's sleep by its pid in A.
	run(t, ctx, b, fmt.Sprintf("kill -9 %d", p.Pid()))
	if out := mustRun(t, ctx, a, probe); !strings.Contains(out, marker) {
		t.Errorf("A's sleep is gone after B killed pid %d", p.Pid())
	}
	// Nor do abstract unix sockets.
	name := "airlock-ab-" + randHex(6)
	srv, err := a.Start(ctx, airlock.Command{Argv: []string{"python3", "-c", fmt.Sprintf(`import socket,sys
s=socket.socket(socket.AF_UNIX); s.bind("\0%s"); s.listen(1); print("listening", flush=True); s.accept()`, name)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Kill() })
	connect := fmt.Sprintf(`python3 -c 'import socket
s=socket.socket(socket.AF_UNIX)
try:
    s.connect("\0%s"); print("connected")
except OSError as x:
    print("refused", x.errno)'`, name)
	if !waitFor(10*time.Second, func() bool { return strings.HasPrefix(mustRun(t, ctx, a, connect), "connected") }) {
		t.Fatal("sanity: cannot connect to the abstract socket inside its own sandbox")
	}
	if out := mustRun(t, ctx, b, connect); !strings.HasPrefix(out, "refused") {
		t.Errorf("sandbox B reached A's abstract socket: %q", out)
	}
}

func TestIsolationHostname(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	sb := newSandbox(t, airlock.Config{})
	if got := strings.TrimSpace(mustRun(t, ctx, sb, "hostname")); got != sb.ID() {
		t.Errorf("hostname = %q, want the sandbox id %q", got, sb.ID())
	}
	if got := strings.TrimSpace(mustRun(t, ctx, sb, "cat /etc/hostname; echo $HOSTNAME")); got != sb.ID()+"\n"+sb.ID() {
		t.Errorf("/etc/hostname and $HOSTNAME = %q, want %q twice", got, sb.ID())
	}
	host, _ := os.Hostname()
	named := newSandbox(t, airlock.Config{Hostname: "box-" + randHex(3)})
	if got := strings.TrimSpace(mustRun(t, ctx, named, "hostname")); got != named.Config().Hostname || got == host {
		t.Errorf("hostname = %q, want %q", got, named.Config().Hostname)
	}
	// Changing it stays inside (and needs a capability it does not have).
	run(t, ctx, named, "hostname evil")
	if h, _ := os.Hostname(); h != host {
		t.Errorf("the host's hostname changed from %q to %q", host, h)
	}
}

func TestIsolationCapabilities(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	sb := newSandbox(t, airlock.Config{})
	status := mustRun(t, ctx, sb, "cat /proc/self/status")
	fields := map[string]string{}
	for _, l := range strings.Split(status, "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			fields[k] = strings.TrimSpace(v)
		}
	}
	for _, k := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
		if fields[k] != "0000000000000000" {
			t.Errorf("%s = %q, want all zero", k, fields[k])
		}
	}
	if fields["NoNewPrivs"] != "1" {
		t.Errorf("NoNewPrivs = %q, want 1", fields["NoNewPrivs"])
	}
	if fields["Seccomp"] != "2" {
		t.Errorf("Seccomp = %q, want 2 (filter)", fields["Seccomp"])
	}
	// A command started through a shell pipeline inherits the same.
	if out := mustRun(t, ctx, sb, "sh -c 'grep CapEff /proc/self/status' | cat"); !strings.Contains(out, "0000000000000000") {
		t.Errorf("grandchild: %q", out)
	}
}

func TestIsolationProcSysReadOnly(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	sb := newSandbox(t, airlock.Config{})
	// Writing back the current value is harmless should the write succeed.
	const knob = "/proc/sys/kernel/printk_ratelimit"
	before, err := os.ReadFile(knob)
	if err != nil {
		t.Skipf("no %s on this kernel", knob)
	}
	res := run(t, ctx, sb, fmt.Sprintf("v=$(cat %s) && echo $v > %s", knob, knob))
	if res.ExitCode == 0 {
		t.Errorf("the sandbox wrote the host-wide sysctl %s", knob)
	}
	if after, _ := os.ReadFile(knob); string(after) != string(before) {
		t.Errorf("%s changed from %q to %q", knob, before, after)
	}
	// access(2) only: no write is attempted on these.
	for _, p := range []string{"/proc/sys/kernel/core_pattern", "/proc/sys/kernel/modprobe", "/proc/sys/vm/drop_caches", "/proc/sysrq-trigger"} {
		if res := run(t, ctx, sb, "test -w "+p); res.ExitCode == 0 {
			t.Errorf("%s is writable from the sandbox", p)
		}
	}
}

func TestIsolationDangerousSyscalls(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	sb := newSandbox(t, airlock.Config{})
	// x86_64 numbers; arguments are harmless should a call get through.
	calls := []struct {
		name string
		args string
	}{
		{"kexec_load", "246, 0, 0, None, 0"},
		{"bpf", "321, 0, None, 0"},
		{"perf_event_open", "298, None, 0, -1, -1, 0"},
		{"userfaultfd", "323, 0"},
		{"keyctl", "250, 0, 0, 0, 0, 0"},
		{"add_key", "248, b\"user\", b\"k\", b\"v\", 1, -4"},
		{"io_uring_setup", "425, 1, None"},
		{"open_by_handle_at", "304, -100, None, 0"},
		{"setns", "308, -1, 0"},
		{"syslog", "103, 3, None, 0"},
		{"swapoff", "168, b\"/nonexistent\""},
		{"reboot", "169, 0, 0, 0, None"}, // bad magic: EINVAL at worst
		{"settimeofday", "164, None, None"},
		{"x32 getpid", "0x40000027"},
	}
	var prog strings.Builder
	prog.WriteString(pyLibc + "\n")
	for _, c := range calls {
		fmt.Fprintf(&prog, "r = libc.syscall(%s); print(%q, r, ctypes.get_errno())\n", c.args, c.name)
	}
	out := mustRun(t, ctx, sb, "python3 -c '"+strings.ReplaceAll(prog.String(), "'", `'"'"'`)+"'")
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		if len(f) < 3 {
			t.Errorf("unexpected line %q", l)
			continue
		}
		name, rest := strings.Join(f[:len(f)-2], " "), f[len(f)-2:]
		if rest[0] != "-1" {
			t.Errorf("%s = %v, want it refused", name, rest)
			continue
		}
		if e, _ := strconv.Atoi(rest[1]); e != int(syscall.EPERM) && e != int(syscall.ENOSYS) {
			t.Errorf("%s failed with errno %d (%v), want EPERM (or ENOSYS)", name, e, syscall.Errno(e))
		}
	}
	if n := strings.Count(out, "\n"); n != len(calls) {
		t.Errorf("probed %d calls, want %d:\n%s", n, len(calls), out)
	}
	// No injecting input into the terminal.
	res, err := sb.Run(ctx, airlock.Command{TTY: true, Argv: []string{"python3", "-c", `import fcntl, termios
try:
    fcntl.ioctl(0, termios.TIOCSTI, b"x"); print("injected")
except OSError as e:
    print("refused", e.errno)`}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(res.Stdout), "refused") {
		t.Errorf("TIOCSTI on the sandbox terminal: %q", res.Stdout)
	}
}

// As root, root inside the sandbox must not be root on the host: its
// processes run as an unprivileged uid of their own.
func TestIsolationRootIsNotHostRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only a root caller is remapped; an unprivileged caller maps its own uid")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sb := newSandbox(t, airlock.Config{})
	if got := mustRun(t, ctx, sb, "id -u"); got != "0\n" {
		t.Fatalf("uid inside = %q, want 0", got)
	}
	m := strings.Fields(mustRun(t, ctx, sb, "cat /proc/self/uid_map"))
	if len(m) != 3 || m[0] != "0" || m[1] == "0" {
		t.Fatalf("uid_map %v: root inside must map to an unprivileged host uid", m)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(fmt.Sprintf("/proc/%d", sb.PID()), &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid == 0 {
		t.Fatalf("the agent runs as host root")
	}
	if strconv.Itoa(int(st.Uid)) != m[1] {
		t.Errorf("agent host uid %d, uid_map says %s", st.Uid, m[1])
	}
}
