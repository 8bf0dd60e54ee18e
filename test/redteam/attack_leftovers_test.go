package redteam_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/cgroup"
	"github.com/airlock-sandbox/airlock/internal/testbin"
)

// TestAttackLeftovers tries to outlive the sandbox: daemons that detach
// every way a shell knows (setsid, double fork, ignored SIGHUP/SIGTERM, a
// new process group), files in every writable place, and a second
// sandbox that looks for them.
func TestAttackLeftovers(t *testing.T) {
	t.Parallel()
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		a, err := airlock.Create(ctx, airlock.Config{Isolation: lv, Resources: airlock.Resources{MemoryMB: 256}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close() })
		marker := sleepMarker(900)
		ok(t, a, `m=`+marker+`
setsid sleep $m </dev/null >/dev/null 2>&1 &
(sleep $m </dev/null >/dev/null 2>&1 &) &
nohup sh -c "trap '' HUP TERM INT; exec sleep $m" </dev/null >/dev/null 2>&1 &
python3 -c 'import os,time,sys
if os.fork(): sys.exit(0)
os.setsid()
if os.fork(): sys.exit(0)
os.execvp("sleep", ["sleep", sys.argv[1]])' $m
echo x > /tmp/left; echo x > /workspace/left; echo x > /dev/shm/left; echo x > /var/tmp/left; mkdir -p /root/.cache && echo x > /root/.cache/left`)
		count := func() int {
			n := 0
			for _, cmd := range hostProcs(t) {
				if strings.Contains(cmd, marker) {
					n++
				}
			}
			return n
		}
		if lv == airlock.IsolationVM || lv == airlock.IsolationGVisor {
			// A VM's processes are its guest kernel's, and a gvisor
			// sandbox's the Sentry's: the host sees QEMU or the Sentry
			// alone, and the daemons are counted inside.
			inside := func() int { return strings.Count(ok(t, a, "ps -eo args"), marker) }
			if !testbin.WaitFor(10*time.Second, func() bool { return inside() >= 4 }) {
				t.Fatalf("sanity: %d of the 4 daemons seen in the VM", inside())
			}
		} else if !testbin.WaitFor(10*time.Second, func() bool { return count() >= 4 }) {
			t.Fatalf("sanity: %d of the 4 daemons seen on the host", count())
		}
		if err := a.WriteFile(ctx, "/workspace/api", []byte("api"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := a.Close(); err != nil {
			t.Fatalf("close: %v", err)
		}
		if _, err := a.Exec(ctx, "true"); !errors.Is(err, airlock.ErrClosed) {
			t.Errorf("Exec after Close: %v, want ErrClosed", err)
		}
		if !testbin.WaitFor(10*time.Second, func() bool { return count() == 0 }) {
			t.Errorf("%d daemons outlived the sandbox", count())
		}
		if testbin.Alive(a.PID()) {
			t.Errorf("the agent (or VM monitor) %d outlived the sandbox", a.PID())
		}
		for _, prefix := range []string{"airlock-vm-", "airlock-gvisor-"} {
			if left, _ := filepath.Glob(filepath.Join(os.TempDir(), prefix+a.ID()+"-*")); len(left) > 0 {
				t.Errorf("the sandbox's private directory remains: %v", left)
			}
		}
		if os.Geteuid() == 0 && cgroup.Exists(a.ID()) {
			t.Errorf("the cgroup of %s remains", a.ID())
		}
		if mi, err := os.ReadFile("/proc/self/mountinfo"); err == nil && strings.Contains(string(mi), a.ID()) {
			t.Errorf("a mount of %s remains on the host", a.ID())
		}
		b := box(t, lv, airlock.Config{})
		for _, p := range []string{"/tmp/left", "/workspace/left", "/dev/shm/left", "/var/tmp/left", "/root/.cache/left", "/workspace/api"} {
			if res := sh(t, b, "test -e "+p); res.ExitCode == 0 {
				t.Errorf("%s from a closed sandbox exists in a new one", p)
			}
		}
	})
}

// TestAttackNoNetwork: a sandbox created without a network has loopback
// and nothing else: no route, no name resolution, no interface.
func TestAttackNoNetwork(t *testing.T) {
	t.Parallel()
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		sb := box(t, lv, airlock.Config{})
		out := py(t, sb, `import socket
for fam, a in ((socket.AF_INET, "1.1.1.1"), (socket.AF_INET6, "2606:4700:4700::1111")):
    s = socket.socket(fam); s.settimeout(5)
    try:
        s.connect((a, 53)); print(a, "connected")
    except OSError as x:
        print(a, "errno", x.errno)
    u = socket.socket(fam, socket.SOCK_DGRAM)
    try:
        u.sendto(b"x", (a, 53)); print(a, "udp sent")
    except OSError as x:
        print(a, "udp errno", x.errno)
try:
    socket.getaddrinfo("example.com", 80); print("resolved")
except OSError:
    print("no resolution")
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(1)
c = socket.create_connection(l.getsockname(), timeout=5); a, _ = l.accept()
c.sendall(b"ping"); print("loopback", a.recv(4).decode())`)
		for _, bad := range []string{"connected", "udp sent", "resolved"} {
			if strings.Contains(out, bad) {
				t.Errorf("without a network: %s\n%s", bad, out)
			}
		}
		if !strings.Contains(out, "loopback ping") {
			t.Errorf("loopback does not work without a network:\n%s", out)
		}
		dev := ok(t, sb, "cat /proc/net/dev")
		var ifaces []string
		for _, l := range strings.Split(dev, "\n") {
			if name, _, ok := strings.Cut(l, ":"); ok && !strings.Contains(name, "|") {
				ifaces = append(ifaces, strings.TrimSpace(name))
			}
		}
		if len(ifaces) != 1 || ifaces[0] != "lo" {
			t.Errorf("interfaces in /proc/net/dev = %q, want only lo", ifaces)
		}
	})
}
