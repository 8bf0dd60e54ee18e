//go:build !linux

package testnet

import "testing"

// Main runs m. Network namespaces are Linux's: elsewhere Available is
// false and every World skips.
func Main(m *testing.M) int { return MainFunc(m.Run) }

// MainFunc runs run, with Available false.
func MainFunc(run func() int) int {
	reason = "network namespaces need Linux"
	return run()
}
