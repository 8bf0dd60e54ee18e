package vm

import (
	"bufio"
	"bytes"
	"os"
)

// HardwareVirtualization reports whether KVM can run a guest here: the
// CPU has vmx or svm and /dev/kvm opens. The device alone says nothing (a
// paravirtual KVM, as on some cloud machines, has one and cannot run
// stock kernels).
func HardwareVirtualization() bool {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return false
	}
	defer f.Close()
	found := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() && !found {
		k, v, ok := bytes.Cut(sc.Bytes(), []byte(":"))
		if !ok || string(bytes.TrimSpace(k)) != "flags" {
			continue
		}
		for _, fl := range bytes.Fields(v) {
			if string(fl) == "vmx" || string(fl) == "svm" {
				found = true
			}
		}
		break
	}
	if !found {
		return false
	}
	kvm, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return false
	}
	kvm.Close()
	return true
}
