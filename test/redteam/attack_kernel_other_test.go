//go:build linux && !amd64

package redteam_test

// archKernelProbes: no architecture-specific attacks beyond the common
// table on this architecture.
func archKernelProbes() []kernelProbe { return nil }
