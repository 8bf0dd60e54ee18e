package vfsfuse

import (
	"errors"
	"fmt"
	"io/fs"
	"log"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/mounts"
	"github.com/airlock-sandbox/airlock/vfs"
)

// maxName is the longest file name a mount takes.
const maxName = 255

// Options tune a mount.
type Options struct {
	// AttrTimeout and EntryTimeout are how long the kernel keeps a file's
	// attributes and a name's lookup without asking again. 0 means 1 s;
	// negative means not at all.
	AttrTimeout, EntryTimeout time.Duration
	// MaxWrite is the largest write the kernel sends at once (and the
	// largest read it asks for). 0 means DefaultMaxWrite.
	MaxWrite int
	// MaxReadAhead is the kernel's read-ahead for the mount, in bytes.
	// 0 means DefaultReadAhead.
	MaxReadAhead int
	// Writeback lets the kernel gather writes in its page cache and send
	// them later, in larger pieces. Writes then reach the provider after
	// the write call returns (close and fsync flush them), so a
	// provider's hooks and quota errors are seen late: off by default.
	Writeback bool
	// Passthrough lets the kernel read a file opened for reading only
	// straight from the host file behind it, where there is one (see
	// fileHandle.PassthroughFd).
	Passthrough bool
	// Serial answers one request at a time, as a server without
	// pipelining would (a benchmark's mode).
	Serial bool
	// IDs maps the ids of the kernel that mounts to the provider's; the
	// zero value passes them as they are.
	IDs IDShift
	// Logger receives diagnostics; default: discard.
	Logger *slog.Logger
}

// Defaults of Options.
const (
	DefaultMaxWrite  = 512 << 10
	DefaultReadAhead = 1 << 20
	// LargestWrite is the largest MaxWrite that kernels since 4.20 take
	// by default (fs.fuse.max_pages_limit, 256 pages); an older kernel
	// caps it at 128 KiB.
	LargestWrite = 1 << 20
)

// IDShift maps a provider's ids to the ids of the kernel that mounts
// it: provider id x is kernel id Base+x, for x below Size. Any other
// id, either way, is the overflow id (65534), as an unmapped id in a
// user namespace. A Size of 0 maps every id to itself.
type IDShift struct {
	Base, Size uint32
}

// overflowID is what an id outside the shift becomes.
const overflowID = 65534

func (m IDShift) toProvider(id uint32) uint32 {
	switch {
	case m.Size == 0:
		return id
	case id >= m.Base && id-m.Base < m.Size:
		return id - m.Base
	}
	return overflowID
}

func (m IDShift) toKernel(id uint32) uint32 {
	switch {
	case m.Size == 0:
		return id
	case id < m.Size:
		return m.Base + id
	}
	return overflowID
}

// fileSystem is one mount's state.
type fileSystem struct {
	p                         vfs.Provider
	ids                       IDShift
	attrTimeout, entryTimeout time.Duration
	// openFlags are the FOPEN_* flags of every opened file.
	openFlags uint32
	// passthrough: Options.Passthrough.
	passthrough bool
	// reporting: the paths whose names and attributes the kernel keeps
	// for keptTimeout (reporter); none unless the provider says.
	reporting func() mounts.Flags
}

// keptTimeout is how long the kernel keeps the names and attributes of a
// path whose every change reaches the server (Invalidate) other than
// those the kernel makes itself: a memory mount's. The kernel is told
// of each such change, so this bounds only what a change the provider
// reports under another name could leave stale (a write by the host to
// one name of a file the sandbox knows by another link).
const keptTimeout = time.Minute

// reporter is a provider that knows which of its paths change only as
// the kernel sees or is told (the sandbox's view of its mounts).
type reporter interface{ Reporting() mounts.Flags }

func (f *fileSystem) setEntryTimeouts(p string, out *fuse.EntryOut) {
	attr, entry := f.timeouts(p)
	out.SetEntryTimeout(entry)
	out.SetAttrTimeout(attr)
}

