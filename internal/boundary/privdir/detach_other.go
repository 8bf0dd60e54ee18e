//go:build !linux

package privdir

// detachUnder: only Linux backends mount beneath a private directory.
func detachUnder(string) bool { return false }
