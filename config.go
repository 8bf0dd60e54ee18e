package airlock

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
	"github.com/airlock-sandbox/airlock/policy"
)

// Isolation names a boundary.
type Isolation string

// Isolation levels.
const (
	// IsolationProcess runs the sandbox in Linux namespaces with seccomp,
	// landlock, cgroups and no capabilities.
	IsolationProcess Isolation = "process"
	// IsolationGVisor runs the sandbox under gVisor's runsc.
	IsolationGVisor Isolation = "gvisor"
	// IsolationVM runs the sandbox in a micro-VM.
	IsolationVM Isolation = "vm"
)

// Resources bounds what a sandbox may use.
type Resources struct {
	// CPUs is the CPU quota in cores (0.5 = half a core). 0: unlimited.
	CPUs float64 `json:"cpus,omitempty"`
	// MemoryMB bounds the memory of all user processes, with the kernel
	// memory they cause (inodes, pipes, sockets) and, when the writable
	// tree is a tmpfs, its files. 0: the default, DefaultMemoryMB or a
	// quarter of the host's memory when that is smaller.
	// MemoryUnlimited lifts the bound.
	MemoryMB int64 `json:"memory_mb,omitempty"`
	// TimeoutSeconds bounds the sandbox's lifetime; when it passes, the
	// sandbox is stopped. 0: no limit.
	TimeoutSeconds int64 `json:"timeout_seconds,omitempty"`
}

