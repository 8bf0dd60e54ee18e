package vmkernel

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// CommandLine is the kernel command line of the x86_64 guest kernel
// under QEMU's microvm (run with acpi=off and -no-reboot), followed by
// extra: the console on the UART, a panic or a reboot ends the machine
// at once (reboot=t: a triple fault, which -no-reboot turns into QEMU's
// exit). tscKHz, when not 0, is the TSC's frequency: under TCG the
// guest's calibration of its TSC against the PIT is unreliable (it fails
// when the host is busy; the guest then marks the TSC unstable and keeps
// time by jiffies, and microvm has no HPET or ACPI PM timer to fall back
// on), and there the guest's TSC is the host's (HostTSCkHz).
func CommandLine(tscKHz int, extra ...string) string {
	// no_timer_check: the kernel's check that the PIT's interrupt
	// reaches the IO-APIC in time fails on a busy host under TCG, and
	// the guest panics at boot ("IO-APIC + timer doesn't work").
	args := []string{"console=ttyS0", "panic=-1", "reboot=t", "no_timer_check"}
	if tscKHz > 0 {
		args = append(args, "tsc_early_khz="+strconv.Itoa(tscKHz))
	}
	return strings.Join(append(args, extra...), " ")
}

// tscKHz reads the processor's frequency ("cpu MHz") from the text of
// /proc/cpuinfo, which on x86 Linux with a constant TSC is the TSC's.
func tscKHz(cpuinfo io.Reader) (int, error) {
	sc := bufio.NewScanner(cpuinfo)
	for sc.Scan() {
		k, v, ok := bytes.Cut(sc.Bytes(), []byte(":"))
		if !ok || strings.TrimSpace(string(k)) != "cpu MHz" {
			continue
		}
		mhz, err := strconv.ParseFloat(strings.TrimSpace(string(v)), 64)
		if err != nil || mhz <= 0 {
			return 0, fmt.Errorf("read the CPU's frequency: bad cpu MHz %q", strings.TrimSpace(string(v)))
		}
		return int(mhz * 1000), nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("read the CPU's frequency: %w", err)
	}
	return 0, fmt.Errorf("read the CPU's frequency: no cpu MHz line in /proc/cpuinfo")
}
