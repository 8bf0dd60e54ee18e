//go:build linux

package doctor

import (
	"context"
	"os"
	"runtime"
	"strings"
	"testing"
)

// TestLiveUserns creates a real user namespace on this machine.
func TestLiveUserns(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("the live user namespace probe is asserted only as root")
	}
	if err := probeUserns(context.Background()); err != nil {
		t.Fatalf("creating a user namespace as root failed: %v", err)
	}
}

// TestLiveVirt checks the hardware virtualisation verdict against the real
// /proc/cpuinfo, so it holds both on machines with vmx/svm and on machines
// (like PVM guests) that have /dev/kvm without them.
func TestLiveVirt(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("cpuinfo flags are checked on x86 only")
	}
	flags, err := cpuFlags("/proc/cpuinfo")
	if err != nil {
		t.Fatal(err)
	}
	hasHW := flags["vmx"] || flags["svm"]

	r := Run(context.Background(), Options{})
	vm := findLevel(t, r, LevelVM)
	hw := findCheck(t, vm.Checks, "hardware virtualisation")
	kvm := findCheck(t, vm.Checks, "KVM")
	t.Logf("hardware virtualisation: %s: %s", hw.Status, hw.Detail)
	t.Logf("KVM: %s: %s", kvm.Status, kvm.Detail)

	if hasHW {
		if hw.Status != OK {
			t.Errorf("cpuinfo has vmx/svm but the check says %+v", hw)
		}
		return
	}
	if hw.Status != Warn || kvm.Status != Warn || !strings.Contains(kvm.Detail, "TCG") {
		t.Errorf("no vmx/svm: want hardware virtualisation absent and TCG, got %+v / %+v", hw, kvm)
	}
	if ProbeVirt("/", runtime.GOARCH).KVMUsable() {
		t.Error("KVM reported usable without vmx/svm")
	}
}

// TestLiveRun runs every live probe and checks nothing is reported as
// working without a Tryer.
func TestLiveRun(t *testing.T) {
	r := Run(context.Background(), Options{})
	if r.Host.OS != "linux" || r.Host.Kernel == "" || r.Host.CPUs < 1 {
		t.Errorf("host = %+v", r.Host)
	}
	for _, l := range r.Levels {
		if l.Works || l.Tried {
			t.Errorf("%s works without a backend", l.Name)
		}
	}
	if os.Getuid() == 0 {
		p := findLevel(t, r, LevelProcess)
		if c := findCheck(t, p.Checks, "user namespace probe"); c.Status != OK {
			t.Errorf("user namespace probe as root: %+v", c)
		}
	}
}
