package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	pathrs "github.com/cyphar/filepath-securejoin/pathrs-lite"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
)

// enterRoot makes root, a directory of the sandbox, the root of the
// calling process, which is alone in a mount namespace of its own (the
// spawner, started with CLONE_NEWNS): the sandbox's /dev is bound in it,
// a new /proc of the process's PID namespace is mounted in it while the
// sandbox's own is still visible (the kernel allows a proc mount only
// then), binds are bound in it, and the old root is then detached, so
// nothing outside root is reachable from here on.
//
// Every path in root is resolved in it (openat2 RESOLVE_IN_ROOT): a
// container's root holds whatever its image put there, symlinks
// included, and none of them leads a mount outside it.
func enterRoot(root string, binds []agentproto.Bind) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	// The root becomes a mount point of its own, as pivot_root needs.
	if err := unix.Mount(root, root, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind the container's root %s: %w", root, err)
	}
	r, err := openCRoot(root)
	if err != nil {
		return err
	}
	defer r.Close()
	if err := bindInto(r, "/dev", "/dev", false); err != nil {
		return err
	}
	procAt, err := target(r, "/proc", true)
	if err != nil {
		return err
	}
	err = unix.Mount("proc", procAt.path(), "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
	procAt.Close()
	if err != nil {
		return fmt.Errorf("mount /proc in the container's root: %w", err)
	}
	for _, b := range binds {
		if err := bindInto(r, b.Source, b.Target, b.ReadOnly); err != nil {
			return err
		}
	}
	if err := os.Chdir(root); err != nil {
		return err
	}
	// pivot_root(".", "."): the old root goes under the new one, and
	// is then detached from it.
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("enter the container's root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the sandbox's root from the container's: %w", err)
	}
	return os.Chdir("/")
}

// inRoot is a path opened in a container's root, to mount on.
type inRoot struct{ f *os.File }

func (p inRoot) path() string { return fmt.Sprintf("/proc/self/fd/%d", p.f.Fd()) }
func (p inRoot) Close()       { p.f.Close() }

// cRoot is a container's root, opened.
type cRoot struct{ f *os.File }

func openCRoot(root string) (*cRoot, error) {
	f, err := os.OpenFile(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open the container's root: %w", err)
	}
	return &cRoot{f}, nil
}

func (c *cRoot) Close() { c.f.Close() }

// target opens name in c to mount on, making it (a directory, or an
// empty file) and its parents if they are missing. Every component is
// resolved in the root, symlinks included, as if it were /
// (filepath-securejoin's pathrs-lite, which runc uses for the same).
func target(c *cRoot, name string, dir bool) (inRoot, error) {
	if dir {
		f, err := pathrs.MkdirAllHandle(c.f, name, 0o755)
		if err != nil {
			return inRoot{}, fmt.Errorf("make %s in the container's root: %w", name, err)
		}
		return inRoot{f}, nil
	}
	parent, err := pathrs.MkdirAllHandle(c.f, filepath.Dir(name), 0o755)
	if err != nil {
		return inRoot{}, fmt.Errorf("make %s in the container's root: %w", filepath.Dir(name), err)
	}
	fd, err := unix.Openat(int(parent.Fd()), filepath.Base(name), unix.O_RDONLY|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	parent.Close()
	switch {
	case err == nil:
		unix.Close(fd)
	case errors.Is(err, unix.EISDIR), errors.Is(err, unix.ELOOP):
		// A directory, or a symlink that the lookup below resolves
		// in the root.
	default:
		return inRoot{}, fmt.Errorf("make %s in the container's root: %w", name, err)
	}
	f, err := pathrs.OpenatInRoot(c.f, name)
	if err != nil {
		return inRoot{}, fmt.Errorf("open %s in the container's root: %w", name, err)
	}
	return inRoot{f}, nil
}

// bindInto binds src, a path of the sandbox, at dst in r, read-only if
// ro: a clone of its mount tree, attached on dst resolved in r.
func bindInto(r *cRoot, src, dst string, ro bool) error {
	fi, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("bind %s into the container: %w", src, err)
	}
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return fmt.Errorf("bind %s into the container: %w", src, err)
	}
	defer unix.Close(fd)
	remount := false
	if ro {
		attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}
		err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, attr)
		switch {
		case errors.Is(err, unix.ENOSYS):
			remount = true // gVisor's Sentry: once attached, below
		case err != nil:
			return fmt.Errorf("make the bind of %s read-only: %w", src, err)
		}
	}
	at, err := target(r, dst, fi.IsDir())
	if err != nil {
		return err
	}
	defer at.Close()
	if err := unix.MoveMount(fd, "", int(at.f.Fd()), "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("bind %s at %s in the container: %w", src, dst, err)
	}
	if remount {
		// The target now leads to the bind: opened again, it is the
		// mount's root, which a remount changes.
		on, err := target(r, dst, fi.IsDir())
		if err != nil {
			return err
		}
		defer on.Close()
		if err := unix.Mount("", on.path(), "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("make the bind of %s read-only: %w", src, err)
		}
	}
	return nil
}
