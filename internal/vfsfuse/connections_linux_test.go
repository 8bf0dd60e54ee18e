package vfsfuse

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestPrivateConnections lists the kernel's FUSE connections through a
// mount of fusectl attached nowhere.
func TestPrivateConnections(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting fusectl needs root")
	}
	if _, err := os.Stat(connectionsDir); err != nil {
		t.Skip("the kernel has no FUSE support here:", err)
	}
	var magic int64
	if err := privateConnections(func(dir int) error {
		var st unix.Statfs_t
		if err := unix.Fstatfs(dir, &st); err != nil {
			return err
		}
		magic = st.Type
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if magic != fusectlMagic {
		t.Errorf("the private mount is of type %#x, not fusectl", magic)
	}
}
