// Package boundary is the seam between airlock and its isolation
// backends. A backend (one package under internal/boundary per kind:
// process today, gvisor and vm next) does four things: it starts the
// sandbox's agent, gives the host a byte stream to it, gives the host a
// file that carries the sandbox's Ethernet frames, and tears everything
// down. Exec, files, mounts, network policy, events, limits reporting and
// state are written once, above the seam, on top of those four.
package boundary

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"os"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
	"github.com/airlock-sandbox/airlock/vfs"
)

// ErrUnavailable is wrapped by the errors of a backend that cannot run
// here, or cannot give a sandbox what was asked; the message says why and
// what to do.
var ErrUnavailable = errors.New("isolation level unavailable")

// Backend starts sandboxes behind one kind of boundary.
type Backend interface {
	// CheckNetwork says, before anything is made, whether a sandbox with
	// a network interface can start here, and what to do if not.
	CheckNetwork() error
	// BindsHostDirs reports whether the backend puts direct mounts
	// (Boot.Root.Direct, host directories) into the sandbox itself.
	// When it does not, the host serves them as real_fs mounts over the
	// agent's file protocol, and Boot.Root.Direct is empty.
	BindsHostDirs() bool
	// ServesMounts reports whether the backend serves programmable
	// mounts (Spec.Mounts) into the sandbox itself. When it does not,
	// the agent mounts them (Boot.Root.VFS) and the host serves them
	// over the agent's stream, and Spec.Mounts is empty.
	ServesMounts() bool
	// Start starts the agent and fills in the boundary's own parts of
	// boot (the caller then makes the handshake on Sandbox.Conn).
	Start(ctx context.Context, spec Spec, boot *agentproto.Boot) (Sandbox, error)
}

// Sandbox is a started sandbox, as its backend gives it to the host.
type Sandbox interface {
	// Conn is the byte stream to the agent.
	Conn() io.ReadWriteCloser
	// Link returns the file that carries the sandbox's Ethernet frames
	// (a TAP device, or a datagram socket whose every message is a
	// frame), once the agent has answered the handshake. Only a sandbox
	// started with Spec.Link has one; the caller owns the file.
	Link(ctx context.Context) (*os.File, error)
	// Notes lists what could not be enforced, with reasons.
	Notes() []string
	// Done is closed when the sandbox has ended; Err then says how.
	Done() <-chan struct{}
	Err() error
	// PID is the host process that holds the sandbox (its agent, or its
	// VMM).
	PID() int
	// Counters are its limit events so far; Usage what it uses now. Both
	// fail with errors.ErrUnsupported where nothing measures them.
	Counters() (Counters, error)
	Usage() (Usage, error)
	// PidsCurrent is how many tasks count against its pids limit.
	PidsCurrent() (int64, error)
	// Pause stops every process of the sandbox where it is (its agent
	// too, so that nothing answers until Resume), and returns once all
	// are stopped. Resume lets them run on. An error wrapping
	// errors.ErrUnsupported says this sandbox cannot be paused here,
	// and why.
	Pause(ctx context.Context) error
	Resume(ctx context.Context) error
	// Close ends every process of the sandbox and removes what it made
	// on the host. It is idempotent.
	Close() error
}

// Spec is what a backend is asked to start.
type Spec struct {
	// ID names the sandbox ([a-zA-Z0-9_-], 1-64).
	ID string
	// AgentPath is the agent binary on the host.
	AgentPath string
	Limits    Limits
	// DiskDir, when set, is where the sandbox's writable tree may be
	// backed by a file, when it is larger than memory allows.
	DiskDir string
	// Link describes the sandbox's one network interface; nil: none.
	Link *LinkSpec
	Log  *slog.Logger
	// RootImage, when set, is the root's lower layer packed as a disk
	// image (erofs), for a boundary that attaches disks; otherwise it
	// uses the boot's RootFS directory.
	RootImage string
	// Kernel is the guest kernel of a boundary that boots one; "" is
	// the one built in CacheDir (`airlock kernel build`).
	Kernel   string
	CacheDir string
	// RequireKVM refuses a micro-VM without hardware virtualisation
	// instead of emulating its CPU.
	RequireKVM bool
	// NoSnapshot boots a micro-VM even when a snapshot could be
	// restored instead.
	NoSnapshot bool
	// Mounts are the programmable mounts of a backend that serves them
	// itself (ServesMounts): no target is inside another.
	Mounts []Mount
}

// Mount is a programmable mount: the sandbox sees Provider's tree at
// Target. A provider that is a vfs.Watcher reports the changes made
// behind the sandbox's back, which the sandbox must see at once.
type Mount struct {
	Target   string
	Provider vfs.Provider
}

// Limits bound the sandbox's user processes; zero values are unlimited.
type Limits struct {
	MemoryBytes int64
	Pids        int64
	CPUs        float64
}

// LinkSpec is the sandbox's side of its network interface.
type LinkSpec struct {
	Name      string
	Address   netip.Prefix
	Gateway   netip.Addr
	AddressV6 netip.Prefix
	GatewayV6 netip.Addr
	MTU       uint32
}

// Counters are cumulative resource-limit events for a sandbox's user
// processes. They let the host attribute a kill or a failed fork to the
// limit that caused it.
type Counters struct {
	OOMKills      uint64
	PidsLimitHits uint64
}

// Usage is what a sandbox's user processes use now, and the limit events
// so far, as its boundary measures them.
type Usage struct {
	CPUNanos        uint64
	MemoryBytes     uint64
	MemoryPeakBytes uint64 // 0 when not measured
	Pids            uint64
	OOMKills        uint64
	PidsLimitHits   uint64
}
