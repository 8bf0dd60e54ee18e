package vmkernel_test

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/initramfs"
	"github.com/airlock-sandbox/airlock/internal/vmkernel"
)

// EnvTestCache names the cache the tests find the guest kernel in. The
// Makefile's kernel target builds it there (/var/cache/airlock-kernel)
// and sets this for make test, so that there the boot test runs or fails;
// without it the test skips.
const EnvTestCache = "AIRLOCK_TEST_KERNEL_CACHE"

// EnvTestKernel, when set, is a kernel image to boot instead of the
// cache's (for working on the fragment).
const EnvTestKernel = "AIRLOCK_TEST_KERNEL"

// TestBootMicrovm boots the x86_64 guest kernel in QEMU's microvm under
// TCG with an initramfs whose /init checks the file systems, landlock and
// seccomp that the vm boundary needs, and ends the machine.
func TestBootMicrovm(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the boot test runs the x86_64 kernel, on x86_64")
	}
	image := os.Getenv(EnvTestKernel)
	if image == "" {
		dir := os.Getenv(EnvTestCache)
		if dir == "" {
			t.Skipf("set %s to a cache holding the x86_64 guest kernel (make kernel builds it; make test sets it)", EnvTestCache)
		}
		k, err := vmkernel.Find(dir, "x86_64", nil)
		if err != nil {
			t.Fatalf("%s is set, so the kernel must be there: %v", EnvTestCache, err)
		}
		image = k.Path
		t.Logf("kernel %s (%s, %s %s)", k.Path, k.Release, k.Source, k.SourceVersion)
	}
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		t.Fatalf("a guest kernel is there but not QEMU to boot it (apt-get install qemu-system-x86): %v", err)
	}
	khz, err := vmkernel.HostTSCkHz()
	if err != nil {
		t.Fatal(err)
	}
	boot(t, "amd64", qemu,
		"-M", "microvm,acpi=off", "-accel", "tcg", "-cpu", "max",
		"-kernel", image, "-append", vmkernel.CommandLine(khz, "quiet"))
}

// TestBootVirtARM64 boots the arm64 guest kernel, when the cache holds
// one (CI does not build it: make kernel KERNEL_ARCHS="x86_64 arm64"), in
// QEMU's virt machine under TCG, with the same checks.
func TestBootVirtARM64(t *testing.T) {
	dir := os.Getenv(EnvTestCache)
	if dir == "" {
		t.Skipf("set %s to a cache holding the arm64 guest kernel", EnvTestCache)
	}
	k, err := vmkernel.Find(dir, "arm64", nil)
	if err != nil {
		t.Skipf("no arm64 kernel (make kernel KERNEL_ARCHS=\"x86_64 arm64\" builds it): %v", err)
	}
	qemu, err := exec.LookPath("qemu-system-aarch64")
	if err != nil {
		t.Skip("no qemu-system-aarch64 (apt-get install qemu-system-arm)")
	}
	boot(t, "arm64", qemu,
		"-M", "virt", "-accel", "tcg", "-cpu", "cortex-a57",
		"-kernel", k.Path, "-append", "console=ttyAMA0 panic=-1 quiet")
}

// boot runs QEMU (qemu, with machine args) on an initramfs holding the
// guest's /init built for goarch, and checks what /init reports.
func boot(t *testing.T, goarch, qemu string, machine ...string) {
	t.Helper()
	dir := t.TempDir()
	initrd := filepath.Join(dir, "initrd.cpio")
	writeInitrd(t, dir, initrd, goarch)

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	args := append([]string{"-smp", "1", "-m", "256M", "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-serial", "stdio", "-initrd", initrd}, machine...)
	cmd := exec.CommandContext(ctx, qemu, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start QEMU: %v", err)
	}
	var (
		console  []string
		toInit   time.Duration
		release  string
		verdicts []string
	)
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		console = append(console, line)
		rest, ok := strings.CutPrefix(line, "airlock-init: ")
		if !ok {
			continue
		}
		switch {
		case rest == "started":
			toInit = time.Since(start)
		case strings.HasPrefix(rest, "release "):
			release = strings.TrimPrefix(rest, "release ")
		case strings.HasPrefix(rest, "FAIL "), rest == "ALL CHECKS PASSED":
			verdicts = append(verdicts, rest)
		}
	}
	werr := cmd.Wait()
	total := time.Since(start)
	if werr != nil || ctx.Err() != nil {
		t.Errorf("QEMU: %v (the guest did not end in time?)\nstderr: %s", werr, stderr.String())
	}
	t.Logf("console:\n%s", strings.Join(console, "\n"))
	if toInit == 0 {
		t.Fatal("the guest never ran /init")
	}
	t.Logf("boot to /init: %v under TCG; to QEMU's exit: %v", toInit.Round(time.Millisecond), total.Round(time.Millisecond))
	if len(verdicts) != 1 || verdicts[0] != "ALL CHECKS PASSED" {
		t.Errorf("guest checks: %q", verdicts)
	}
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	if host := unix.ByteSliceToString(u.Release[:]); release == "" || release == host {
		t.Errorf("guest release %q, host %q: the guest must run its own kernel", release, host)
	}
}

// writeInitrd builds the guest's /init (static, for goarch) and packs it, with
// /dev/console, into a newc archive at path.
func writeInitrd(t *testing.T, dir, path, goarch string) {
	t.Helper()
	bin := filepath.Join(dir, "init")
	build := exec.Command("go", "build", "-o", bin, "./testdata/guestinit")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goarch)
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
