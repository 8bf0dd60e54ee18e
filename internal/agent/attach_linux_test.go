package agent

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
)

// TestAttachOnlyDirectoryOrFile: a direct mount whose host path became a
// socket after the configuration was checked binds nothing.
func TestAttachOnlyDirectoryOrFile(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("cloning a host path needs root")
	}
	dir := t.TempDir()
	sock := filepath.Join(dir, "s")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	tree, err := unix.OpenTree(unix.AT_FDCWD, sock, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		t.Skipf("open_tree of a socket: %v", err)
	}
	root, err := os.OpenRoot(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	err = attachOne(root, agentproto.DirectMount{Target: "/x", FD: tree})
	if err == nil || !strings.Contains(err.Error(), "neither a directory nor a regular file") {
		t.Fatalf("attach of a socket: %v", err)
	}
	if _, err := root.Stat("x"); err == nil {
		t.Error("a mount point was made for a socket")
	}
}
