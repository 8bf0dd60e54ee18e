package doctor

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// tcgNote explains the fallback when KVM is not usable.
const tcgNote = "the vm level falls back to TCG software emulation (15-100x slower guest CPU)"

// Virt is what the host offers for hardware-accelerated virtual machines.
//
// The existence of /dev/kvm alone never counts as hardware virtualisation:
// paravirtual KVM implementations such as PVM provide /dev/kvm on CPUs
// without vmx/svm, and stock guest kernels die on them with
// "KVM internal error ... emulation failure".
type Virt struct {
	Arch       string
	CPUInfo    bool   // /proc/cpuinfo was readable
	VMX, SVM   bool   // CPU virtualisation extensions (x86)
	Hypervisor bool   // this host is itself a guest ("hypervisor" CPU flag)
	PVM        bool   // /dev/kvm is (or is likely) provided by PVM
	Nested     string // e.g. "kvm_intel nested=Y"; "" when no KVM module parameter was found
	KVMDevice  bool   // /dev/kvm exists
	KVMMode    os.FileMode
	KVMOpenErr error // result of opening /dev/kvm read-write
}

// ProbeVirt inspects /proc/cpuinfo, /sys/module and /dev/kvm below root.
func ProbeVirt(root, goarch string) Virt {
	v := Virt{Arch: goarch}
	if flags, err := cpuFlags(filepath.Join(root, "proc/cpuinfo")); err == nil {
		v.CPUInfo = true
		v.VMX, v.SVM, v.Hypervisor = flags["vmx"], flags["svm"], flags["hypervisor"]
		for f := range flags {
			if strings.HasPrefix(f, "pvm") {
				v.PVM = true
			}
		}
	}
	if _, err := os.Stat(filepath.Join(root, "sys/module/kvm_pvm")); err == nil {
		v.PVM = true
	}
	for _, mod := range []string{"kvm_intel", "kvm_amd"} {
		if s, err := readFile(root, "sys/module/"+mod+"/parameters/nested"); err == nil {
			v.Nested = mod + " nested=" + s
		}
	}
	dev := filepath.Join(root, "dev/kvm")
	if fi, err := os.Stat(dev); err == nil {
		v.KVMDevice, v.KVMMode = true, fi.Mode().Perm()
		f, err := os.OpenFile(dev, os.O_RDWR, 0)
		if err == nil {
			f.Close()
		}
		v.KVMOpenErr = err
	}
	// A guest with /dev/kvm but without vmx/svm can only be running a
	// paravirtual KVM such as PVM.
	if v.KVMDevice && v.Hypervisor && !v.VMX && !v.SVM && v.x86() {
		v.PVM = true
	}
	return v
}

// cpuFlags returns the feature flags of the first CPU in a cpuinfo file
// ("flags" on x86, "Features" on arm64).
func cpuFlags(path string) (map[string]bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	flags := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		if k = strings.TrimSpace(k); k == "flags" || k == "Features" {
			for _, fl := range strings.Fields(v) {
				flags[fl] = true
			}
			break
		}
	}
	return flags, sc.Err()
}

func (v Virt) x86() bool { return v.Arch == "amd64" || v.Arch == "386" }

// HardwareVirt reports whether the CPU offers virtualisation extensions.
// On x86 this is the vmx or svm flag. arm64 does not expose EL2 in
// /proc/cpuinfo, but its kernels only create /dev/kvm when booted at EL2,
// so there the device is the best available evidence.
func (v Virt) HardwareVirt() bool {
	if v.x86() {
		return v.VMX || v.SVM
	}
	return v.KVMDevice && !v.PVM
}

// KVMUsable reports whether the vm level can use KVM: hardware
// virtualisation is present and /dev/kvm opens read-write.
func (v Virt) KVMUsable() bool {
	return v.HardwareVirt() && v.KVMDevice && v.KVMOpenErr == nil
}

// Checks renders the probe as the "hardware virtualisation" and "KVM"
// checks of the vm level.
func (v Virt) Checks() []Check {
	return []Check{v.hardwareCheck(), v.kvmCheck()}
}

func (v Virt) hardwareCheck() Check {
	c := Check{Name: "hardware virtualisation"}
	var notes []string
	switch {
	case !v.x86():
		c.Status = OK
		c.Detail = "arm64 does not list virtualisation in /proc/cpuinfo; relying on /dev/kvm"
		if !v.HardwareVirt() {
			c.Status, c.Detail = Warn, "no /dev/kvm, so no EL2 virtualisation; "+tcgNote
			c.Fix = "boot the kernel at EL2 (or enable nested virtualisation for this VM) and load KVM"
		}
		return c
	case !v.CPUInfo:
		c.Status, c.Detail = Warn, "cannot read /proc/cpuinfo; "+tcgNote
		return c
	case v.VMX:
		c.Status, c.Detail = OK, "CPU flag vmx (Intel VT-x)"
	case v.SVM:
		c.Status, c.Detail = OK, "CPU flag svm (AMD-V)"
	default:
		c.Status, c.Detail = Warn, "no vmx or svm flag in /proc/cpuinfo"
		if v.Hypervisor {
			notes = append(notes, "this host is a VM without nested virtualisation")
			c.Fix = "enable nested virtualisation for this VM on its host (e.g. modprobe kvm_intel nested=1 there, " +
				"or the cloud provider's nested virtualisation option)"
		} else {
			c.Fix = "enable Intel VT-x or AMD-V (SVM) in the firmware setup"
		}
	}
	if v.Hypervisor && c.Status == OK {
		notes = append(notes, "nested inside a hypervisor")
	}
	if v.Nested != "" {
		notes = append(notes, "offers nested virtualisation to its own guests: "+v.Nested)
	}
	if len(notes) > 0 {
		c.Detail += "; " + strings.Join(notes, "; ")
	}
	return c
}

func (v Virt) kvmCheck() Check {
	c := Check{Name: "KVM"}
	state := "/dev/kvm missing"
	if v.KVMDevice {
		state = fmt.Sprintf("/dev/kvm mode %04o", v.KVMMode)
		if v.KVMOpenErr == nil {
			state += ", opens read-write"
		} else {
			state += ", cannot be opened: " + errnoText(v.KVMOpenErr)
		}
	}
	switch {
	case v.KVMUsable():
		c.Status, c.Detail = OK, "KVM usable: "+state
	case !v.HardwareVirt():
		c.Status = Warn
		c.Detail = "not usable: " + state
		if v.KVMDevice {
			c.Detail += ", but the CPU has no hardware virtualisation, so it is not counted"
			if v.PVM {
				c.Detail += " (it is provided by PVM, on which stock guest kernels fail with " +
					"\"KVM internal error ... emulation failure\")"
			}
		}
		c.Detail += "; " + tcgNote
		c.Fix = v.hardwareCheck().Fix
	case !v.KVMDevice:
		c.Status, c.Detail = Warn, "not usable: "+state+"; "+tcgNote
		c.Fix = "sudo modprobe kvm_intel (Intel) or sudo modprobe kvm_amd (AMD)"
	default:
		c.Status, c.Detail = Warn, "not usable: "+state+"; "+tcgNote
		c.Fix = "sudo usermod -aG kvm $USER and log in again (or sudo chmod 0666 /dev/kvm)"
	}
	return c
}
