package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
	"github.com/airlock-sandbox/airlock/internal/fsctx"
)

// overlayLayersMain serves agentproto.OverlayLayersArg: args are the
// number of layers.
func overlayLayersMain(args []string) int {
	sock := os.NewFile(4, "overlay")
	fail := func(err error) int {
		_, _ = sock.Write([]byte(err.Error()))
		return 1
	}
	if len(args) != 1 {
		return fail(fmt.Errorf("%s wants the number of layers", agentproto.OverlayLayersArg))
	}
	n, err := strconv.Atoi(args[0])
	if err != nil || n < 1 || n > agentproto.MaxOverlayLayers {
		return fail(fmt.Errorf("%s: a number of layers from 1 to %d, not %q", agentproto.OverlayLayersArg, agentproto.MaxOverlayLayers, args[0]))
	}
	trees := make([]*os.File, n)
	for i := range trees {
		trees[i] = os.NewFile(uintptr(5+i), "layer "+strconv.Itoa(i))
	}
	f, err := overlayOfTrees(trees)
	if err != nil {
		return fail(err)
	}
	if err := unix.Sendmsg(int(sock.Fd()), []byte{0}, unix.UnixRights(int(f.Fd())), nil, 0); err != nil {
		fmt.Fprintf(os.Stderr, "send the overlay: %v\n", err)
		return 1
	}
	return 0
}

// overlayOfTrees makes a read-only overlay of the detached mounts trees
// (the topmost first) and returns its detached mount. The process must
// be in a mount namespace of its own, which it makes private first:
// nothing it mounts is seen outside it.
func overlayOfTrees(trees []*os.File) (*os.File, error) {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return nil, fmt.Errorf("make the private mount namespace private: %w", err)
	}
	// /tmp, in this namespace only, is a staging tmpfs.
	const stage = "/tmp"
	if err := unix.Mount("airlock-layers", stage, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0700,size=64k"); err != nil {
		return nil, fmt.Errorf("mount a staging tmpfs for the overlay's layers: %w", err)
	}
	fsfd, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("fsopen overlay: %w", err)
	}
	defer unix.Close(fsfd)
	if err := unix.FsconfigSetString(fsfd, "index", "off"); err != nil {
		return nil, fmt.Errorf("configure the overlay: %w", err)
	}
	for i, tree := range trees {
		at := filepath.Join(stage, strconv.Itoa(i))
		if err := os.Mkdir(at, 0o700); err != nil {
			return nil, err
		}
		if err := unix.MoveMount(int(tree.Fd()), "", unix.AT_FDCWD, at, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return nil, fmt.Errorf("attach the idmapped layer %s: %w", tree.Name(), err)
		}
		if err := unix.FsconfigSetString(fsfd, "lowerdir+", at); err != nil {
			return nil, fmt.Errorf("give the overlay its layer %s (needs Linux 6.8): %w", tree.Name(), fsctx.Err(fsfd, err))
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return nil, fmt.Errorf("create the overlay of %d idmapped layers: %w", len(trees), fsctx.Err(fsfd, err))
	}
	mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return nil, fmt.Errorf("mount the overlay of %d idmapped layers: %w", len(trees), err)
	}
	return os.NewFile(uintptr(mfd), "overlay"), nil
}