func (f *fileSystem) attrTimeoutOf(p string) time.Duration {
	attr, _ := f.timeouts(p)
	return attr
}

// timeouts are how long the kernel keeps p's attributes and name.
func (f *fileSystem) timeouts(p string) (attr, entry time.Duration) {
	if f.reporting().At(p) {
		return max(f.attrTimeout, keptTimeout), max(f.entryTimeout, keptTimeout)
	}
	return f.attrTimeout, f.entryTimeout
}

// Server serves one mount.
type Server struct {
	srv  *fuse.Server
	root *node
	dev  *os.File
	stop func()
	done chan struct{}
}

// Serve answers the kernel's requests for the FUSE file system whose
// device is dev (see Mount) from p, until the file system is unmounted.
// It returns once the kernel and the server have agreed on the
// protocol. A process that serves a mount and opens its files itself
// calls PollOnce first.
func Serve(dev *os.File, p vfs.Provider, opts Options) (*Server, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	fsys := &fileSystem{p: p, ids: opts.IDs, attrTimeout: timeout(opts.AttrTimeout), entryTimeout: timeout(opts.EntryTimeout), passthrough: opts.Passthrough}
	// The kernel tells apart the writes of a file opened without a
	// flush of its own (FOPEN_NOFLUSH): no FLUSH request on close.
	fsys.openFlags = fuse.FOPEN_NOFLUSH
	fsys.reporting = func() mounts.Flags { return nil }
	if r, ok := p.(reporter); ok && fsys.attrTimeout > 0 && fsys.entryTimeout > 0 {
		// Asked on first use: a remote provider knows once its server
		// has greeted it, which may wait for the mount to be served.
		fsys.reporting = sync.OnceValue(r.Reporting)
	}
	root := &node{fsys: fsys}
	mo := fuse.MountOptions{
		MaxWrite:             cmpOr(opts.MaxWrite, DefaultMaxWrite),
		MaxReadAhead:         cmpOr(opts.MaxReadAhead, DefaultReadAhead),
		MaxBackground:        64,
		DisableXAttrs:        true,
		Name:                 "airlock",
		FsName:               "airlock",
		EnableLocks:          false,
		Logger:               log.New(slogWriter{opts.Logger}, "", 0),
		DisableSplice:        true,
		IgnoreSecurityLabels: true,
	}
	if opts.Writeback {
		mo.ExtraCapabilities |= fuse.CAP_WRITEBACK_CACHE
	}
	mo.SingleThreaded = opts.Serial
	raw := gofs.NewNodeFS(root, &gofs.Options{
		MountOptions: mo,
		AttrTimeout:  &fsys.attrTimeout,
		EntryTimeout: &fsys.entryTimeout,
		// A name found missing is remembered as long as one found:
		// a provider's own changes drop it (Invalidate), and a change
		// behind a provider's back shows after the same delay.
		NegativeTimeout: &fsys.entryTimeout,
		// Modes are the provider's, 0 included: the kernel checks
		// permissions (default_permissions) from them.
		NullPermissions: true,
		Logger:          log.New(slogWriter{opts.Logger}, "", 0),
	})
	// go-fuse takes the descriptor over: give it its own.
	fd, err := unix.Dup(int(dev.Fd()))
	if err != nil {
		return nil, fmt.Errorf("serve FUSE mount: %w", err)
	}
	unix.CloseOnExec(fd)
	srv, err := fuse.NewServer(raw, fmt.Sprintf("/dev/fd/%d", fd), &mo)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("serve FUSE mount: %w", err)
	}
	s := &Server{srv: srv, root: root, dev: dev, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		srv.Serve()
	}()
	if err := srv.WaitMount(); err != nil {
		return nil, fmt.Errorf("serve FUSE mount: the kernel's handshake: %w", err)
	}
	if w, ok := p.(vfs.Watcher); ok {
		s.stop = w.Watch(s.Invalidate)
	}
	return s, nil
}

// Done is closed once the file system is unmounted and the server has
// stopped.
func (s *Server) Done() <-chan struct{} { return s.done }

