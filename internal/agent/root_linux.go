package agent

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
	"github.com/airlock-sandbox/airlock/internal/fdpass"
)

// buildRoot assembles the sandbox's root filesystem under the stage
// directory and pivots into it. It runs as root of a fresh user and mount
// namespace, so nothing here touches the host's mount table.
func buildRoot(b *agentproto.Boot) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	stage := b.Root.Stage
	if stage == "" || !filepath.IsAbs(stage) {
		return fmt.Errorf("stage directory %q must be absolute", stage)
	}
	// A prepared root may live under the stage directory; keep a handle on
	// it before the stage is covered.
	var rootfsFD int = -1
	if b.Root.RootFSChan > 0 {
		fd, err := receiveMount(b.Root.RootFSChan)
		unix.Close(b.Root.RootFSChan)
		if err != nil {
			return fmt.Errorf("receive the idmapped mount of rootfs %s from the supervisor: %w", b.Root.RootFS, err)
		}
		b.Root.RootFSFD = fd
	}
	switch {
	case b.Root.RootFSFD > 0:
		// An idmapped mount of it, attached below once the stage is up.
		unix.CloseOnExec(b.Root.RootFSFD)
		defer unix.Close(b.Root.RootFSFD)
	case b.Root.RootFS != "":
		fd, err := unix.Open(b.Root.RootFS, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open rootfs %s (it must be a directory the sandbox's uid can read): %w", b.Root.RootFS, err)
		}
		defer unix.Close(fd)
		rootfsFD = fd
	}
	// So may a direct mount's host directory (a temporary directory
	// under /tmp, the process level's stage, when the host could not
	// clone it itself).
	if err := cloneDirect(&b.Root); err != nil {
		return err
	}
	if err := mountWritable(stage, &b.Root); err != nil {
		return err
	}
	root := stage
	if b.Root.RootFS != "" {
		root = filepath.Join(stage, "merged")
		for _, d := range []string{"upper", "work", "merged", "lower"} {
			if err := os.Mkdir(filepath.Join(stage, d), 0o755); err != nil {
				return err
			}
		}
		lower := fmt.Sprintf("/proc/self/fd/%d", rootfsFD)
		if b.Root.RootFSFD > 0 {
			// overlayfs takes a layer from this mount namespace only;
			// the sandbox never sees it, being outside the new root.
			lower = filepath.Join(stage, "lower")
			if err := unix.MoveMount(b.Root.RootFSFD, "", unix.AT_FDCWD, lower, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
				return fmt.Errorf("attach the idmapped mount of rootfs %s: %w", b.Root.RootFS, err)
			}
		}
		// userxattr: overlayfs keeps what it knows of a directory
		// (opaque, redirected) in user.overlay.* attributes, which root
		// of a user namespace may set, instead of trusted.overlay.*,
		// which it may not: without it a directory made where a lower
		// one was removed fails with EIO.
		o := fmt.Sprintf("lowerdir=%s,upperdir=%s/upper,workdir=%s/work", lower, stage, stage)
		if b.Mode != "vm" {
			// In a micro-VM the agent is root of the guest's first
			// user namespace, and trusted.* attributes are its own.
			o += ",userxattr"
		}
		if err := unix.Mount("overlay", root, "overlay", 0, o); err != nil {
			return fmt.Errorf("mount an overlay on rootfs %s: %w", b.Root.RootFS, err)
		}
	} else {
		for _, d := range agentproto.HostRootDirs() {
			if err := replicate("/"+d, filepath.Join(root, d)); err != nil {
				return err
			}
		}
	}
	if err := prepareTree(root, &b.Root); err != nil {
		return err
	}
	if len(b.Root.TrustCA) > 0 {
		if err := installCA(root, b.Root.TrustCA); err != nil {
			return err
		}
	}
	if err := attachDirect(root, &b.Root); err != nil {
		return err
	}
	if err := unix.Mount("proc", filepath.Join(root, "proc"), "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	// /dev/shm is a directory of the writable tree, so that shared
	// memory files count in the sandbox's disk like any other: with a
	// prepared root, beside the overlay's layers; otherwise under /dev,
	// where the /dev tmpfs covers it.
	shm := filepath.Join(stage, "shm")
	if b.Root.RootFS == "" {
		shm = filepath.Join(root, "dev", "shm")
	}
	if err := os.Mkdir(shm, 0o777); err != nil {
		return fmt.Errorf("make /dev/shm: %w", err)
	}
	if err := os.Chmod(shm, 0o777|os.ModeSticky); err != nil {
		return fmt.Errorf("make /dev/shm: %w", err)
	}
	shmTree, err := unix.OpenTree(unix.AT_FDCWD, shm, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("make /dev/shm: %w", err)
	}
	defer unix.Close(shmTree)
	if err := buildDev(filepath.Join(root, "dev"), shmTree); err != nil {
		return err
	}
	if err := os.Chdir(root); err != nil {
		return err
	}
	if b.Mode == "gvisor" {
		// gVisor's Sentry ends the sandbox when the mount of its
		// first root goes (its gofer's connection closes), so that
		// root stays, covered by the sandbox's as switch_root covers
		// an initramfs, and the agent, and every command after it,
		// is chrooted there. The covered root holds only the
		// read-only directories the sandbox's root is made of.
		if err := unix.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
			return fmt.Errorf("move the sandbox root over the bundle's: %w", err)
		}
		if err := unix.Chroot("."); err != nil {
			return fmt.Errorf("enter the sandbox root: %w", err)
		}
	} else {
		// pivot_root(".", ".") stacks the old root on top of the new
		// one; detaching it leaves only the sandbox's tree.
		if err := unix.PivotRoot(".", "."); err != nil {
			return fmt.Errorf("pivot into the sandbox root: %w", err)
		}
		if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
			return fmt.Errorf("detach the host root: %w", err)
		}
	}
	if err := os.Chdir("/"); err != nil {
		return err
	}
	if err := makeWorkdir(b.Root.Workdir); err != nil {
		return err
	}
	return coverBlocked(&b.Root)
}

