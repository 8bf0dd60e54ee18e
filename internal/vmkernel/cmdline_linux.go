package vmkernel

import (
	"fmt"
	"os"
)

// HostTSCkHz is the host's TSC frequency in kHz, from /proc/cpuinfo: what
// a guest under TCG needs on its command line (CommandLine).
func HostTSCkHz() (int, error) {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return 0, fmt.Errorf("read the CPU's frequency: %w", err)
	}
	defer f.Close()
	return tscKHz(f)
}
