package process

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
)

// hostMounts opens, under root, what the agent needs for boot's mounts
// and cannot get itself: a detached clone of each direct mount's host
// directory (the sandbox's ids may not reach it), and a FUSE device
// node that the sandbox's root (uid, gid on the host) may open, since
// the host's /dev/fuse is root's alone. The files are the agent's
// descriptors from first on, in order; boot is filled in to name them.
// Unprivileged, the agent does both itself and nothing is returned.
func hostMounts(boot *agentproto.Boot, uid, gid, first int) (_ []*os.File, err error) {
	boot.Root.FuseFD = 0
	for i := range boot.Root.Direct {
		boot.Root.Direct[i].FD = 0
	}
	if os.Getuid() != 0 {
		return nil, nil
	}
	var files []*os.File
	defer func() {
		if err != nil {
			closeFiles(files)
		}
	}()
	for i, d := range boot.Root.Direct {
		fd, err := unix.OpenTree(unix.AT_FDCWD, d.HostPath, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
		if err != nil {
			return nil, fmt.Errorf("host mount at %s: clone host directory %s: %w", d.Target, d.HostPath, err)
		}
		boot.Root.Direct[i].FD = first + len(files)
		files = append(files, os.NewFile(uintptr(fd), "mount"))
	}
	if len(boot.Root.VFS) > 0 {
		node, err := fuseNode(uid, gid)
		if err != nil {
			return nil, fmt.Errorf("programmable mounts: %w", err)
		}
		boot.Root.FuseFD = first + len(files)
		files = append(files, node)
	}
	return files, nil
}

// fuseNode makes a FUSE device node that only uid may open, and returns
// an O_PATH descriptor of it; the node's name is gone at once. It is
// made in /dev, where device nodes work (other file systems are often
// mounted nodev).
func fuseNode(uid, gid int) (*os.File, error) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	p := filepath.Join("/dev", ".airlock-fuse-"+hex.EncodeToString(b[:]))
	if err := unix.Mknod(p, unix.S_IFCHR|0o600, int(unix.Mkdev(10, 229))); err != nil {
		return nil, fmt.Errorf("make a FUSE device node: %w", err)
	}
	defer os.Remove(p)
	if err := os.Lchown(p, uid, gid); err != nil {
		return nil, fmt.Errorf("give the FUSE device node to the sandbox: %w", err)
	}
	fd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("open the FUSE device node: %w", err)
	}
	return os.NewFile(uintptr(fd), "fuse"), nil
}