// Close stops forwarding the provider's changes; the mount ends when it
// is unmounted.
func (s *Server) Close() error {
	if s.stop != nil {
		s.stop()
	}
	return s.dev.Close()
}

// Invalidate drops what the kernel keeps of path and everything the
// kernel knows beneath it (attributes, pages and names), so that the
// sandbox sees a change made on the host at once. It is called from the
// provider's side, apart from any request, and returns at once: the
// kernel may ask for the files again meanwhile.
func (s *Server) Invalidate(p string) {
	go func() {
		var parent *gofs.Inode
		in := &s.root.Inode
		name := ""
		for _, c := range strings.Split(strings.Trim(p, "/"), "/") {
			if c == "" {
				continue
			}
			parent, name = in, c
			if in = in.GetChild(c); in == nil {
				break
			}
		}
		if in != nil {
			forget(in, 0)
		}
		if parent != nil {
			_ = parent.NotifyEntry(name)
		}
	}()
}

// forget drops the kernel's attributes and pages of in and the names
// beneath it, as deep as the kernel knows them (and at most maxDepth).
func forget(in *gofs.Inode, depth int) {
	const maxDepth = 64
	_ = in.NotifyContent(0, 0)
	if depth >= maxDepth || !in.IsDir() {
		return
	}
	for name, child := range in.Children() {
		forget(child, depth+1)
		_ = in.NotifyEntry(name)
	}
}

func timeout(d time.Duration) time.Duration {
	switch {
	case d == 0:
		return time.Second
	case d < 0:
		return 0
	}
	return d
}

func cmpOr(v, def int) int {
	if v <= 0 {
		return def
	}
	return v
}

// slogWriter carries go-fuse's log lines to a slog.Logger.
type slogWriter struct{ l *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	w.l.Debug("fuse", "msg", strings.TrimSpace(string(p)))
	return len(p), nil
}

// pollHackName is a file that go-fuse answers for itself at a mount's
// root, whose poll it refuses (ENOSYS).
const pollHackName = ".go-fuse-epoll-hack"

// PollOnce has the kernel ask the server of the mount at target once
// whether files can be polled, which go-fuse refuses, so that the
// kernel never asks again. It needs the provider's answers (the root's
// attributes).
// Otherwise a Go program that opens a file of the mount, and whose
// runtime adds it to epoll (every os.Open does), waits in epoll_ctl for
// the server's answer while holding a P that the runtime cannot take
// back: if that program is the server (a test; the agent leaves its
// mounts to a server process of their own), a garbage collection then
// stops it for good. go-fuse does this itself for the mounts it makes,
// not for one whose device it is given.
func PollOnce(target string) error {
	fd, err := unix.Open(target+"/"+pollHackName, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the poll probe of the mount at %s: %w", target, err)
	}
	defer unix.Close(fd)
	_, _ = unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN | unix.POLLPRI | unix.POLLOUT}}, 0)
	return nil
}

// OpenDevice opens a FUSE device for Mount: the device node that node
// (an O_PATH descriptor) names when it is given, /dev/fuse otherwise.
// The kernel takes a mount's device only from a process of the user
// namespace that mounts it, so the caller opens it where it mounts.
func OpenDevice(node *os.File) (*os.File, error) {
	p := "/dev/fuse"
	if node != nil {
		p = fmt.Sprintf("/proc/self/fd/%d", node.Fd())
	}
	// Opened blocking, outside Go's poller: the server reads it on
	// threads of its own. Through the poller (epoll), a process that
	// serves a mount and uses it too deadlocks: registering one of the
	// mount's files with epoll asks the server (FUSE_POLL) while the
	// epoll instance it would be woken through is held.
	fd, err := unix.Open(p, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		err = &os.PathError{Op: "open", Path: p, Err: err}
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("open the FUSE device: the kernel has no FUSE support here (modprobe fuse): %w", err)
		}
		return nil, fmt.Errorf("open the FUSE device: %w", err)
	}
	return os.NewFile(uintptr(fd), "/dev/fuse"), nil
}

