//go:build !linux

package airlock

// hostMemoryBytes is unknown off Linux, where no boundary runs yet.
func hostMemoryBytes() int64 { return 0 }

// canMountDisks: disk-backed writable trees are made on Linux only.
func canMountDisks() bool { return false }
