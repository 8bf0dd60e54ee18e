package doctor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	kernelpkg "github.com/airlock-sandbox/airlock/internal/kernel"
)

const (
	cpuinfoVMX = "processor\t: 0\nflags\t\t: fpu vme de pse msr vmx sse sse2 lm\n\nprocessor\t: 1\nflags\t\t: fpu vme vmx\n"
	// cpuinfoPVM is a guest without nested virtualisation, like a PVM host.
	cpuinfoPVM = "processor\t: 0\nflags\t\t: fpu vme de pse msr sse sse2 hypervisor lm\n"
)

// fakeTree writes files (path → content) below a temporary root. A path
// ending in "/" becomes a directory.
func fakeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, content := range files {
		full := filepath.Join(root, p)
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// goodTree is a host where every check passes.
func goodTree() map[string]string {
	return map[string]string{
		"proc/sys/user/max_user_namespaces": "15000\n",
		"proc/sys/kernel/osrelease":         "6.8.0-45-generic\n",
		"proc/self/status":                  "Name:\tairlock\nSeccomp:\t0\nSeccomp_filters:\t0\n",
		"proc/cpuinfo":                      cpuinfoVMX,
		"dev/kvm":                           "",
		"dev/fuse":                          "",
		"dev/net/tun":                       "",
		"etc/os-release":                    "NAME=Test\nPRETTY_NAME=\"Test Linux 1\"\n",
	}
}

// fakeHost is a Linux host whose system-call probes all succeed.
func fakeHost(uid int) *host {
	return &host{
		goos:     "linux",
		goarch:   "amd64",
		uid:      uid,
		exe:      "/opt/airlock/bin/airlock",
		userns:   func(context.Context) error { return nil },
		landlock: func() (int, error) { return 4, nil },
		seccomp:  func() seccompProbe { return seccompProbe{} },
	}
}

// allBinaries is a LookPath that finds everything in /usr/bin.
func allBinaries(name string) (string, error) { return "/usr/bin/" + name, nil }

func noBinaries(name string) (string, error) { return "", errors.New("not found") }

func findCheck(t *testing.T, checks []Check, name string) Check {
	t.Helper()
	for _, c := range checks {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no check %q in %+v", name, checks)
	return Check{}
}

func findLevel(t *testing.T, r Report, name string) Level {
	t.Helper()
	for _, l := range r.Levels {
		if l.Name == name {
			return l
		}
	}
	t.Fatalf("no level %q in report", name)
	return Level{}
}

func TestMaxUserNamespacesZero(t *testing.T) {
	files := goodTree()
	files["proc/sys/user/max_user_namespaces"] = "0\n"
	h := fakeHost(0)
	h.userns = func(context.Context) error {
		return &os.PathError{Op: "fork/exec", Path: "/bin/true", Err: syscall.ENOSPC}
	}
	checks := usernsChecks(context.Background(), fakeTree(t, files), h)

	c := findCheck(t, checks, "user namespaces")
	if c.Status != Fail || c.Fix != "sysctl -w user.max_user_namespaces=15000" {
		t.Errorf("got %+v, want fail with the sysctl fix", c)
	}
	p := findCheck(t, checks, "user namespace probe")
	if p.Status != Fail || !strings.Contains(p.Detail, "ENOSPC") {
		t.Errorf("probe check = %+v, want fail naming ENOSPC", p)
	}
}

func TestMaxUserNamespacesMissing(t *testing.T) {
	files := goodTree()
	delete(files, "proc/sys/user/max_user_namespaces")
	c := findCheck(t, usernsChecks(context.Background(), fakeTree(t, files), fakeHost(0)), "user namespaces")
	if c.Status != Fail || !strings.Contains(c.Detail, "CONFIG_USER_NS") {
		t.Errorf("got %+v, want fail naming CONFIG_USER_NS", c)
	}
}

func TestUsernsOK(t *testing.T) {
	checks := usernsChecks(context.Background(), fakeTree(t, goodTree()), fakeHost(1000))
	if len(checks) != 2 {
		t.Fatalf("got %d checks, want max_user_namespaces and the probe only: %+v", len(checks), checks)
	}
	for _, c := range checks {
		if c.Status != OK {
			t.Errorf("%+v: want ok", c)
		}
	}
	if d := checks[0].Detail; d != "max_user_namespaces=15000" {
		t.Errorf("detail = %q", d)
	}
}

func TestDebianUnprivilegedUsernsClone(t *testing.T) {
	files := goodTree()
	files["proc/sys/kernel/unprivileged_userns_clone"] = "0\n"
	root := fakeTree(t, files)

	c := findCheck(t, usernsChecks(context.Background(), root, fakeHost(1000)), "unprivileged userns (Debian)")
	if c.Status != Fail || c.Fix != "sysctl -w kernel.unprivileged_userns_clone=1" {
		t.Errorf("non-root: got %+v, want fail with the sysctl fix", c)
	}
	c = findCheck(t, usernsChecks(context.Background(), root, fakeHost(0)), "unprivileged userns (Debian)")
	if c.Status != OK {
		t.Errorf("root: got %+v, want ok (the sysctl does not apply to root)", c)
	}
}

func TestAppArmorRestrictsUserns(t *testing.T) {
	files := goodTree()
	files["proc/sys/kernel/apparmor_restrict_unprivileged_userns"] = "1\n"
	root := fakeTree(t, files)

	checks := usernsChecks(context.Background(), root, fakeHost(1000))
	c := findCheck(t, checks, "AppArmor userns restriction")
	if c.Status != Fail {
		t.Fatalf("non-root: got %+v, want fail", c)
	}
	for _, want := range []string{
		"sysctl -w kernel.apparmor_restrict_unprivileged_userns=0",
		"profile airlock /opt/airlock/bin/airlock flags=(unconfined) {",
		"userns,",
		"apparmor_parser -r /etc/apparmor.d/airlock",
	} {
		if !strings.Contains(c.Fix, want) {
			t.Errorf("fix lacks %q:\n%s", want, c.Fix)
		}
	}

	c = findCheck(t, usernsChecks(context.Background(), root, fakeHost(0)), "AppArmor userns restriction")
	if c.Status != OK {
		t.Errorf("root: got %+v, want ok", c)
	}
}

func TestUsernsProbeErrors(t *testing.T) {
	eperm := &os.PathError{Op: "fork/exec", Path: "/bin/true", Err: syscall.EPERM}
	c := usernsProbeCheck(eperm, nil)
	if c.Status != Fail || !strings.Contains(c.Detail, "EPERM") || !strings.Contains(c.Fix, "container") {
		t.Errorf("EPERM: got %+v", c)
	}
	// When a sysctl already explains the failure, point there.
	c = usernsProbeCheck(eperm, []string{"", "sysctl -w kernel.unprivileged_userns_clone=1"})
	if c.Fix != "see the fixes above" {
		t.Errorf("fix = %q, want a pointer to the sysctl fixes", c.Fix)
	}
}

func TestVirtVMXWithOpenableKVM(t *testing.T) {
	v := ProbeVirt(fakeTree(t, goodTree()), "amd64")
	if !v.VMX || !v.HardwareVirt() || !v.KVMUsable() || v.PVM {
		t.Fatalf("got %+v, want vmx and KVM usable", v)
	}
	checks := v.Checks()
	if c := findCheck(t, checks, "hardware virtualisation"); c.Status != OK || !strings.Contains(c.Detail, "vmx") {
		t.Errorf("hardware check = %+v", c)
	}
	if c := findCheck(t, checks, "KVM"); c.Status != OK || !strings.HasPrefix(c.Detail, "KVM usable") {
		t.Errorf("KVM check = %+v", c)
	}
}

func TestVirtSVM(t *testing.T) {
	files := goodTree()
	files["proc/cpuinfo"] = "flags\t\t: fpu svm lm\n"
	files["sys/module/kvm_amd/parameters/nested"] = "1\n"
	v := ProbeVirt(fakeTree(t, files), "amd64")
	if !v.SVM || !v.KVMUsable() || v.Nested != "kvm_amd nested=1" {
		t.Errorf("got %+v, want svm, KVM usable and nested reported", v)
	}
}

// The core rule: /dev/kvm without vmx/svm is not hardware virtualisation.
func TestVirtKVMDeviceWithoutVMXIsNotHardwareVirt(t *testing.T) {
	for name, extra := range map[string]map[string]string{
		"hypervisor flag":  {},
		"kvm_pvm module":   {"sys/module/kvm_pvm/parameters/pvm_native": "N\n"},
		"no hints at all":  {"proc/cpuinfo": "flags\t\t: fpu sse lm\n"},
		"nested param set": {"sys/module/kvm_intel/parameters/nested": "Y\n"},
	} {
		t.Run(name, func(t *testing.T) {
			files := goodTree()
			files["proc/cpuinfo"] = cpuinfoPVM
			for k, v := range extra {
				files[k] = v
			}
			v := ProbeVirt(fakeTree(t, files), "amd64")
			if !v.KVMDevice || v.KVMOpenErr != nil {
				t.Fatalf("fake /dev/kvm should exist and open: %+v", v)
			}
			if v.HardwareVirt() || v.KVMUsable() {
				t.Fatalf("got %+v: /dev/kvm alone must not count as hardware virtualisation", v)
			}
			hw := findCheck(t, v.Checks(), "hardware virtualisation")
			kvm := findCheck(t, v.Checks(), "KVM")
			if hw.Status != Warn || kvm.Status != Warn {
				t.Errorf("want warnings, got %+v and %+v", hw, kvm)
			}
			if !strings.Contains(kvm.Detail, "TCG") || !strings.Contains(kvm.Detail, "not counted") {
				t.Errorf("KVM detail should explain the TCG fallback: %q", kvm.Detail)
			}
			if kvm.Fix == "" || kvm.Fix != hw.Fix {
				t.Errorf("KVM fix %q should repeat the hardware fix %q", kvm.Fix, hw.Fix)
			}
		})
	}
}

func TestVirtPVMDetection(t *testing.T) {
	files := goodTree()
	files["proc/cpuinfo"] = cpuinfoPVM
	v := ProbeVirt(fakeTree(t, files), "amd64")
	if !v.Hypervisor || !v.PVM {
		t.Errorf("guest with /dev/kvm and no vmx should be detected as PVM: %+v", v)
	}
	if d := findCheck(t, v.Checks(), "KVM").Detail; !strings.Contains(d, "emulation failure") {
		t.Errorf("KVM detail should warn about stock guest kernels: %q", d)
	}

	delete(files, "dev/kvm")
	v = ProbeVirt(fakeTree(t, files), "amd64")
	if v.PVM || v.KVMDevice {
		t.Errorf("guest without /dev/kvm is not PVM: %+v", v)
	}
}

func TestVirtKVMNotOpenable(t *testing.T) {
	files := goodTree()
	delete(files, "dev/kvm")
	files["dev/kvm/"] = "" // a directory cannot be opened read-write
	v := ProbeVirt(fakeTree(t, files), "amd64")
	if !v.KVMDevice || v.KVMOpenErr == nil || v.KVMUsable() {
		t.Fatalf("got %+v, want an unopenable /dev/kvm", v)
	}
	c := findCheck(t, v.Checks(), "KVM")
	if c.Status != Warn || !strings.Contains(c.Detail, "cannot be opened") || !strings.Contains(c.Fix, "usermod -aG kvm") {
		t.Errorf("got %+v", c)
	}
}

func TestVirtNoKVMDevice(t *testing.T) {
	files := goodTree()
	delete(files, "dev/kvm")
	v := ProbeVirt(fakeTree(t, files), "amd64")
	c := findCheck(t, v.Checks(), "KVM")
	if v.KVMUsable() || c.Status != Warn || !strings.Contains(c.Fix, "modprobe kvm_intel") {
		t.Errorf("got %+v", c)
	}
}

func TestLandlockCheck(t *testing.T) {
	root := fakeTree(t, map[string]string{"sys/kernel/security/lsm": "lockdown,capability,yama,apparmor\n"})
	abi := func(v int, err error) func() (int, error) { return func() (int, error) { return v, err } }

	if c := landlockCheck(root, "6.8.0", abi(4, nil)); c.Status != OK || c.Detail != "ABI 4" {
		t.Errorf("supported: %+v", c)
	}
	c := landlockCheck(root, "6.8.0", abi(-1, syscall.EOPNOTSUPP))
	if c.Status != Warn || !strings.Contains(c.Fix, "lsm=landlock,lockdown,capability,yama,apparmor") {
		t.Errorf("not enabled: %+v", c)
	}
	c = landlockCheck(root, "5.10.0-28-amd64", abi(-1, syscall.ENOSYS))
	if !strings.Contains(c.Detail, "older than 5.13") || !strings.Contains(c.Fix, "5.13") {
		t.Errorf("old kernel: %+v", c)
	}
	c = landlockCheck(root, "6.1.0", abi(-1, syscall.ENOSYS))
	if !strings.Contains(c.Detail, "CONFIG_SECURITY_LANDLOCK") {
		t.Errorf("not built: %+v", c)
	}
}

func TestKernelAtLeast(t *testing.T) {
	for release, want := range map[string]bool{
		"5.13.0": true, "5.12.19": false, "4.19.0-26-amd64": false,
		"6.18.44-fc-v595": true, "5.15.0-1051-azure": true, "garbage": true,
	} {
		if got := kernelpkg.AtLeast(release, 5, 13); got != want {
			t.Errorf("AtLeast(%q, 5, 13) = %v, want %v", release, got, want)
		}
	}
}

func TestSeccompChecks(t *testing.T) {
	root := fakeTree(t, map[string]string{"proc/self/status": "Seccomp:\t2\nSeccomp_filters:\t1\n"})

	checks := seccompChecks(root, seccompProbe{mode: 2})
	if checks[0].Status != OK || !strings.Contains(checks[0].Detail, "already under 1 filter") {
		t.Errorf("filters: %+v", checks[0])
	}
	if checks[1].Status != OK {
		t.Errorf("user notification: %+v", checks[1])
	}

	checks = seccompChecks(root, seccompProbe{filterErr: syscall.EINVAL, notifyErr: syscall.EOPNOTSUPP})
	if checks[0].Status != Fail || !strings.Contains(checks[0].Fix, "CONFIG_SECCOMP_FILTER=y") {
		t.Errorf("no filters: %+v", checks[0])
	}
	if checks[1].Status != Warn || !strings.Contains(checks[1].Detail, "EOPNOTSUPP") {
		t.Errorf("no user notification: %+v", checks[1])
	}
}

func TestCgroupCheck(t *testing.T) {
	if c := cgroupCheck(nil); c.Status != Skip {
		t.Errorf("nil probe: %+v", c)
	}
	c := cgroupCheck(func() (string, []string, bool, string) {
		return "v2", []string{"cpu", "memory", "pids"}, false, "delegate a cgroup: systemd-run --user --scope -p Delegate=yes airlock ..."
	})
	if c.Status != Warn || !strings.Contains(c.Fix, "Delegate=yes") || !strings.Contains(c.Detail, "cpu memory pids") {
		t.Errorf("unwritable: %+v", c)
	}
	c = cgroupCheck(func() (string, []string, bool, string) { return "v2", nil, true, "" })
	if c.Status != OK || !strings.Contains(c.Detail, "airlock pause` is refused") {
		t.Errorf("writable, no freezer: %+v", c)
	}
	c = cgroupCheck(func() (string, []string, bool, string) {
		return "v1", []string{"memory", "pids", "cpu", "freezer"}, true, ""
	})
	if c.Status != OK || strings.Contains(c.Detail, "pause") || !strings.Contains(c.Detail, "freezer") {
		t.Errorf("writable, with a freezer: %+v", c)
	}
}

func TestDeviceChecks(t *testing.T) {
	files := goodTree()
	delete(files, "dev/net/tun")
	root := fakeTree(t, files)

	if c := fuseCheck(root, "6.1.0", 1000); c.Status != OK || !strings.Contains(c.Detail, "mode 0600") || strings.Contains(c.Detail, "passthrough") {
		t.Errorf("fuse: %+v", c)
	}
	if c := fuseCheck(root, "6.18.4", 1000); c.Status != OK || !strings.Contains(c.Detail, "passthrough (Linux ≥ 6.9) is not used") || !strings.Contains(c.Detail, "run as root") {
		t.Errorf("fuse on a kernel with passthrough, unprivileged: %+v", c)
	}
	if c := fuseCheck(root, "6.18.4", 0); c.Status != OK || !strings.Contains(c.Detail, "read by the kernel straight from the host files") {
		t.Errorf("fuse on a kernel with passthrough, as root: %+v", c)
	}
	c := tunCheck(root, 1000)
	if c.Status != Warn || !strings.Contains(c.Detail, "TAP networking") || c.Fix != "modprobe tun" {
		t.Errorf("missing tun: %+v", c)
	}
}

func TestBinaryChecks(t *testing.T) {
	if c := qemuCheck(allBinaries, "amd64"); c.Status != OK || c.Detail != "/usr/bin/qemu-system-x86_64" {
		t.Errorf("qemu found: %+v", c)
	}
	if c := qemuCheck(noBinaries, "amd64"); c.Status != Fail || c.Fix != "apt-get install -y qemu-system-x86" {
		t.Errorf("qemu missing: %+v", c)
	}
	if c := qemuCheck(noBinaries, "arm64"); c.Name != "qemu-system-aarch64" {
		t.Errorf("arm64 qemu: %+v", c)
	}
	t.Setenv("AIRLOCK_RUNSC", "")
	if c := runscCheck(noBinaries); c.Status != Fail || !strings.Contains(c.Fix, "on PATH") || !strings.Contains(c.Fix, "make runsc") {
		t.Errorf("runsc missing: %+v", c)
	}
	ownRunsc := func(name string) (string, error) {
		if name == "airlock-runsc" {
			return "/opt/airlock/bin/airlock-runsc", nil
		}
		return "", errors.New("not found")
	}
	if c := runscCheck(ownRunsc); c.Status != OK || c.Detail != "/opt/airlock/bin/airlock-runsc" {
		t.Errorf("airlock-runsc on PATH: %+v", c)
	}
	// AIRLOCK_RUNSC, when set, is the only one looked at.
	t.Setenv("AIRLOCK_RUNSC", "/nonexistent/airlock-runsc")
	if c := runscCheck(ownRunsc); c.Status != Fail || !strings.Contains(c.Detail, "AIRLOCK_RUNSC names /nonexistent/airlock-runsc") {
		t.Errorf("AIRLOCK_RUNSC naming nothing: %+v", c)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("AIRLOCK_RUNSC", exe)
	if c := runscCheck(noBinaries); c.Status != OK || c.Detail != exe {
		t.Errorf("AIRLOCK_RUNSC naming an executable: %+v", c)
	}
	if c := firecrackerCheck(noBinaries, true); c.Status != Skip {
		t.Errorf("firecracker missing: %+v", c)
	}
	if c := firecrackerCheck(allBinaries, false); c.Status != Warn {
		t.Errorf("firecracker without KVM: %+v", c)
	}
}

// counter returns a Tryer that counts its calls and returns err.
func counter(n *atomic.Int32, err error) Tryer {
	return func(ctx context.Context, level string) error {
		n.Add(1)
		return err
	}
}

func TestRunNilTryer(t *testing.T) {
	r := Run(context.Background(), Options{Root: fakeTree(t, goodTree()), LookPath: allBinaries, host: fakeHost(1000)})
	if len(r.Levels) != 3 {
		t.Fatalf("got %d levels", len(r.Levels))
	}
	for _, l := range r.Levels {
		want := "this version of airlock has no " + l.Name + " backend yet"
		if l.Works || l.Tried || l.Reason != want {
			t.Errorf("%s: works=%v tried=%v reason=%q, want %q", l.Name, l.Works, l.Tried, l.Reason, want)
		}
		if len(l.Checks) == 0 {
			t.Errorf("%s: environment checks must still be listed", l.Name)
		}
	}
	if r.Host.Kernel != "6.8.0-45-generic" || r.Host.Distro != "Test Linux 1" || r.Host.UID != 1000 {
		t.Errorf("host = %+v", r.Host)
	}
}

func TestRunTryerResults(t *testing.T) {
	var ok, bad, vm atomic.Int32
	r := Run(context.Background(), Options{
		Root:     fakeTree(t, goodTree()),
		LookPath: allBinaries,
		host:     fakeHost(1000),
		Try: map[string]Tryer{
			LevelProcess: counter(&ok, nil),
			LevelGVisor:  counter(&bad, errors.New("runsc: exit status 128")),
			LevelVM:      counter(&vm, nil),
		},
	})
	if p := findLevel(t, r, LevelProcess); !p.Works || !p.Tried || p.Reason != "" || ok.Load() != 1 {
		t.Errorf("process = %+v, calls %d", p, ok.Load())
	}
	g := findLevel(t, r, LevelGVisor)
	if g.Works || !g.Tried || !strings.Contains(g.Reason, "runsc: exit status 128") || bad.Load() != 1 {
		t.Errorf("gvisor = %+v, calls %d", g, bad.Load())
	}
	if v := findLevel(t, r, LevelVM); !v.Works || vm.Load() != 1 {
		t.Errorf("vm = %+v", v)
	}
}

func TestRunFailedPrerequisiteSkipsTryer(t *testing.T) {
	files := goodTree()
	files["proc/sys/user/max_user_namespaces"] = "0\n"
	t.Setenv("AIRLOCK_RUNSC", "")
	var process, gvisor, vm atomic.Int32
	r := Run(context.Background(), Options{
		Root:     fakeTree(t, files),
		LookPath: noBinaries, // no runsc, no qemu
		host:     fakeHost(1000),
		Try: map[string]Tryer{
			LevelProcess: counter(&process, nil),
			LevelGVisor:  counter(&gvisor, nil),
			LevelVM:      counter(&vm, nil),
		},
	})
	if n := process.Load() + gvisor.Load() + vm.Load(); n != 0 {
		t.Fatalf("Tryers called %d times despite failed prerequisites", n)
	}
	p := findLevel(t, r, LevelProcess)
	if p.Works || p.Tried || !strings.Contains(p.Reason, `"user namespaces"`) || p.Fix != "sysctl -w user.max_user_namespaces=15000" {
		t.Errorf("process = %+v", p)
	}
	v := findLevel(t, r, LevelVM)
	if v.Works || !strings.Contains(v.Reason, "qemu-system-x86_64") || v.Fix != "apt-get install -y qemu-system-x86" {
		t.Errorf("vm = %+v", v)
	}
}

// Warnings, such as falling back to TCG, do not stop the real try.
func TestRunWarningsStillTry(t *testing.T) {
	files := goodTree()
	files["proc/cpuinfo"] = cpuinfoPVM
	var vm atomic.Int32
	r := Run(context.Background(), Options{
		Root: fakeTree(t, files), LookPath: allBinaries, host: fakeHost(1000),
		Try: map[string]Tryer{LevelVM: counter(&vm, nil)},
	})
	if v := findLevel(t, r, LevelVM); !v.Works || vm.Load() != 1 || findCheck(t, v.Checks, "KVM").Status != Warn {
		t.Errorf("vm = %+v", v)
	}
}

func TestRunTryTimeoutAndPanic(t *testing.T) {
	stuck := make(chan struct{})
	defer close(stuck)
	r := Run(context.Background(), Options{
		Root: fakeTree(t, goodTree()), LookPath: allBinaries, host: fakeHost(0),
		TryTimeout: 50 * time.Millisecond,
		Try: map[string]Tryer{
			// Honours the deadline.
			LevelProcess: func(ctx context.Context, _ string) error { <-ctx.Done(); return ctx.Err() },
			// Ignores the deadline entirely.
			LevelGVisor: func(context.Context, string) error { <-stuck; return nil },
			LevelVM:     func(context.Context, string) error { panic("boom") },
		},
	})
	for _, name := range []string{LevelProcess, LevelGVisor} {
		if l := findLevel(t, r, name); l.Works || !strings.Contains(l.Reason, "no result within 50ms") {
			t.Errorf("%s = %+v", name, l)
		}
	}
	if v := findLevel(t, r, LevelVM); v.Works || !strings.Contains(v.Reason, "panicked: boom") {
		t.Errorf("vm = %+v", v)
	}
}

func TestRunDarwin(t *testing.T) {
	h := fakeHost(501)
	h.goos = "darwin"
	var calls atomic.Int32
	r := Run(context.Background(), Options{
		Root: t.TempDir(), LookPath: allBinaries, host: h,
		Try: map[string]Tryer{LevelProcess: counter(&calls, nil), LevelVM: counter(&calls, nil)},
	})
	if calls.Load() != 0 {
		t.Errorf("Tryers must not be called on darwin")
	}
	for _, l := range r.Levels {
		if l.Works || l.Reason == "" || len(l.Checks) == 0 {
			t.Errorf("%+v: want unsupported with a reason", l)
		}
	}
	if v := findLevel(t, r, LevelVM); !strings.Contains(v.Reason, "Virtualization.framework") ||
		!strings.Contains(v.Reason, "not available in this version") {
		t.Errorf("vm reason = %q", v.Reason)
	}
}

func TestWriteText(t *testing.T) {
	files := goodTree()
	files["proc/sys/kernel/apparmor_restrict_unprivileged_userns"] = "1\n"
	var calls atomic.Int32
	t.Setenv("AIRLOCK_RUNSC", "")
	r := Run(context.Background(), Options{
		Root: fakeTree(t, files), LookPath: noBinaries, host: fakeHost(1000),
		Try: map[string]Tryer{LevelGVisor: counter(&calls, nil), LevelVM: counter(&calls, nil)},
	})
	// Pretend the process level worked to see the ✓ line.
	r.Levels[0].Works, r.Levels[0].TryMillis = true, 42

	var buf bytes.Buffer
	if err := r.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		"✓ process  works (sandbox started in 42 ms)",
		"✗ gvisor   check \"runsc\" failed: neither airlock-runsc nor runsc was found beside airlock or on PATH",
		"✗ vm       check \"qemu-system-x86_64\" failed: not found on PATH",
		"fix: apt-get install -y qemu-system-x86",
		"fix: `make runsc` builds bin/airlock-runsc",
		"fix: sysctl -w kernel.apparmor_restrict_unprivileged_userns=0",
		"      userns,", // continuation lines of the AppArmor profile
		"fail  AppArmor userns restriction",
		"ok    user namespaces",
		"host: linux/amd64, kernel 6.8.0-45-generic, Test Linux 1, uid 1000",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestReportJSONRoundTrip(t *testing.T) {
	var calls atomic.Int32
	r := Run(context.Background(), Options{
		Root: fakeTree(t, goodTree()), LookPath: allBinaries, host: fakeHost(1000),
		Try: map[string]Tryer{LevelProcess: counter(&calls, nil)},
		CgroupInfo: func() (string, []string, bool, string) {
			return "v2", []string{"memory"}, false, "no delegated cgroup"
		},
	})
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(r, back) {
		t.Errorf("round trip changed the report:\n%+v\n%+v", r, back)
	}
	for _, key := range []string{`"host":`, `"os":"linux"`, `"uid":1000`, `"cpus":`, `"levels":`,
		`"works":true`, `"tried":true`, `"checks":`, `"status":"warn"`, `"fix":"no delegated cgroup"`} {
		if !bytes.Contains(b, []byte(key)) {
			t.Errorf("JSON lacks %s: %s", key, b)
		}
	}
}

func TestEgressCheck(t *testing.T) {
	root := t.TempDir()
	if c := egressCheck(root, 0); c.Status != Warn || c.Fix != "modprobe tun" {
		t.Errorf("no tun: %+v", c)
	}
	if err := os.MkdirAll(filepath.Join(root, "dev/net"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "dev/net/tun"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		// Root opens any file: the unprivileged verdicts below only
		// hold for another user.
	} else if c := egressCheck(root, os.Geteuid()); c.Status != Warn || !strings.Contains(c.Detail, "root") || !strings.Contains(c.Fix, "chmod 0666") {
		t.Errorf("unprivileged, tun 0600: %+v", c)
	}
	if err := os.Chmod(filepath.Join(root, "dev/net/tun"), 0o666); err != nil {
		t.Fatal(err)
	}
	if c := egressCheck(root, 1000); c.Status != OK || !strings.Contains(c.Detail, "agent") {
		t.Errorf("unprivileged, tun 0666: %+v", c)
	}
	if c := egressCheck(root, 0); c.Status != OK {
		t.Errorf("root: %+v", c)
	}
}

// TestGuestKernelCheck: the vm level names the cached guest kernel, or
// says how to build one.
func TestGuestKernelCheck(t *testing.T) {
	c := guestKernelCheck(t.TempDir(), "amd64")
	if c.Status != Warn || !strings.Contains(c.Fix, "airlock kernel build --arch x86_64") {
		t.Errorf("an empty cache: %+v", c)
	}
	dir := os.Getenv("AIRLOCK_TEST_KERNEL_CACHE")
	if dir == "" {
		t.Skip("no kernel cache given (make test gives AIRLOCK_TEST_KERNEL_CACHE)")
	}
	if c := guestKernelCheck(dir, "amd64"); c.Status != OK || !strings.Contains(c.Detail, "vmlinux") {
		t.Errorf("the test kernel cache %s: %+v", dir, c)
	}
}
