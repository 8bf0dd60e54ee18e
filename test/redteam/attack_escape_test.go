package redteam_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/boundary/process"
	"github.com/airlock-sandbox/airlock/internal/testbin"
	"github.com/airlock-sandbox/airlock/policy"
)

// TestAttackHostFiles looks for the host's files from inside and tries
// to change the system the sandbox runs on.
func TestAttackHostFiles(t *testing.T) {
	t.Parallel()
	secret := "airlock-secret-" + randHex(8)
	hostTmp := filepath.Join("/tmp", secret)
	if err := os.WriteFile(hostTmp, []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(hostTmp) })
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		sb := box(t, lv, airlock.Config{})
		if out := ok(t, sb, "ls -A /tmp /root /home /workspace /var/tmp /run /mnt"); strings.Contains(out, secret) {
			t.Errorf("a host /tmp file is visible in the sandbox:\n%s", out)
		}
		for _, dir := range []string{"/root", "/home", "/mnt"} {
			if inside := ok(t, sb, "ls -A "+dir); strings.TrimSpace(inside) != "" {
				t.Errorf("%s in a new sandbox is not empty: %q", dir, inside)
			}
		}
		if res := sh(t, sb, "cat /etc/shadow"); strings.Contains(string(res.Stdout), "root:") {
			t.Errorf("the host's /etc/shadow is readable in the sandbox")
		}
		if passwd := ok(t, sb, "cat /etc/passwd"); strings.Contains(passwd, testbin.UnprivilegedUser) || strings.Count(passwd, "\n") > 3 {
			t.Errorf("/etc/passwd looks like the host's:\n%s", passwd)
		}
		for _, p := range []string{"/var/run/docker.sock", "/run/containerd", "/run/systemd", "/etc/sudoers", "/proc/1/root/etc/shadow", "/.dockerenv"} {
			if res := sh(t, sb, "test -e "+p); res.ExitCode == 0 {
				t.Errorf("%s exists in the sandbox", p)
			}
		}
		// The system is read-only, through every path form.
		for _, p := range []string{"/usr/airlock-x", "/usr/bin/airlock-x", "/bin/airlock-x", "/lib/airlock-x", "/tmp/../usr/airlock-x", "/proc/self/root/usr/airlock-x"} {
			res := sh(t, sb, "touch "+p)
			if res.ExitCode == 0 || !strings.Contains(string(res.Stderr), "Read-only file system") {
				t.Errorf("touch %s: exit %d %q, want Read-only file system", p, res.ExitCode, res.Stderr)
			}
			clean := filepath.Join("/", strings.TrimPrefix(filepath.Clean(p), "/proc/self/root"))
			if _, err := os.Stat(clean); err == nil {
				os.Remove(clean)
				t.Errorf("%s was created on the host", clean)
			}
		}
		// A symlink or hard link cannot turn a read-only file writable.
		if res := sh(t, sb, "ln /usr/bin/env /tmp/env-link && echo x >> /tmp/env-link"); res.ExitCode == 0 {
			t.Errorf("appended to a system binary through a hard link")
		}
		if res := sh(t, sb, "ln -s /usr/bin/env /tmp/env-sym && echo x >> /tmp/env-sym"); res.ExitCode == 0 {
			t.Errorf("appended to a system binary through a symlink")
		}
		ok(t, sb, "touch /tmp/a /workspace/a /var/tmp/a /root/a")
		// The shared scratch places keep the sticky bit, so that one
		// user's files there are not another's to remove.
		if out := strings.Fields(ok(t, sb, "stat -c %a /tmp /var/tmp /dev/shm")); strings.Join(out, " ") != "1777 1777 1777" {
			t.Errorf("modes of /tmp, /var/tmp, /dev/shm: %v, want 1777 each", out)
		}
	})
}

// rootCaps is the capability set of root inside a sandbox, as
// /proc/PID/status prints it: CHOWN, DAC_OVERRIDE, FOWNER, FSETID, KILL,
// SETGID, SETUID and NET_BIND_SERVICE, in the sandbox's user namespace.
const rootCaps = "00000000000004fb"

// statusFields reads the "Key: value" lines of a /proc/PID/status.
func statusFields(out string) map[string]string {
	fields := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			fields[k] = strings.TrimSpace(v)
		}
	}
	return fields
}

