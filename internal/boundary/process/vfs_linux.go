package process

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"

	"github.com/fxamacker/cbor/v2"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
	"github.com/airlock-sandbox/airlock/internal/boundary"
	"github.com/airlock-sandbox/airlock/internal/fdpass"
	"github.com/airlock-sandbox/airlock/internal/vfsfuse"
	"github.com/airlock-sandbox/airlock/vfs"
)

// A sandbox's programmable mounts are served from here, in the
// supervisor: the agent mounts each (the kernel takes a FUSE device only
// from the user namespace that mounts it) and hands its device over
// (agentproto.RootSpec.VFSChan). The sandbox's kernel is this host's, so
// a request goes from the kernel to the provider and back with no
// process of the sandbox, and no socket, in between. Each request comes
// from the kernel, with the names and data a command gave it: the
// server (package vfsfuse) checks every path and bounds every size, as
// it does for the gvisor level's mounts.

// fuseMajor and fuseMinor are /dev/fuse's device number.
const fuseMajor, fuseMinor = 10, 229

// hostVFS serves a sandbox's programmable mounts.
type hostVFS struct {
	log  *slog.Logger
	opts vfsfuse.Options
	conn *net.UnixConn
	// owner is the host uid of the sandbox's root, which the mounts'
	// FUSE connections belong to.
	owner uint32
	// pending are the mounts not served yet, by target.
	pending map[string]vfs.Provider

	mu     sync.Mutex
	served []servedMount
	closed bool
}

type servedMount struct {
	srv  *vfsfuse.Server
	conn *vfsfuse.Connection // nil where the kernel lists no connections
}

// newHostVFS prepares to serve ms for a sandbox whose root is host uid
// owner, and returns the agent's end of the channel on which it hands
// their devices over.
func newHostVFS(ms []boundary.Mount, opts vfsfuse.Options, owner int, log *slog.Logger) (*hostVFS, *os.File, error) {
	h := &hostVFS{log: log, opts: opts, owner: uint32(owner), pending: make(map[string]vfs.Provider, len(ms))}
	for _, m := range ms {
		if _, dup := h.pending[m.Target]; dup {
			return nil, nil, fmt.Errorf("programmable mount %s is given twice", m.Target)
		}
		h.pending[m.Target] = m.Provider
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("create the programmable mounts' channel: %w", err)
	}
	theirs := os.NewFile(uintptr(pair[1]), "vfs")
	ours := os.NewFile(uintptr(pair[0]), "vfs")
	defer ours.Close()
	c, err := net.FileConn(ours)
	if err != nil {
		theirs.Close()
		return nil, nil, fmt.Errorf("create the programmable mounts' channel: %w", err)
	}
	h.conn = c.(*net.UnixConn)
	return h, theirs, nil
}

// targets are the mounts' targets, for the agent.
func targets(ms []boundary.Mount) []string {
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.Target)
	}
	return out
}

// serve serves each device the agent hands over, until every mount is
// served, the agent is gone, or close.
func (h *hostVFS) serve() {
	defer h.conn.Close()
	buf := make([]byte, agentproto.MaxFUSEHandover)
	// Room for more descriptors than one, so that a message with more
	// is seen whole (and refused) rather than cut.
	oob := make([]byte, unix.CmsgSpace(4*4))
	for len(h.pending) > 0 {
		n, oobn, flags, _, err := h.conn.ReadMsgUnix(buf, oob)
		if err != nil || n == 0 {
			return
		}
		var ans agentproto.FUSEServed
		if err := h.serveOne(buf[:n], oob[:oobn], flags); err != nil {
			ans.Err = err.Error()
		}
		b, err := cbor.Marshal(ans)
		if err != nil {
			return
		}
		if _, err := h.conn.Write(b); err != nil || ans.Err != "" {
			return
		}
	}
}

