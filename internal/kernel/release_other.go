//go:build !linux

package kernel

// Release is "" where the kernel is not Linux.
func Release() string { return "" }