// Config describes a sandbox. The zero value is valid: a process-isolated
// sandbox with default limits and no network.
type Config struct {
	// Image names the root filesystem. Empty or "host" uses the host's
	// /usr, /bin, /sbin and /lib* read-only. A variant ("minimal",
	// "standard", "full") or an OCI reference ("python:3.12-slim",
	// "registry:5000/team/img@sha256:...", a local OCI layout directory
	// or a docker-save tarball) is taken from the image cache, and got
	// there first (built, downloaded or pulled) when it is missing; its
	// Env and WorkingDir apply to every command.
	Image string `json:"image,omitempty"`
	// ImageCacheDir is the image cache; default $AIRLOCK_CACHE_DIR, else
	// airlock's folder of the user's cache directory (~/.cache/airlock).
	ImageCacheDir string `json:"-"`
	// OnImageProgress, when set, receives progress reports while Create
	// gets Image into the cache. It may be called from several
	// goroutines at once and must not block.
	OnImageProgress func(ImageProgress) `json:"-"`
	// RootFS is a prepared root directory used read-only, with a private
	// writable layer on top, instead of Image.
	RootFS string `json:"rootfs,omitempty"`
	// Isolation selects the boundary; default "process".
	Isolation Isolation `json:"isolation,omitempty"`
	// Kernel is the guest kernel (an uncompressed vmlinux) of the vm
	// level; default the one `airlock kernel build` made in the cache.
	Kernel string `json:"kernel,omitempty"`
	// RequireKVM makes the vm level refuse to start without hardware
	// virtualisation, instead of emulating the guest's CPU (QEMU TCG).
	RequireKVM bool      `json:"require_kvm,omitempty"`
	Resources  Resources `json:"resources,omitempty"`
	// Env is added to every command's environment.
	Env map[string]string `json:"env,omitempty"`
	// PidsLimit bounds the number of processes and threads in the
	// sandbox, airlock's process spawner (up to SpawnerTasks threads)
	// included. Default 1024; at least MinPidsLimit.
	PidsLimit int64 `json:"pids_limit,omitempty"`
	// NofileLimit bounds open files per process. Default 1024.
	NofileLimit uint64 `json:"nofile_limit,omitempty"`
	// DiskMB bounds the sandbox's writable tree: every file written
	// under /, /tmp, /workspace and /dev/shm, together. It also bounds
	// the number of files and directories, at one per 8 KiB (at least
	// 1024). 0: the default, half the memory limit (of the host's memory
	// when it is unlimited), at most DefaultDiskMB.
	//
	// A disk of at most half the memory limit is a tmpfs: memory,
	// charged to the memory limit, and as fast as memory. A larger one is
	// an ext4 filesystem in a file under the state directory, reserved
	// in full when the sandbox starts and gone when it ends; that needs
	// root (loop devices), and without root such a disk is refused.
	// Either way a full disk fails writes with ENOSPC, never with an
	// out-of-memory kill.
	DiskMB int64 `json:"disk_mb,omitempty"`
	// MaxFileSizeMB bounds the size of any one file a command writes.
	// 0: bounded only by DiskMB.
	MaxFileSizeMB int64 `json:"max_file_size_mb,omitempty"`
	// MaxOutputBytes bounds each of stdout and stderr that Exec buffers;
	// more is dropped and the result says so. Default 16 MiB. Streaming
	// output is not buffered and not bounded.
	MaxOutputBytes int64 `json:"max_output_bytes,omitempty"`
	// Hostname inside the sandbox; defaults to the sandbox id.
	Hostname string `json:"hostname,omitempty"`
	// AllowPtrace lets commands ptrace each other (debuggers, strace).
	AllowPtrace bool `json:"allow_ptrace,omitempty"`
	// Network is the sandbox's egress policy (see package policy). nil:
	// the sandbox has no network interface at all, only loopback. A
	// policy with no allowed_hosts gives the sandbox a network on which
	// nothing is allowed, and hosts can then be added while it runs
	// (Sandbox.AllowHost).
	Network *policy.Config `json:"network,omitempty"`
	// Ports publishes TCP ports of the sandbox on the host once it has
	// started, as docker's -p does (see Sandbox.Publish). A sandbox that
	// publishes ports without a Network gets a network on which nothing
	// is allowed: a published port lets the host in, and lets nothing
	// out. At most MaxPublishedPorts.
	Ports []PortMapping `json:"ports,omitempty"`
	// OnRequest and OnResponse are Go hooks on every HTTP request that
	// leaves the sandbox and its response, after the policy script's
	// hooks, before secrets are substituted (they see placeholders).
	// They need Network.
	OnRequest  policy.OnRequest  `json:"-"`
	OnResponse policy.OnResponse `json:"-"`
	// HookTimeout bounds each call of OnRequest or OnResponse; a hook
	// that takes longer blocks the request. 0 means 10 s.
	HookTimeout time.Duration `json:"-"`

	// VFS gives the sandbox programmable mounts, host directories and
	// blocked paths (see VFSConfig).
	VFS VFSConfig `json:"vfs,omitzero"`

	// AgentPath is the airlock-guest binary. Default: $AIRLOCK_AGENT, then
	// airlock-guest next to the running executable, then on PATH.
	AgentPath string `json:"-"`
	// Logger receives diagnostics; default: discard.
	Logger *slog.Logger `json:"-"`
	// OnEvent, when set, receives lifecycle, exec, file and network
	// events. It is called from several goroutines at once, so it must
	// be safe for concurrent use, and it should return quickly: HTTP
	// request events wait for it, and DNS and connection events pass
	// through a bounded queue that drops them (NetworkStats counts them)
	// when it falls behind.
	OnEvent func(Event) `json:"-"`

	// Pool, when set, makes Create take a ready sandbox from that pool
	// (see NewPool) instead of starting one: every other field of this
	// Config is then ignored, and the sandbox is configured as the
	// pool's Config says (its OnEvent and Logger included). CreateWithID
	// refuses a Config with a Pool: a pooled sandbox's id is chosen
	// when the pool starts it.
	Pool *Pool `json:"-"`

	// image is what Create found of Image, before the sandbox starts.
	image *resolvedImage
	// pooled is set on the sandboxes a Pool starts: their lifetime
	// starts when the pool hands them out.
	pooled bool
}

// Defaults.
const (
	DefaultPidsLimit   = 1024
	DefaultNofileLimit = 1024
	// DefaultMemoryMB is the memory limit of a sandbox that sets none,
	// unless a quarter of the host's memory is smaller.
	DefaultMemoryMB = 1024
	// DefaultDiskMB is the largest default writable tree; it is also
	// bounded by half the memory limit, so that it is a tmpfs.
	DefaultDiskMB         = 1024
	DefaultMaxOutputBytes = 16 << 20
)

// maxSizeMB bounds sizes given in MiB (1 EiB), far above any machine,
// so that their byte counts fit in an int64.
const maxSizeMB = 1 << 40

// MemoryUnlimited, as Resources.MemoryMB, gives a sandbox no memory
// limit (JSON-RPC: "memory_mb": -1; CLI: --memory unlimited).
const MemoryUnlimited = -1

// MinPidsLimit is the smallest PidsLimit a sandbox starts with: the
// process spawner's threads (agentproto.SpawnerTasks) and a few for
// commands.
const MinPidsLimit = agentproto.SpawnerTasks + 4

