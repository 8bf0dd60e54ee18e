//go:build !linux

package testnet

import "testing"

// Main runs m. Network namespaces are Linux's: elsewhere Available is
// false and every World skips.
func Main(m *testing.M) int {
	reason = "network namespaces need Linux"
	return m.Run()
}
