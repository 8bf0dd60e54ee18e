package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
	"github.com/airlock-sandbox/airlock/internal/vfsfuse"
)

// vfsMounts are a sandbox's programmable mounts: FUSE devices opened
// while the agent still sees the host (the device node is the host's)
// and mounted by the agent. Where the host can read the devices (the
// process level: the same kernel), each is handed to the host, which
// serves it itself (handOver). Otherwise they go to the FUSE server
// process (see fuseServerMain), which serves each mount once the host
// opens the mount's stream; the agent relays that stream to the server.
type vfsMounts struct {
	log       *slog.Logger
	writeback bool
	serial    bool
	sentry    bool // inside gVisor's Sentry
	// hostChan is the socket on which the devices go to the host
	// (RootSpec.VFSChan); 0: they stay in the sandbox.
	hostChan int
	mu       sync.Mutex
	devs     map[string]*os.File // by target, until the server has them
	socks    map[string]*os.File // the agent's end of each mount's socket to the server, until attached
	server   *fuseClient
}

// openVFS opens a FUSE device for each of spec's programmable mounts.
func openVFS(spec *agentproto.RootSpec, log *slog.Logger) (*vfsMounts, error) {
	m := &vfsMounts{
		log:       log,
		devs:      make(map[string]*os.File),
		socks:     make(map[string]*os.File),
		writeback: os.Getenv("AIRLOCK_VFS_WRITEBACK") == "1",
		serial:    os.Getenv("AIRLOCK_VFS_SERIAL") == "1",
	}
	if spec.VFSChan > 0 {
		m.hostChan = spec.VFSChan
		unix.CloseOnExec(m.hostChan)
	}
	if len(spec.VFS) == 0 {
		return m, nil
	}
	var node *os.File
	if spec.FuseFD > 0 {
		node = os.NewFile(uintptr(spec.FuseFD), "fuse")
		defer node.Close()
	}
	for _, t := range spec.VFS {
		if _, dup := m.devs[t]; dup {
			return nil, fmt.Errorf("mount %s is given twice", t)
		}
		dev, err := vfsfuse.OpenDevice(node)
		if err != nil {
			m.closeDevices()
			return nil, fmt.Errorf("programmable mount %s: %w", t, err)
		}
		m.devs[t] = dev
	}
	return m, nil
}

func (m *vfsMounts) closeDevices() {
	for _, d := range m.devs {
		d.Close()
	}
	clear(m.devs)
}

// mount mounts every programmable mount, once the sandbox's root is in
// place and before the process spawner copies the mount table: the
// kernel holds each access to a mount until its server answers, which
// it does once the host opens the mount's stream (attach). Nothing
// touches the mounts meanwhile: no command runs before the host has
// seen every mount attached.
func (m *vfsMounts) mount() error {
	for _, t := range sortedTargets(m.devs) {
		if err := os.MkdirAll(t, 0o755); err != nil {
			return fmt.Errorf("make the mount point %s: %w", t, err)
		}
		if err := vfsfuse.Mount(m.devs[t], t); err != nil {
			return err
		}
	}
	return nil
}

// startServer hands the mounted devices to a FUSE server process of
// their own, and keeps none of them: from now on only the server holds
// them, so that no thread of the agent waiting on a mount can keep the
// mounts, and so the sandbox, alive once it is killed. It returns
// without waiting for the server (see ready).
func (m *vfsMounts) startServer() error {
	if m.hostChan > 0 {
		return m.handOver()
	}
	if len(m.devs) == 0 {
		return nil
	}
	targets := sortedTargets(m.devs)
	devs := make([]*os.File, len(targets))
	for i, t := range targets {
		devs[i] = m.devs[t]
	}
	srv, socks, err := startFUSEServer(targets, devs, m.writeback, m.serial, m.sentry, m.log)
	m.closeDevices()
	if err != nil {
		return err
	}
	m.server = srv
	for i, t := range targets {
		m.socks[t] = socks[i]
	}
	return nil
}