// serveOne serves the mount that message msg with control data oob hands
// over.
func (h *hostVFS) serveOne(msg, oob []byte, flags int) error {
	fds := fdpass.Rights(oob)
	if len(fds) != 1 || flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return fmt.Errorf("malformed hand-over of a programmable mount (%d descriptors)", len(fds))
	}
	dev := os.NewFile(uintptr(fds[0]), "/dev/fuse")
	var m agentproto.FUSEHandover
	if err := agentproto.Unmarshal(msg, &m); err != nil {
		dev.Close()
		return fmt.Errorf("malformed hand-over of a programmable mount: %w", err)
	}
	p, ok := h.pending[m.Target]
	if !ok {
		dev.Close()
		return fmt.Errorf("no programmable mount %q is waiting for its server", m.Target)
	}
	conn, err := h.connection(m)
	if err != nil {
		dev.Close()
		return err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(dev.Fd()), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR || unix.Major(st.Rdev) != fuseMajor || unix.Minor(st.Rdev) != fuseMinor {
		dev.Close()
		return fmt.Errorf("programmable mount %s: what was handed over is not a FUSE device", m.Target)
	}
	opts := h.opts
	opts.Logger = h.log.With("mount", m.Target)
	// The server owns dev from here (its Close closes it).
	srv, err := vfsfuse.Serve(dev, p, opts)
	if err != nil {
		dev.Close()
		return fmt.Errorf("programmable mount %s: %w", m.Target, err)
	}
	delete(h.pending, m.Target)
	if conn != nil {
		setReadAhead(*conn, opts)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		srv.Close()
		return errors.New("the sandbox is closing")
	}
	h.served = append(h.served, servedMount{srv: srv, conn: conn})
	return nil
}

// connection is the FUSE connection that hand-over m names, which this
// process writes to as root (abort, read-ahead): it must be one of the
// kernel's FUSE connections, and belong to the sandbox's root, so that
// a device number the agent got wrong never names a host's block device
// or another sandbox's mount. Where the kernel lists no connections
// there is nothing to write to: nil.
func (h *hostVFS) connection(m agentproto.FUSEHandover) (*vfsfuse.Connection, error) {
	if !vfsfuse.ConnectionsListed() {
		return nil, nil
	}
	c := vfsfuse.Connection{Major: m.DevMajor, Minor: m.DevMinor}
	owner, err := c.Owner()
	if err != nil {
		return nil, fmt.Errorf("programmable mount %s: %w", m.Target, err)
	}
	if owner != h.owner {
		return nil, fmt.Errorf("programmable mount %s: FUSE connection %d:%d belongs to uid %d, not the sandbox's root (%d)", m.Target, m.DevMajor, m.DevMinor, owner, h.owner)
	}
	return &c, nil
}

// abort ends the mounts' connections: every request still waiting on
// one fails, so that no process of the sandbox waits for a provider once
// it is killed.
func (h *hostVFS) abort() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range h.served {
		if m.conn == nil {
			continue
		}
		if err := m.conn.Abort(); err != nil {
			h.log.Debug("programmable mount: abort its connection", "err", err)
		}
	}
}

// close stops serving: the mounts went with the sandbox's mount
// namespace.
func (h *hostVFS) close() error {
	h.conn.Close()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	var errs []error
	for _, m := range h.served {
		if err := m.srv.Close(); err != nil {
			errs = append(errs, fmt.Errorf("stop a programmable mount's server: %w", err))
		}
	}
	h.served = nil
	return errors.Join(errs...)
}

// setReadAhead gives the mount the read-ahead its server asks for, as
// root (see vfsfuse.Connection.SetReadAhead); without root it keeps the
// kernel's default.
func setReadAhead(c vfsfuse.Connection, opts vfsfuse.Options) {
	if os.Geteuid() != 0 {
		return
	}
	if err := c.SetReadAhead(cmp.Or(opts.MaxReadAhead, vfsfuse.DefaultReadAhead)); err != nil {
		opts.Logger.Debug("programmable mount: keep the kernel's read-ahead", "err", err)
	}
}