// sandboxDirs are the directories every sandbox root has, made when
// missing; the first ones are mount points.
var sandboxDirs = []struct {
	name string
	mode os.FileMode
}{{"proc", 0o555}, {"dev", 0o755}, {"etc", 0o755}, {"tmp", os.ModeSticky | 0o777}, {"workspace", 0o755},
	{"root", 0o700}, {"home", 0o755}, {"var", 0o755}, {"var/tmp", os.ModeSticky | 0o777}, {"run", 0o755}, {"mnt", 0o755}}

// prepareTree makes the directories and /etc files every sandbox root
// has in root. A prepared root (an image) is hostile: a symbolic link
// where one of these should be would, followed from here, lead into the
// host's tree, which this mount namespace still sees until the pivot.
// So everything is done through an os.Root of the new root, which keeps
// every path inside it, and what is in the way of a directory airlock
// makes (a link, a file) is replaced in the root's writable layer: in
// particular /proc and /dev, mounted by path below, are then real
// directories of the new root.
func prepareTree(root string, spec *agentproto.RootSpec) error {
	r, err := os.OpenRoot(root)
	if err != nil {
		return fmt.Errorf("open the sandbox's root: %w", err)
	}
	defer r.Close()
	dir := func(name string, mode os.FileMode) error {
		if fi, err := r.Lstat(name); err == nil && !fi.IsDir() {
			if err := r.Remove(name); err != nil {
				return fmt.Errorf("replace /%s (%s) with a directory: %w", name, fi.Mode().Type(), err)
			}
		}
		if err := r.MkdirAll(name, mode.Perm()); err != nil {
			return fmt.Errorf("make /%s: %w", name, err)
		}
		if err := r.Chmod(name, mode); err != nil {
			return fmt.Errorf("make /%s: %w", name, err)
		}
		return nil
	}
	for _, d := range sandboxDirs {
		if err := dir(d.name, d.mode); err != nil {
			return err
		}
	}
	if spec.RootFS == "" {
		for _, name := range spec.HostEtc {
			if err := replicate(filepath.Join("/etc", name), filepath.Join(root, "etc", name)); err != nil {
				return err
			}
		}
	}
	for name, data := range spec.Etc {
		rel := filepath.Join("etc", filepath.Clean("/"+name))
		if err := r.MkdirAll(filepath.Dir(rel), 0o755); err != nil {
			return fmt.Errorf("write /%s: %w", rel, err)
		}
		if err := r.Remove(rel); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("write /%s: %w", rel, err)
		}
		if err := r.WriteFile(rel, data, 0o644); err != nil {
			return fmt.Errorf("write /%s: %w", rel, err)
		}
	}
	return nil
}