// ready waits for the FUSE server to report that it can serve.
func (m *vfsMounts) ready() error {
	if m.server == nil {
		return nil
	}
	return m.server.ready(agentproto.SpawnerSetupTimeout)
}

// serverTasks is the number of the FUSE server's threads.
func (m *vfsMounts) serverTasks() int {
	if m.server == nil {
		return 0
	}
	return m.server.tasks()
}

func sortedTargets(devs map[string]*os.File) []string {
	out := make([]string, 0, len(devs))
	for t := range devs {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

// attach has the FUSE server serve the programmable mount at target,
// and returns the server's socket for the mount's protocol, which the
// caller relays to the host's stream. It returns once the kernel and
// the server agree.
func (m *vfsMounts) attach(target string) (net.Conn, error) {
	m.mu.Lock()
	sock, ok := m.socks[target]
	delete(m.socks, target)
	m.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("no programmable mount %s was prepared, or it is served already", target)
	}
	c, err := net.FileConn(sock)
	sock.Close()
	if err != nil {
		return nil, fmt.Errorf("the FUSE server's socket of %s: %w", target, err)
	}
	if err := m.server.serve(target); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// serveVFS answers an OpVFS stream: the mount is attached and served
// over the stream, which the mount keeps (kept) once it is answered.
func (s *server) serveVFS(c *agentproto.Conn, st net.Conn, target string) (kept bool, err error) {
	if s.vfs == nil {
		return false, c.Write(agentproto.Msg{K: agentproto.KErr, Err: agentproto.Errorf(agentproto.CodeInvalid, "this sandbox has no programmable mounts")})
	}
	mc, err := s.vfs.attach(target)
	if err != nil {
		return false, c.Write(agentproto.Msg{K: agentproto.KErr, Err: agentproto.ToError(err)})
	}
	// The host speaks the mount's protocol once it reads this, and the
	// client sends nothing before a command uses the mount.
	if err := c.Write(agentproto.Msg{K: agentproto.KEnd}); err != nil {
		mc.Close()
		return false, err
	}
	// The agent may wait on its own mounts (the file API's requests):
	// their server is another process, which the agent's death kills.
	relay(st, mc)
	return true, nil
}

// attachDirect binds the host directories of spec into the sandbox's
// root, before the pivot: each mount's target is made inside root
// through an os.Root, so that the image's links resolve inside it.
func attachDirect(root string, spec *agentproto.RootSpec) error {
	if len(spec.Direct) == 0 {
		return nil
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return err
	}
	defer r.Close()
	for _, d := range spec.Direct {
		if err := attachOne(r, d); err != nil {
			return fmt.Errorf("host mount at %s: %w", d.Target, err)
		}
	}
	return nil
}

// cloneDirect clones each direct mount's host directory that the host
// did not (Direct[i].FD is 0), while the agent still sees the host's
// files, and gives spec the clone's descriptor.
func cloneDirect(spec *agentproto.RootSpec) error {
	for i, d := range spec.Direct {
		if d.FD > 0 {
			continue
		}
		t, err := unix.OpenTree(unix.AT_FDCWD, d.HostPath, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
		if err != nil {
			return fmt.Errorf("host mount at %s: clone host directory %s: %w", d.Target, d.HostPath, err)
		}
		spec.Direct[i].FD = t
	}
	return nil
}

func attachOne(r *os.Root, d agentproto.DirectMount) error {
	tree := d.FD
	if tree <= 0 {
		return errors.New("the host directory was not cloned")
	}
	defer unix.Close(tree)
	rel := strings.TrimPrefix(path.Clean("/"+d.Target), "/")
	if rel == "" {
		return errors.New("a host mount cannot be the root")
	}
	var st unix.Stat_t
	if err := unix.Fstat(tree, &st); err != nil {
		return fmt.Errorf("the host mount: %w", err)
	}
	// Only a directory or a regular file: a host path swapped for a
	// socket or a device after the config was checked binds nothing.
	if t := st.Mode & unix.S_IFMT; t != unix.S_IFDIR && t != unix.S_IFREG {
		return fmt.Errorf("the host path is neither a directory nor a regular file (mode %#o)", t)
	}
	point, reopen, err := mountPoint(r, rel, st.Mode&unix.S_IFMT == unix.S_IFREG)
	if err != nil {
		return err
	}
	defer point.Close()
	if err := unix.MoveMount(tree, "", int(point.Fd()), "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("attach the mount: %w", err)
	}
	// Its flags are set once it is attached, before any command runs:
	// gVisor's Sentry has no mount_setattr, and the bind remount that
	// stands in for it needs a path, which a detached mount has not.
	// The mount point opened again is the mount's root.
	top, err := r.OpenFile(rel, reopen, 0)
	if err != nil {
		return fmt.Errorf("open the mount: %w", err)
	}
	defer top.Close()
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if d.Readonly {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	if err := mountSetattr(int(top.Fd()), "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
		return fmt.Errorf("set the mount's flags: %w", err)
	}
	return nil
}

// mountPoint opens the directory at rel in root, made with its parents
// where missing, or with file the regular file there, made empty where
// the image has none (a host file is bound over a file, as docker binds
// one). It returns the open flag that opens the mount once attached: a
// file only as a path, since its host permissions may forbid reading.
func mountPoint(r *os.Root, rel string, file bool) (*os.File, int, error) {
	if !file {
		if err := r.MkdirAll(rel, 0o755); err != nil {
			return nil, 0, fmt.Errorf("make the mount point: %w", err)
		}
		dir, err := r.Open(rel)
		if err != nil {
			return nil, 0, fmt.Errorf("open the mount point: %w", err)
		}
		if fi, err := dir.Stat(); err != nil || !fi.IsDir() {
			dir.Close()
			return nil, 0, errors.New("the mount point is not a directory")
		}
		return dir, os.O_RDONLY, nil
	}
	if dir := path.Dir(rel); dir != "." {
		if err := r.MkdirAll(dir, 0o755); err != nil {
			return nil, 0, fmt.Errorf("make the mount point's directory: %w", err)
		}
	}
	f, err := r.OpenFile(rel, unix.O_PATH, 0)
	if errors.Is(err, fs.ErrNotExist) {
		var made *os.File
		if made, err = r.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644); err == nil {
			made.Close()
			f, err = r.OpenFile(rel, unix.O_PATH, 0)
		}
	}
	if err != nil {
		return nil, 0, fmt.Errorf("open the mount point: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		f.Close()
		return nil, 0, errors.New("a host file can be bound only over a file, and the mount point is not one")
	}
	return f, unix.O_PATH, nil
}

// coverBlocked hides each blocked path of the sandbox, after the pivot:
// a directory under an empty read-only tmpfs, anything else under a
// bind of /dev/null with nodev, which no one can open. Paths resolve
// inside the sandbox's root, links included, so a link to a blocked
// path leads to the cover. A path that does not exist has nothing to
// hide. Paths inside programmable mounts are the host's to refuse.
func coverBlocked(spec *agentproto.RootSpec) error {
	for _, b := range spec.Blocked {
		if insideAny(b, spec.VFS) {
			continue
		}
		if err := coverOne(b); err != nil {
			return fmt.Errorf("block %s: %w", b, err)
		}
	}
	return nil
}

func coverOne(p string) error {
	fd, err := unix.Openat2(unix.AT_FDCWD, p, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_MAGICLINKS})
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return unix.Mount("tmpfs", fmt.Sprintf("/proc/self/fd/%d", fd), "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,nr_inodes=1,mode=0500")
	}
	tree, err := unix.OpenTree(unix.AT_FDCWD, "/dev/null", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return err
	}
	defer unix.Close(tree)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC}
	if err := mountSetattr(tree, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		return err
	}
	return unix.MoveMount(tree, "", fd, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH)
}

// insideAny reports whether p is one of dirs or beneath one.
func insideAny(p string, dirs []string) bool {
	p = filepath.Clean(p)
	for _, d := range dirs {
		d = filepath.Clean(d)
		if p == d || strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}