func (c *Config) withDefaults() Config {
	out := *c
	if out.Isolation == "" {
		out.Isolation = IsolationProcess
	}
	if out.PidsLimit == 0 {
		out.PidsLimit = DefaultPidsLimit
	}
	if out.NofileLimit == 0 {
		out.NofileLimit = DefaultNofileLimit
	}
	if out.Resources.MemoryMB == 0 {
		out.Resources.MemoryMB = defaultMemoryMB(hostMemoryBytes())
	}
	if out.DiskMB == 0 {
		out.DiskMB = defaultDiskMB(out.Resources.MemoryMB, hostMemoryBytes())
	}
	if out.MaxOutputBytes == 0 {
		out.MaxOutputBytes = DefaultMaxOutputBytes
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	return out
}

// Validate reports the first problem with c, in words a user can act on.
func (c *Config) Validate() error {
	switch c.Isolation {
	case "", IsolationProcess, IsolationGVisor, IsolationVM:
	default:
		return fmt.Errorf("isolation %q is not one of process, gvisor, vm", c.Isolation)
	}
	if c.usesImage() && c.RootFS != "" {
		return errImageAndRootFS
	}
	if c.Image != strings.TrimSpace(c.Image) || strings.ContainsRune(c.Image, 0) {
		return fmt.Errorf("image %q is not a valid image name", c.Image)
	}
	if c.Resources.CPUs < 0 || c.Resources.MemoryMB < MemoryUnlimited || c.Resources.TimeoutSeconds < 0 {
		return fmt.Errorf("resources must not be negative (memory_mb -1 is unlimited)")
	}
	if c.Resources.MemoryMB > 0 && c.Resources.MemoryMB < 8 {
		return fmt.Errorf("memory_mb %d is too small: give at least 8", c.Resources.MemoryMB)
	}
	if c.PidsLimit < 0 || c.DiskMB < 0 || c.MaxFileSizeMB < 0 || c.MaxOutputBytes < 0 {
		return fmt.Errorf("limits must not be negative")
	}
	for _, s := range []struct {
		name string
		mb   int64
	}{{"memory_mb", c.Resources.MemoryMB}, {"disk_mb", c.DiskMB}, {"max_file_size_mb", c.MaxFileSizeMB}} {
		if s.mb > maxSizeMB {
			return fmt.Errorf("%s %d is more than any machine has: give at most %d", s.name, s.mb, int64(maxSizeMB))
		}
	}
	if c.PidsLimit > 0 && c.PidsLimit < MinPidsLimit {
		return fmt.Errorf("pids_limit %d is too small: airlock's process spawner counts against it with up to %d threads of its own; give at least %d", c.PidsLimit, agentproto.SpawnerTasks, MinPidsLimit)
	}
	if c.NofileLimit != 0 && c.NofileLimit < 16 {
		return fmt.Errorf("nofile_limit %d is too small: give at least 16", c.NofileLimit)
	}
	for k := range c.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return fmt.Errorf("environment variable name %q is invalid", k)
		}
	}
	if (c.OnRequest != nil || c.OnResponse != nil) && c.Network == nil {
		return fmt.Errorf("OnRequest and OnResponse hooks need a network: set Network")
	}
	if c.HookTimeout < 0 {
		return fmt.Errorf("hook timeout must not be negative")
	}
	if c.Network != nil {
		if err := c.Network.Validate(); err != nil {
			return fmt.Errorf("network: %w", err)
		}
	}
	if err := validatePorts(c.Ports); err != nil {
		return err
	}
	if err := c.VFS.validate(); err != nil {
		return fmt.Errorf("vfs: %w", err)
	}
	if c.Hostname != "" && (len(c.Hostname) > 63 || strings.ContainsAny(c.Hostname, " /\x00")) {
		return fmt.Errorf("hostname %q is invalid", c.Hostname)
	}
	if c.Isolation == "" || c.Isolation == IsolationProcess {
		d := c.withDefaults()
		if _, err := planStorage(d.DiskMB, d.Resources.MemoryMB, hostMemoryBytes(), canMountDisks()); err != nil {
			return err
		}
	}
	return nil
}

// Timeout returns the sandbox lifetime, or 0.
func (r Resources) Timeout() time.Duration { return time.Duration(r.TimeoutSeconds) * time.Second }