// TestAttackPrivilege checks what a command holds: root inside holds the
// sandbox's few capabilities and no other, no way to gain another
// (set-id programs and file capabilities give at most root's inside),
// other uids hold none, and, when airlock runs as root, root inside is
// an unprivileged host uid.
func TestAttackPrivilege(t *testing.T) {
	t.Parallel()
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		sb := box(t, lv, airlock.Config{})
		for _, probe := range []string{"cat /proc/self/status", "sh -c 'cat /proc/self/status' | cat"} {
			fields := statusFields(ok(t, sb, probe))
			for k, want := range map[string]string{"CapInh": "0000000000000000", "CapPrm": rootCaps, "CapEff": rootCaps, "CapBnd": rootCaps, "CapAmb": "0000000000000000"} {
				if fields[k] != want {
					t.Errorf("%s: %s = %q, want %s", probe, k, fields[k], want)
				}
			}
			if lv == airlock.IsolationProcess && fields["Seccomp"] != "2" {
				t.Errorf("%s: Seccomp = %q, want 2 (filter)", probe, fields["Seccomp"])
			}
		}
		// Another uid holds nothing; its bounding set is root's.
		fields := statusFields(ok(t, sb, "setpriv --reuid=1000 --regid=1000 --clear-groups cat /proc/self/status"))
		for k, want := range map[string]string{"CapInh": "0000000000000000", "CapPrm": "0000000000000000", "CapEff": "0000000000000000", "CapBnd": rootCaps, "CapAmb": "0000000000000000"} {
			if fields[k] != want {
				t.Errorf("uid 1000: %s = %q, want %s", k, fields[k], want)
			}
		}
		// Capabilities cannot be raised, kept across a change of uid,
		// nor made ambient, nor put back in the bounding set.
		r, e := pyErrno(t, sb, pyLibc+`PR_SET_SECUREBITS=28; r=libc.prctl(PR_SET_SECUREBITS, 0x10, 0, 0, 0); print(r, ctypes.get_errno())`)
		if r == 0 || e != syscall.EPERM {
			t.Errorf("prctl(PR_SET_SECUREBITS, SECBIT_KEEP_CAPS) = %d (%v), want EPERM (locked)", r, e)
		}
		r, e = pyErrno(t, sb, pyLibc+`r=libc.prctl(47, 2, 21, 0, 0); print(r, ctypes.get_errno())`) // PR_CAP_AMBIENT_RAISE CAP_SYS_ADMIN
		if r == 0 || e != syscall.EPERM {
			t.Errorf("PR_CAP_AMBIENT_RAISE of CAP_SYS_ADMIN = %d (%v), want EPERM", r, e)
		}
		// A set-uid-root copy of python, given every file capability it
		// can get, run by another uid: root's capabilities inside, and
		// not one more.
		out := ok(t, sb, `cp /usr/bin/python3 /tmp/p && chmod 4755 /tmp/p && (setcap cap_sys_admin+ep /tmp/p 2>/dev/null; true) && setpriv --reuid=1000 --regid=1000 --clear-groups /tmp/p -c 'import os; print(os.getuid(), os.geteuid(), open("/proc/self/status").read().split("CapEff:")[1].split()[0])'`)
		if f := strings.Fields(out); len(f) != 3 || f[0] != "1000" || f[1] != "0" || f[2] != rootCaps {
			t.Errorf("a set-uid-root copy of python run by uid 1000 runs with uid, euid, capabilities %q, want 1000 0 %s", out, rootCaps)
		}
		if os.Geteuid() != 0 || lv == airlock.IsolationVM {
			return // the vm level: guestIDs
		}
		// Root inside is an unprivileged host uid: the first of the
		// sandbox's block. At gvisor, root inside is the Sentry's,
		// whose user namespaces are its own: the Sentry is the process
		// that runs as the block.
		holder := sb.PID()
		uidMap := ""
		if lv == airlock.IsolationGVisor {
			holder = sentryOf(t, holder)
			uidMap = hostMap(t, holder, "uid_map")
		} else {
			uidMap = ok(t, sb, "cat /proc/self/uid_map")
		}
		m := strings.Fields(uidMap)
		if len(m) != 3 || m[0] != "0" || m[2] != "65536" {
			t.Fatalf("uid_map %v: ids 0-65535 inside must map to a block of the host's", m)
		}
		base, err := strconv.Atoi(m[1])
		if err != nil || base < process.SandboxUIDBase || base+65536 > process.SandboxUIDBase+process.SandboxUIDRange {
			t.Fatalf("uid_map %v: root inside must map to an unprivileged host uid of the sandbox range", m)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(fmt.Sprintf("/proc/%d", holder), &st); err != nil {
			t.Fatal(err)
		}
		if int(st.Uid) != base {
			t.Errorf("the sandbox's process %d runs as host uid %d; uid_map says %d", holder, st.Uid, base)
		}
	})
}