// makeWorkdir makes the default working directory when it is missing.
// It runs after the pivot, where the sandbox's tree is all there is, so
// that the image's links on the way resolve as its commands will see
// them.
func makeWorkdir(dir string) error {
	w := filepath.Clean("/" + dir)
	if _, err := os.Stat(w); w == "/" || err == nil {
		return nil
	}
	if err := os.MkdirAll(w, 0o755); err != nil {
		return fmt.Errorf("make the working directory %s: %w", w, err)
	}
	return nil
}

// maxTrustStore bounds the root's certificate store read into the
// bundle.
const maxTrustStore = 16 << 20

// installCA puts the network's CA in the sandbox's trust: ca.pem, a
// bundle of the root's own store and the CA, and that bundle bound
// read-only over the store. The store is read through an os.Root, so a
// symlink in a prepared root resolves inside it; only a store that is a
// regular file, reached without symlinks, is covered by the bind
// (otherwise the CA variables that point at the bundle remain).
func installCA(root string, ca []byte) error {
	r, err := os.OpenRoot(root)
	if err != nil {
		return err
	}
	defer r.Close()
	rel := func(p string) string { return strings.TrimPrefix(p, "/") }
	if err := r.MkdirAll(filepath.Dir(rel(agentproto.TrustCAFile)), 0o755); err != nil {
		return fmt.Errorf("install the network's CA: %w", err)
	}
	if err := r.WriteFile(rel(agentproto.TrustCAFile), ca, 0o644); err != nil {
		return fmt.Errorf("install the network's CA: %w", err)
	}
	var store []byte
	if f, err := r.Open(rel(agentproto.TrustStoreFile)); err == nil {
		store, err = io.ReadAll(io.LimitReader(f, maxTrustStore))
		f.Close()
		if err != nil {
			return fmt.Errorf("read %s: %w", agentproto.TrustStoreFile, err)
		}
	}
	bundle := append(append(store, '\n'), ca...)
	if err := r.WriteFile(rel(agentproto.TrustBundleFile), bundle, 0o644); err != nil {
		return fmt.Errorf("install the network's CA: %w", err)
	}
	// The bind goes by path: only when no component of the store's path
	// is a symlink, which here would resolve against the host's root.
	// Nothing in the sandbox runs yet, so nothing can change them.
	for p := rel(agentproto.TrustStoreFile); p != "."; p = filepath.Dir(p) {
		fi, err := r.Lstat(p)
		if err != nil || fi.Mode()&os.ModeSymlink != 0 || (p == rel(agentproto.TrustStoreFile) && !fi.Mode().IsRegular()) {
			return nil
		}
	}
	return bindReadOnly(filepath.Join(root, rel(agentproto.TrustBundleFile)), filepath.Join(root, rel(agentproto.TrustStoreFile)))
}

// replicate makes dst mirror the host path src: the same symlink, or a
// read-only bind mount of the directory or file. A missing src is skipped.
func replicate(src, dst string) error {
	fi, err := os.Lstat(src)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		return os.Symlink(target, dst)
	case fi.IsDir():
		if err := os.Mkdir(dst, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	default:
		f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		f.Close()
	}
	return bindReadOnly(src, dst)
}

// bindReadOnly bind-mounts src on dst (recursively) and makes the whole
// subtree read-only, nosuid and nodev. mount_setattr changes only those
// attributes, so the host mount's locked flags need not be repeated.
func bindReadOnly(src, dst string) error {
	if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s: %w", src, err)
	}
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if err := mountSetattr(unix.AT_FDCWD, dst, unix.AT_RECURSIVE, attr); err != nil {
		return fmt.Errorf("make %s read-only: %w", dst, err)
	}
	return nil
}