// Mount mounts an empty FUSE file system of device dev at target, to
// Serve. Until a server answers, the kernel holds every access to
// target. allow_other lets every user of the mount's user namespace in,
// and default_permissions has the kernel check their permissions from
// the modes the provider reports.
func Mount(dev *os.File, target string) error {
	opts := fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0,default_permissions,allow_other", dev.Fd())
	if err := unix.Mount("airlock", target, "fuse.airlock", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		if errors.Is(err, syscall.ENODEV) {
			return fmt.Errorf("mount FUSE at %s: the kernel has no FUSE support (modprobe fuse): %w", target, err)
		}
		return fmt.Errorf("mount FUSE at %s: %w", target, err)
	}
	return nil
}

// MountDetached makes a FUSE file system of device dev, with Mount's
// options, as a mount attached nowhere yet: the caller attaches the
// returned descriptor (move_mount) where it wants, in any mount
// namespace, and Serve answers the kernel meanwhile. The file system
// ends when the last mount of it and the descriptor are gone.
func MountDetached(dev *os.File) (*os.File, error) {
	fs, err := unix.Fsopen("fuse", unix.FSOPEN_CLOEXEC)
	if err != nil {
		if errors.Is(err, syscall.ENODEV) {
			return nil, fmt.Errorf("make a FUSE mount: the kernel has no FUSE support (modprobe fuse): %w", err)
		}
		return nil, fmt.Errorf("make a FUSE mount: %w", err)
	}
	defer unix.Close(fs)
	for _, kv := range [][2]string{{"source", "airlock"}, {"subtype", "airlock"}, {"fd", fmt.Sprint(dev.Fd())}, {"rootmode", "40000"}, {"user_id", "0"}, {"group_id", "0"}} {
		if err := unix.FsconfigSetString(fs, kv[0], kv[1]); err != nil {
			return nil, fmt.Errorf("make a FUSE mount: %s: %w", kv[0], err)
		}
	}
	for _, flag := range []string{"default_permissions", "allow_other"} {
		if err := unix.FsconfigSetFlag(fs, flag); err != nil {
			return nil, fmt.Errorf("make a FUSE mount: %s: %w", flag, err)
		}
	}
	if err := unix.FsconfigCreate(fs); err != nil {
		return nil, fmt.Errorf("make a FUSE mount: %w", err)
	}
	m, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return nil, fmt.Errorf("make a FUSE mount: %w", err)
	}
	return os.NewFile(uintptr(m), "fuse"), nil
}

// connectionsDir is where the kernel lists its FUSE connections
// (fusectl), by the device number of each one's file system.
const connectionsDir = "/sys/fs/fuse/connections"

// Connection names a FUSE file system's connection by the file system's
// device number, as stat gives it.
type Connection struct {
	Major, Minor uint32
}

// ConnectionOf is the connection of the FUSE file system that mount (a
// mount's descriptor, or any of its files) is in. It sends no request.
func ConnectionOf(mount *os.File) (Connection, error) {
	var st unix.Statx_t
	if err := unix.Statx(int(mount.Fd()), "", unix.AT_EMPTY_PATH|unix.AT_STATX_DONT_SYNC, 0, &st); err != nil {
		return Connection{}, fmt.Errorf("the FUSE connection of a mount: %w", err)
	}
	return Connection{Major: st.Dev_major, Minor: st.Dev_minor}, nil
}

// name is the connection's directory among the kernel's (fusectl).
func (c Connection) name() string {
	// The kernel names a connection by its internal device number
	// (the minor in the low 20 bits), not stat's encoding of it.
	return strconv.FormatUint(uint64(c.Major)<<20|uint64(c.Minor), 10)
}

// ConnectionsListed reports whether this process can reach the kernel's
// list of FUSE connections: fusectl is mounted at
// /sys/fs/fuse/connections, as systemd mounts it at boot, or this
// process is root and mounts it where only it sees it
// (withConnections).
func ConnectionsListed() bool {
	return hostListsConnections() || os.Geteuid() == 0
}

