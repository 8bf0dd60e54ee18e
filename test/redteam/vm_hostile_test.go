package redteam_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/boundary/process"
	"github.com/airlock-sandbox/airlock/internal/testbin"
)

// TestVMHostileGuest replaces a micro-VM's agent with a hostile PID 1:
// one that floods the agent's stream, one that announces a frame larger
// than any the host takes, one that sends a frame that is no message,
// one that never answers, and one that ends the guest at once. Each
// start fails with an error that says what went wrong, within its
// deadline; the supervisor's heap does not grow with what the guest
// sent; and no QEMU is left.
func TestVMHostileGuest(t *testing.T) {
	if why := unavailable(t, airlock.IsolationVM); why != "" {
		t.Skip(why)
	}
	cases := []struct {
		mode string
		want string // in the start's error
	}{
		{"flood", "handshake"},
		{"huge", "exceeds"},
		{"garbage", "handshake"},
		{"silent", "deadline"},
		{"exit", "guest ended"},
	}
	dir := t.TempDir()
	for _, c := range cases {
		t.Run(c.mode, func(t *testing.T) {
			bin := filepath.Join(dir, c.mode)
			build := exec.Command("go", "build", "-ldflags", "-X main.mode="+c.mode, "-o", bin, "./testdata/hostileagent")
			build.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := build.CombinedOutput(); err != nil {
				t.Fatalf("build the hostile agent: %v\n%s", err, out)
			}
			before := heap()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			start := time.Now()
			sb, err := airlock.Create(ctx, airlock.Config{Isolation: airlock.IsolationVM, AgentPath: bin})
			took := time.Since(start)
			if err == nil {
				sb.Close()
				t.Fatal("a sandbox started with a hostile agent")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("start failed with %q, want it to say %q", err, c.want)
			}
			if took > 60*time.Second {
				t.Errorf("the failed start took %s", took)
			}
			if grew := int64(heap()) - int64(before); grew > 64<<20 {
				t.Errorf("the supervisor's heap grew by %d MiB", grew>>20)
			}
			if !testbin.WaitFor(10*time.Second, func() bool { return !qemuLeft() }) {
				t.Errorf("a QEMU of the hostile guest is still running")
			}
		})
	}
}

// heap is the live heap after a collection.
func heap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// qemuLeft reports whether a QEMU started by this process still runs.
func qemuLeft() bool {
	procs, err := testbin.HostProcs()
	if err != nil {
		return false
	}
	ppid := "PPid:\t" + strconv.Itoa(os.Getpid()) + "\n"
	for pid, cmd := range procs {
		if !strings.Contains(cmd, "qemu-system") {
			continue
		}
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
		if err == nil && strings.Contains(string(b), ppid) {
			return true
		}
	}
	return false
}

// TestVMJail: a VM's QEMU, the one host process of a vm sandbox, is
// confined as the README says: an unprivileged uid of its own (under
// root), no capabilities, no_new_privs, its seccomp filter, an empty
// root, network and PID namespaces of its own, and a cgroup of its own.
func TestVMJail(t *testing.T) {
	if why := unavailable(t, airlock.IsolationVM); why != "" {
		t.Skip(why)
	}
	sb := box(t, airlock.IsolationVM, airlock.Config{})
	qemu := sb.PID()
	status := statusFields(readProc(t, qemu, "status"))
	for k, want := range map[string]string{"CapEff": "0000000000000000", "CapPrm": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2"} {
		if status[k] != want {
			t.Errorf("QEMU's %s = %q, want %s", k, status[k], want)
		}
	}
	if os.Geteuid() == 0 {
		uid := hostUID(t, qemu)
		if uid < process.SandboxUIDBase {
			t.Errorf("QEMU runs as host uid %d, not one of the sandbox range", uid)
		}
		if ls := idLeases(t, sb.ID()); len(ls) != 1 || !strings.HasPrefix(ls[0], strconv.Itoa(uid)+"+1@") {
			t.Errorf("QEMU's uid %d: leases %q, want its own", uid, ls)
		}
		if !strings.Contains(readProc(t, qemu, "cgroup"), "/"+sb.ID()) {
			t.Errorf("QEMU is not in the sandbox's cgroup: %s", readProc(t, qemu, "cgroup"))
		}
	}
	root, err := os.ReadDir(fmt.Sprintf("/proc/%d/root/", qemu))
	if err != nil || len(root) != 0 {
		t.Errorf("QEMU's root holds %d entries (%v), want an empty directory", len(root), err)
	}
	for _, ns := range []string{"net", "pid", "ipc", "mnt"} {
		mine, _ := os.Readlink("/proc/self/ns/" + ns)
		its, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", qemu, ns))
		if err != nil || its == mine {
			t.Errorf("QEMU's %s namespace is %q, this process's %q: want one of its own", ns, its, mine)
		}
	}
}

// readProc reads /proc/PID/NAME.
func readProc(t *testing.T, pid int, name string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