// TestAttackSignals tries to end the sandbox's init, the host's
// processes and another sandbox's, by every signal route.
func TestAttackSignals(t *testing.T) {
	t.Parallel()
	host := exec.Command("sleep", sleepMarker(600))
	if err := host.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { host.Process.Kill(); host.Wait() })
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		sb := box(t, lv, airlock.Config{})
		sh(t, sb, fmt.Sprintf("kill -KILL 1; kill -TERM 1; kill -SEGV 1; kill -KILL %d; kill -KILL -1", host.Process.Pid))
		if out := ok(t, sb, "echo still-here"); out != "still-here\n" {
			t.Errorf("after signalling PID 1 and every process: %q", out)
		}
		if !testbin.Alive(host.Process.Pid) {
			t.Fatalf("the host's sleep %d died", host.Process.Pid)
		}
		// pidfd on a host pid, and a process group.
		r, e := pyErrno(t, sb, pyLibc+fmt.Sprintf(`r=libc.syscall(434, %d, 0); print(r, ctypes.get_errno())`, host.Process.Pid))
		if r >= 0 {
			t.Errorf("pidfd_open(%d) of a host pid = %d in the sandbox", host.Process.Pid, r)
		} else if e != syscall.ESRCH && e != syscall.EPERM && e != syscall.ENOSYS {
			t.Errorf("pidfd_open(host pid) errno %v, want ESRCH", e)
		}
	})
}

// TestAttackSandboxesSeparate reaches from one sandbox into another: its
// processes, files, signals and abstract sockets.
func TestAttackSandboxesSeparate(t *testing.T) {
	t.Parallel()
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		a := box(t, lv, airlock.Config{})
		b := box(t, lv, airlock.Config{})
		marker := sleepMarker(1000)
		p, err := a.Start(ctx, airlock.Command{Argv: []string{"sleep", marker}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Kill() })
		file := "/tmp/only-in-a-" + randHex(4)
		ok(t, a, "echo a > "+file)
		probe := "ps -eo args; cat /proc/[0-9]*/cmdline | tr '\\0' ' '"
		if !testbin.WaitFor(10*time.Second, func() bool { return strings.Contains(ok(t, a, probe), marker) }) {
			t.Fatalf("the probe does not see sleep %s in its own sandbox", marker)
		}
		if out := ok(t, b, probe); strings.Contains(out, marker) {
			t.Errorf("sandbox B sees sandbox A's process:\n%s", out)
		}
		if res := sh(t, b, "test -e "+file); res.ExitCode == 0 {
			t.Errorf("sandbox B sees %s written in sandbox A", file)
		}
		sh(t, b, fmt.Sprintf("kill -9 %d; kill -9 -1", p.Pid()))
		if out := ok(t, a, probe); !strings.Contains(out, marker) {
			t.Errorf("A's sleep is gone after B killed pid %d", p.Pid())
		}
		name := "airlock-ab-" + randHex(6)
		srv, err := a.Start(ctx, airlock.Command{Argv: []string{"python3", "-c", fmt.Sprintf(`import socket
s=socket.socket(socket.AF_UNIX); s.bind("\0%s"); s.listen(1); s.accept()`, name)}})
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
		// The server is a fresh python3 in a sandbox that may be a VM under
		// emulation, on a loaded machine: give it the time it takes.
		if !testbin.WaitFor(time.Minute, func() bool { return strings.HasPrefix(ok(t, a, connect), "connected") }) {
			t.Fatal("sanity: cannot connect to the abstract socket inside its own sandbox")
		}
		if out := ok(t, b, connect); !strings.HasPrefix(out, "refused") {
			t.Errorf("sandbox B reached A's abstract socket: %q", out)
		}
	})
}

