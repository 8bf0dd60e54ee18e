package process

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
)

// idmappedTree returns a detached, read-only mount of dir through which
// the files of host ids 0 to 65535 belong to the sandbox's ids of the
// same number: an idmapped mount (Linux 5.12 and a filesystem that
// supports them) with the sandbox's own mapping m. The agent attaches it
// in its mount namespace as the lower layer of the root's overlay, so a
// root prepared and owned by host root is the sandbox root's own (it
// can copy files up and change them), a file of host uid 1000 in it is
// uid 1000's inside, and the sandbox's root stays an unprivileged uid on
// the host. Files of host ids beyond the map are nobody's inside.
//
// It is nodev, and not nosuid: a set-uid program of the tree runs with
// the sandbox id of its owner, in the sandbox's namespace, which is
// what a prepared root's su or sudo need. No host id is reached that
// way: every id the mount shows is one of the sandbox's, the kernel
// honours set-id bits only for owners mapped into the caller's
// namespace, and the mount is only ever attached inside the sandbox's
// own mount namespace, under an overlay that belongs to its user
// namespace (see mnt_may_suid), so no host process can execute through
// it with set-id bits.
//
// The mapping has to be given as a user namespace: a holder process,
// the agent binary bin in its hold mode, lives in a new one with that
// mapping until the mount is made.
func idmappedTree(bin *os.File, dir string, m idMapping) (_ *os.File, err error) {
	uid, gid := m.root()
	stdin, release, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer stdin.Close()
	holder := &exec.Cmd{
		Path:       "/proc/self/fd/3",
		Args:       []string{"airlock-guest", agentproto.HoldArg},
		Env:        []string{},
		Dir:        "/",
		Stdin:      stdin,
		ExtraFiles: []*os.File{bin},
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags:                 syscall.CLONE_NEWUSER,
			UidMappings:                m.uids,
			GidMappings:                m.gids,
			GidMappingsEnableSetgroups: false,
			Credential:                 &syscall.Credential{Uid: 0, Gid: 0, NoSetGroups: true},
			Pdeathsig:                  syscall.SIGKILL,
		},
	}
	if err := startOwned(holder, uid, gid); err != nil {
		release.Close()
		return nil, fmt.Errorf("start a user namespace with the sandbox's mapping: %w", err)
	}
	defer func() {
		release.Close() // the holder exits at the end of its input
		if werr := holder.Wait(); werr != nil && err == nil {
			err = fmt.Errorf("the user namespace's holder: %w", werr)
		}
	}()
	return idmapMount(bin, dir, holder.Process.Pid)
}

// idmapMount returns a detached, read-only, nodev mount of dir idmapped
// with the user namespace of process pid (see idmappedTree). If dir is
// an overlay's mount point, which the kernel cannot idmap, it is an
// overlay of its layers, each idmapped, that the agent binary bin
// assembles (see idmapOverlay).
func idmapMount(bin *os.File, dir string, pid int) (*os.File, error) {
	userns, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", pid))
	if err != nil {
		return nil, fmt.Errorf("open the sandbox mapping's user namespace: %w", err)
	}
	defer userns.Close()
	layers, err := overlayLayers(dir)
	switch {
	case err == nil:
		return idmapOverlay(bin, layers, userns)
	case !errors.Is(err, errNotOverlay):
		return nil, fmt.Errorf("find the layers of the overlay root %s: %w", dir, err)
	}
	return idmapTree(dir, userns)
}

// idmapTree returns a detached, read-only, nodev mount of dir idmapped
// with the user namespace userns.
func idmapTree(dir string, userns *os.File) (*os.File, error) {
	fd, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return nil, fmt.Errorf("open_tree %s: %w", dir, err)
	}
	tree := os.NewFile(uintptr(fd), dir)
	attr := &unix.MountAttr{
		Attr_set:  unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NODEV,
		Userns_fd: uint64(userns.Fd()),
	}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, attr); err != nil {
		tree.Close()
		return nil, fmt.Errorf("idmap the mount of %s: %w", dir, err)
	}
	return tree, nil
}

// sendIdmappedTree makes the idmapped mount of dir with the user
// namespace of the agent, process pid, which the sandbox's mapping
// already has, and sends it to the agent on ch: no process of its own
// is needed to hold a namespace with that mapping.
func sendIdmappedTree(ch, bin *os.File, pid int, dir string) error {
	tree, err := idmapMount(bin, dir, pid)
	if err != nil {
		return err
	}
	defer tree.Close()
	if err := unix.Sendmsg(int(ch.Fd()), []byte{1}, unix.UnixRights(int(tree.Fd())), nil, 0); err != nil {
		return fmt.Errorf("send the idmapped mount of %s to the agent: %w", dir, err)
	}
	return nil
}
