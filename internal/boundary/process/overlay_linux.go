package process

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
	"github.com/airlock-sandbox/airlock/internal/fdpass"
)

// errNotOverlay says that a root directory is not an overlay's mount
// point.
var errNotOverlay = errors.New("not the mount point of an overlay")

// overlayLayers returns the layers of the overlay mounted at dir, the
// topmost first: its upper directory (if it has one: a container's
// writable layer, used read-only here) and its lower ones. It returns
// errNotOverlay if dir is not an overlay's mount point.
func overlayLayers(dir string) ([]string, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return nil, fmt.Errorf("statfs %s: %w", dir, err)
	}
	if st.Type != unix.OVERLAYFS_SUPER_MAGIC {
		return nil, errNotOverlay
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, err
	}
	mounts, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(real))
	if err != nil {
		return nil, fmt.Errorf("read the mount table: %w", err)
	}
	if len(mounts) == 0 || mounts[len(mounts)-1].FSType != "overlay" {
		return nil, fmt.Errorf("%s is inside an overlay, not its mount point: give the overlay's mount point", dir)
	}
	var upper string
	var lower []string
	for opt := range strings.SplitSeq(mounts[len(mounts)-1].VFSOptions, ",") {
		key, value, _ := strings.Cut(opt, "=")
		if strings.Contains(value, `\`) {
			// An escaped ':' or ',' in a layer's path: rare enough
			// not to parse, and never guessed at.
			return nil, fmt.Errorf("the overlay at %s has a layer path with escaped characters (%s)", dir, opt)
		}
		switch key {
		case "upperdir":
			upper = value
		case "lowerdir":
			if strings.Contains(value, "::") {
				return nil, fmt.Errorf("the overlay at %s has data-only layers, which are not supported", dir)
			}
			lower = strings.Split(value, ":")
		case "datadir+", "lowerdir+":
			return nil, fmt.Errorf("the overlay at %s names its layers one by one (%s), which is not supported", dir, key)
		}
	}
	layers := lower
	if upper != "" {
		layers = append([]string{upper}, lower...)
	}
	if len(layers) == 0 || len(layers) > agentproto.MaxOverlayLayers {
		return nil, fmt.Errorf("the overlay at %s has %d layers", dir, len(layers))
	}
	for _, l := range layers {
		if !filepath.IsAbs(l) {
			return nil, fmt.Errorf("the overlay at %s has a layer %q that is not an absolute path", dir, l)
		}
	}
	return layers, nil
}

// idmapOverlay returns a detached, read-only, nodev overlay of layers
// (the topmost first), each an idmapped mount with the user namespace
// userns (see idmappedTree): the kernel cannot idmap an overlay, but an
// overlay can be made of idmapped layers (Linux 5.19). It is made by
// root in the host's user namespace, so that the layers' whiteouts and
// opaque directories (trusted.overlay xattrs, which an overlay mounted
// in the sandbox's user namespace would not read) keep their meaning.
//
// The overlay takes its layers from its maker's mount namespace, and a
// detached mount is in none: the agent binary bin attaches them, on a
// tmpfs, in a private mount namespace of its own, makes the overlay
// there and sends it back (agentproto.OverlayLayersArg). A process, not
// a thread of this one: a thread that unshares its mount namespace can
// never run other goroutines again, and one that exits kills the
// children it started (their parent-death signal), such as the agent.
func idmapOverlay(bin *os.File, layers []string, userns *os.File) (_ *os.File, err error) {
	files := []*os.File{bin}
	defer func() { closeFiles(files[1:]) }()
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("create the overlay's channel: %w", err)
	}
	ours := os.NewFile(uintptr(sp[0]), "overlay")
	defer ours.Close()
	files = append(files, os.NewFile(uintptr(sp[1]), "overlay"))
	for _, l := range layers {
		tree, err := idmapTree(l, userns)
		if err != nil {
			return nil, err
		}
		files = append(files, tree)
	}
	maker := &exec.Cmd{
		Path:       "/proc/self/fd/3",
		Args:       []string{"airlock-guest", agentproto.OverlayLayersArg, strconv.Itoa(len(layers))},
		Env:        []string{},
		Dir:        "/",
		ExtraFiles: files,
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: syscall.CLONE_NEWNS,
			Pdeathsig:  syscall.SIGKILL,
		},
	}
	var stderr bytes.Buffer
	maker.Stderr = &stderr
	if err := maker.Start(); err != nil {
		return nil, fmt.Errorf("start the agent binary to assemble the overlay: %w", err)
	}
	closeFiles(files[1:])
	files = files[:1]
	defer func() {
		if werr := maker.Wait(); werr != nil && err == nil {
			err = fmt.Errorf("assemble the overlay: %w: %s", werr, bytes.TrimSpace(stderr.Bytes()))
		}
	}()
	msg := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, flags, _, err := unix.Recvmsg(int(ours.Fd()), msg, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("receive the overlay: %w", err)
	}
	fds := fdpass.Rights(oob[:oobn])
	if len(fds) == 1 && flags&unix.MSG_CTRUNC == 0 {
		return os.NewFile(uintptr(fds[0]), "overlay"), nil
	}
	for _, fd := range fds {
		unix.Close(fd)
	}
	if n == 0 {
		return nil, errors.New("the overlay's maker sent nothing")
	}
	return nil, errors.New(string(msg[:n]))
}