// TestAttackHostLoopback reaches for services that listen only on the
// host's loopback (a database, a metadata proxy, a docker API): by TCP
// and UDP on 127.0.0.1 and ::1, by abstract unix sockets, and, with a
// network, by the gateway's and the host's own addresses.
func TestAttackHostLoopback(t *testing.T) {
	t.Parallel()
	tcp4, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tcp4.Close() })
	port := tcp4.Addr().(*net.TCPAddr).Port
	var listeners = []net.Listener{tcp4}
	if tcp6, err := net.Listen("tcp6", fmt.Sprintf("[::1]:%d", port)); err == nil {
		t.Cleanup(func() { tcp6.Close() })
		listeners = append(listeners, tcp6)
	}
	abstract := "airlock-host-" + randHex(6)
	unixL, err := net.Listen("unix", "@"+abstract)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unixL.Close() })
	listeners = append(listeners, unixL)
	accepted := make(chan string, 16)
	for _, l := range listeners {
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				accepted <- c.LocalAddr().String()
				c.Close()
			}
		}()
	}
	hostAddrs := []string{"127.0.0.1", "::1"}
	if ifs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range ifs {
			if ip, ok := a.(*net.IPNet); ok && !ip.IP.IsLoopback() && !ip.IP.IsLinkLocalUnicast() {
				hostAddrs = append(hostAddrs, ip.IP.String())
			}
		}
	}
	connect := func(t *testing.T, sb *airlock.Sandbox, addrs []string) {
		t.Helper()
		prog := fmt.Sprintf(`import socket
for a in %s:
    fam = socket.AF_INET6 if ":" in a else socket.AF_INET
    s = socket.socket(fam); s.settimeout(5)
    try:
        s.connect((a, %d)); print(a, "connected")
    except OSError as x:
        print(a, "refused", x.errno)
s = socket.socket(socket.AF_UNIX)
try:
    s.connect("\0%s"); print("@", "connected")
except OSError as x:
    print("@", "refused", x.errno)
`, pyList(addrs), port, abstract)
		for _, l := range strings.Split(strings.TrimSpace(py(t, sb, prog)), "\n") {
			if strings.Contains(l, "connected") {
				t.Errorf("the sandbox reached the host: %s", l)
			}
		}
		select {
		case a := <-accepted:
			t.Errorf("a host listener on %s accepted a connection from the sandbox", a)
		case <-time.After(100 * time.Millisecond):
		}
	}
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		t.Run("no network", func(t *testing.T) {
			connect(t, box(t, lv, airlock.Config{}), hostAddrs)
		})
		t.Run("network", func(t *testing.T) {
			needNetwork(t)
			// Everything allowed by name: addresses still decide.
			sb := box(t, lv, airlock.Config{Network: &policy.Config{AllowedHosts: []string{"*"}}})
			connect(t, sb, append([]string{"10.88.0.1", "fd88::1"}, hostAddrs...))
		})
	})
}

func pyList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// TestAttackHostname renames the machine from inside: the name is the
// sandbox's own, and the host's does not change.
func TestAttackHostname(t *testing.T) {
	t.Parallel()
	host, _ := os.Hostname()
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		sb := box(t, lv, airlock.Config{})
		if got := strings.TrimSpace(ok(t, sb, "hostname; cat /etc/hostname; echo $HOSTNAME")); got != sb.ID()+"\n"+sb.ID()+"\n"+sb.ID() {
			t.Errorf("hostname, /etc/hostname and $HOSTNAME = %q, want the sandbox id %q", got, sb.ID())
		}
		named := box(t, lv, airlock.Config{Hostname: "box-" + randHex(3)})
		if got := strings.TrimSpace(ok(t, named, "hostname")); got != named.Config().Hostname {
			t.Errorf("hostname = %q, want %q", got, named.Config().Hostname)
		}
		if res := sh(t, named, "hostname evil"); res.ExitCode == 0 {
			t.Errorf("hostname evil succeeded without a capability")
		}
		if h, _ := os.Hostname(); h != host {
			t.Errorf("the host's hostname changed from %q to %q", host, h)
		}
	})
}