// mountWritable mounts the sandbox's writable tree on stage: the
// disk-backed filesystem the host made, or a tmpfs bounded in size and
// in inodes (each pins about 1 KiB of kernel memory, whatever the size
// bound says).
func mountWritable(stage string, r *agentproto.RootSpec) error {
	if r.DiskFD > 0 {
		unix.CloseOnExec(r.DiskFD)
		defer unix.Close(r.DiskFD)
		if err := unix.MoveMount(r.DiskFD, "", unix.AT_FDCWD, stage, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("attach the sandbox's disk: %w", err)
		}
		return nil
	}
	if r.DiskPath != "" {
		if err := unix.Mount(r.DiskPath, stage, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind the sandbox's disk: %w", err)
		}
		return nil
	}
	opts := "mode=0755"
	if r.SizeBytes > 0 {
		opts += fmt.Sprintf(",size=%d", r.SizeBytes)
	}
	if r.Inodes > 0 {
		opts += fmt.Sprintf(",nr_inodes=%d", r.Inodes)
	}
	// Not nosuid: set-id programs that root inside installs work for
	// the sandbox's own ids. The file system belongs to the sandbox's
	// user namespace, so the kernel honours them for its processes
	// only, never for a host process that reaches it.
	if err := unix.Mount("tmpfs", stage, "tmpfs", unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mount the sandbox's writable tree: %w", err)
	}
	return nil
}

var devNodes = []string{"null", "zero", "full", "random", "urandom", "tty"}

// devInodes bounds the files of the /dev tmpfs: the dozen airlock makes
// and a few more.
const devInodes = 64

// buildDev makes the sandbox's /dev: a small tmpfs with the harmless
// device nodes bound from the host, a private devpts, shm (a detached
// mount of a directory of the writable tree, given as shmTree) and
// mqueue.
func buildDev(dev string, shmTree int) error {
	if err := unix.Mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, fmt.Sprintf("mode=0755,size=65536,nr_inodes=%d", devInodes)); err != nil {
		return fmt.Errorf("mount /dev: %w", err)
	}
	for _, n := range devNodes {
		p := filepath.Join(dev, n)
		f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o666)
		if err != nil {
			return err
		}
		f.Close()
		if err := unix.Mount("/dev/"+n, p, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind /dev/%s: %w", n, err)
		}
	}
	for name, target := range map[string]string{
		"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1",
		"stderr": "/proc/self/fd/2", "ptmx": "pts/ptmx",
	} {
		if err := os.Symlink(target, filepath.Join(dev, name)); err != nil {
			return err
		}
	}
	for _, d := range []string{"pts", "shm", "mqueue"} {
		if err := os.Mkdir(filepath.Join(dev, d), 0o755); err != nil {
			return err
		}
	}
	if err := unix.Mount("devpts", filepath.Join(dev, "pts"), "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"); err != nil {
		return fmt.Errorf("mount /dev/pts: %w", err)
	}
	if err := unix.MoveMount(shmTree, "", unix.AT_FDCWD, filepath.Join(dev, "shm"), unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("mount /dev/shm: %w", err)
	}
	// Shared memory is no place for programs to gain ids.
	if err := mountSetattr(unix.AT_FDCWD, filepath.Join(dev, "shm"), 0, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}); err != nil {
		return fmt.Errorf("make /dev/shm nosuid: %w", err)
	}
	if err := unix.Mount("mqueue", filepath.Join(dev, "mqueue"), "mqueue", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		// mqueue needs an IPC namespace of our own; without one, skip it.
		_ = os.Remove(filepath.Join(dev, "mqueue"))
	}
	return nil
}

// receiveMount reads one descriptor, a detached mount, from the
// SOCK_SEQPACKET channel ch, waiting for the supervisor to send it.
func receiveMount(ch int) (int, error) {
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4))
	for {
		n, oobn, _, _, err := unix.Recvmsg(ch, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return -1, err
		}
		if n == 0 {
			return -1, errors.New("the supervisor closed the channel without sending it")
		}
		return fdpass.One(oob[:oobn])
	}
}