func hostListsConnections() bool {
	var st unix.Statfs_t
	return unix.Statfs(connectionsDir, &st) == nil && st.Type == fusectlMagic
}

// withConnections runs fn with a descriptor of the directory that
// lists the kernel's FUSE connections. Where the host has not mounted
// fusectl at connectionsDir (a machine without systemd, a container), a
// root process makes a mount of it attached nowhere, for fn alone: the
// host's mounts stay as they are.
func withConnections(fn func(dir int) error) error {
	if hostListsConnections() {
		dir, err := unix.Open(connectionsDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("list the kernel's FUSE connections: %w", err)
		}
		defer unix.Close(dir)
		return fn(dir)
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("the kernel's FUSE connections are not listed: fusectl is not mounted at %s (as root: mount -t fusectl fusectl %s)", connectionsDir, connectionsDir)
	}
	return privateConnections(fn)
}

// privateConnections runs fn with a mount of fusectl that is attached
// nowhere.
func privateConnections(fn func(dir int) error) error {
	fs, err := unix.Fsopen("fusectl", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return fmt.Errorf("list the kernel's FUSE connections: open fusectl: %w", err)
	}
	defer unix.Close(fs)
	if err := unix.FsconfigCreate(fs); err != nil {
		return fmt.Errorf("list the kernel's FUSE connections: make fusectl: %w", err)
	}
	m, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
	if err != nil {
		return fmt.Errorf("list the kernel's FUSE connections: mount fusectl: %w", err)
	}
	defer unix.Close(m)
	return fn(m)
}

// fusectlMagic is fusectl's file system type (FUSE_CTL_SUPER_MAGIC in
// linux/magic.h, which x/sys/unix does not name).
const fusectlMagic = 0x65735543

// Owner is the host uid that the connection's mount belongs to (its
// user_id option, as the host sees it), which owns its files among the
// kernel's connections; an error if the kernel lists no such connection.
func (c Connection) Owner() (uint32, error) {
	var st unix.Stat_t
	err := withConnections(func(dir int) error { return unix.Fstatat(dir, c.name(), &st, unix.AT_SYMLINK_NOFOLLOW) })
	if err != nil {
		return 0, fmt.Errorf("FUSE connection %d:%d: %w", c.Major, c.Minor, err)
	}
	return st.Uid, nil
}

// Abort ends the connection: every request waiting on it fails at once,
// the one its server has read and not answered included, and every
// later one fails with ENOTCONN; its server then stops. A process waits
// for a request its server has read even when killed, so a sandbox's
// teardown cannot otherwise count on its processes' end while a
// provider takes its time. It needs root, or fusectl mounted at
// /sys/fs/fuse/connections and to be the mount's owner.
func (c Connection) Abort() error {
	err := withConnections(func(dir int) error {
		fd, err := unix.Openat(dir, c.name()+"/abort", unix.O_WRONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		_, err = unix.Write(fd, []byte("1"))
		return err
	})
	if err != nil {
		return fmt.Errorf("abort FUSE connection %d:%d: %w", c.Major, c.Minor, err)
	}
	return nil
}

// SetReadAhead sets the kernel's read-ahead for the connection's file
// system to n bytes (at most what one request carries, Options.MaxWrite):
// the kernel gives a FUSE file system its default, 128 KiB, whatever the
// server asks for. It needs root.
func (c Connection) SetReadAhead(n int) error {
	name := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", c.Major, c.Minor)
	if err := os.WriteFile(name, []byte(strconv.Itoa(n>>10)), 0); err != nil {
		return fmt.Errorf("set the read-ahead of FUSE connection %d:%d: %w", c.Major, c.Minor, err)
	}
	return nil
}

// Unmount detaches the mount at target; its server then stops.
func Unmount(target string) error {
	if err := unix.Unmount(target, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("unmount %s: %w", target, err)
	}
	return nil
}
