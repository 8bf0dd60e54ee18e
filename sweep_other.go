//go:build !linux

package airlock

// Sweep has nothing to clean where sandboxes use no host cgroups.
func Sweep() []string { return nil }

// Reclaim has nothing to clean where sandboxes use no host cgroups.
func Reclaim(id string) error { return nil }
