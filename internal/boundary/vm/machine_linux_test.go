package vm

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/initramfs"
	"github.com/airlock-sandbox/airlock/internal/vmkernel"
)

// testMachine starts a machine on the cached guest kernel with the echo
// init, or skips when there is no kernel to boot.
func testMachine(t *testing.T, ctx context.Context) *Machine {
	t.Helper()
	dir := os.Getenv("AIRLOCK_TEST_KERNEL_CACHE")
	if dir == "" {
		t.Skip("set AIRLOCK_TEST_KERNEL_CACHE to a cache holding the guest kernel (make test does)")
	}
	k, err := vmkernel.Find(dir, vmkernel.HostArch("amd64"), nil)
	if err != nil {
		t.Fatalf("AIRLOCK_TEST_KERNEL_CACHE is set, so the kernel must be there: %v", err)
	}
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		t.Fatalf("no QEMU to boot the guest kernel (apt-get install qemu-system-x86): %v", err)
	}
	khz, err := vmkernel.HostTSCkHz()
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	initrd := filepath.Join(work, "initrd.cpio")
	writeEchoInitrd(t, work, initrd)
	m, err := Start(ctx, Config{
		QEMU: qemu, Kernel: k.Path, Initrd: initrd, CommandLine: vmkernel.CommandLine(khz, "quiet"),
		CPUs: 1, MemoryMB: 128, Dir: work, Network: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		m.Close()
		if t.Failed() {
			t.Logf("console:\n%s", m.Console())
		}
	})
	return m
}

func writeEchoInitrd(t *testing.T, dir, path string) {
	t.Helper()
	bin := filepath.Join(dir, "init")
	build := exec.Command("go", "build", "-o", bin, "./testdata/echoinit")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the guest's init: %v\n%s", err, out)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := initramfs.WriteInit(path, b); err != nil {
		t.Fatal(err)
	}
}

// TestMachine boots the guest and checks the machine's three channels:
// the agent's port carries bytes both ways, the guest's frames come out
// of the frames socket, and QMP answers; then Close leaves no QEMU.
func TestMachine(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	m := testMachine(t, ctx)
	start := time.Now()
	agent, err := m.AcceptAgent(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Close()
	if d, ok := ctx.Deadline(); ok {
		agent.SetDeadline(d)
	}
	r := bufio.NewReader(agent)
	if line, err := r.ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("the guest's first words on the agent's port: %q, %v", line, err)
	}
	t.Logf("guest ready on the agent's port %v after QEMU answered QMP (TCG)", time.Since(start).Round(time.Millisecond))
	for _, msg := range []string{"ping\n", strings.Repeat("x", 3000) + "\n"} {
		if _, err := agent.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		if got, err := r.ReadString('\n'); err != nil || got != msg {
			t.Fatalf("echo of %d bytes: %d bytes back, %v", len(msg), len(got), err)
		}
	}

	// The guest asks for 10.0.2.2's address: an ARP request, broadcast,
	// is its first IPv4 frame.
	m.Frames.SetReadDeadline(time.Now().Add(time.Minute))
	buf := make([]byte, 65536)
	sawARP := false
	for !sawARP {
		n, err := m.Frames.Read(buf)
		if err != nil {
			t.Fatalf("no ARP frame from the guest: %v", err)
		}
		if n >= 42 && buf[12] == 0x08 && buf[13] == 0x06 {
			sawARP = true
			if string(buf[38:42]) != "\x0a\x00\x02\x02" {
				t.Errorf("ARP for %v, want 10.0.2.2", buf[38:42])
			}
		}
	}

	st, err := m.QMP.QueryStatus(ctx)
	if err != nil || !st.Running {
		t.Errorf("query-status: %+v, %v", st, err)
	}
	pid := m.PID()
	if err := m.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("QEMU (pid %d) still runs after Close", pid)
	}
	if m.Err() == nil {
		t.Error("Err is nil after QEMU ended")
	}
}
