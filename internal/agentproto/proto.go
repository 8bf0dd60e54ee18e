// Package agentproto defines the messages exchanged between the host and the
// airlock agent that runs as PID 1 inside every isolation boundary, and the
// framing that carries them.
//
// One byte stream connects the host to the agent. It starts with a boot
// handshake (Boot from the host, Ready from the agent) and is then
// multiplexed with yamux: every operation opens its own stream whose first
// frame is a Request. Frames are a 4-byte big-endian length followed by a
// CBOR body, never longer than MaxFrame, so a hostile peer cannot make the
// other side allocate without bound.
package agentproto

import (
	"time"
)

// Version is the protocol version. Host and agent refuse to talk across
// versions.
const Version = 2

// MaxFrame bounds the encoded size of one frame.
const MaxFrame = 1 << 20

// ChunkSize is the largest payload that one Data frame carries.
const ChunkSize = 64 << 10

// Op names an operation; it is the first field of every stream.
type Op string

// Operations.
const (
	OpPing      Op = "ping"
	OpExec      Op = "exec"
	OpWriteFile Op = "write_file"
	OpReadFile  Op = "read_file"
	OpListFiles Op = "list_files"
	OpStat      Op = "stat"
	OpMkdir     Op = "mkdir"
	OpRemove    Op = "remove"
	// OpSymlink makes Path a symbolic link to Link, replacing a file or
	// link there (never a directory), and never following it.
	OpSymlink Op = "symlink"
	// OpSetAttr sets the permission bits (when SetMode) and the
	// modification time (when ModTime is not 0) of Path, without
	// following a final symlink: a link's mode is left alone.
	OpSetAttr Op = "set_attr"
	// OpVFS carries a programmable mount's file system requests: the
	// host opens one stream per mount (Request.Path names its target)
	// once the agent is ready; the agent answers with one Msg (KEnd, or
	// KErr when it cannot serve that mount), then the stream carries
	// the vfsproto protocol, the sandbox's FUSE server asking (the
	// agent relays its bytes) and the host's provider answering.
	OpVFS Op = "vfs"
	// OpUsage asks what the user commands use now, where the agent
	// measures it (a micro-VM's guest kernel, whose cgroups the host
	// cannot read): one KEnd reply with Usage, or KErr with
	// CodeUnsupported where the host measures it.
	OpUsage Op = "usage"
	// OpContainer adds a container to the sandbox, or removes one
	// (Request.Container): one KEnd reply, or KErr.
	OpContainer Op = "container"
	// OpProcesses lists the processes of the sandbox's commands, as ps
	// inside it would (the agent's own left out): one KEnd reply with
	// Procs and ProcsMore, or KErr.
	OpProcesses Op = "processes"
)

// Bounds of a process list (OpProcesses): at most MaxProcesses
// processes, each command line at most MaxProcessCommand bytes; the
// processes left out are counted in Msg.ProcsMore.
const (
	MaxProcesses      = 512
	MaxProcessCommand = 512
)

// Process is one process of the sandbox's commands, as /proc inside
// shows it.
type Process struct {
	PID  int    `cbor:"pid"`
	PPID int    `cbor:"ppid"`
	UID  uint32 `cbor:"uid"`
	// State is the kernel's letter: R running, S sleeping, D in an
	// uninterruptible wait, Z zombie, T stopped, ...
	State   string        `cbor:"st"`
	CPUTime time.Duration `cbor:"cpu"`
	// RSS is its resident memory, in bytes.
	RSS int64 `cbor:"rss"`
	// Elapsed is how long ago it started.
	Elapsed time.Duration `cbor:"el"`
	// Command is its argv, cut to MaxProcessCommand bytes; for a
	// process with none (a zombie), its name in brackets.
	Command []string `cbor:"cmd"`
}

// ContainerRequest adds or removes a container: a process tree of the
// sandbox on a root of its own. Its commands (ExecRequest.Container)
// are started by a spawner of its own, in mount and PID namespaces of
// their own, under the sandbox's confinement.
type ContainerRequest struct {
	// Name names the container: 1-64 letters, digits, '.', '-' or '_'.
	Name string `cbor:"name"`
	// Remove removes the container, killing every process in it.
	Remove bool `cbor:"remove,omitempty"`
	// Root is the directory of the sandbox that is the container's
	// root.
	Root string `cbor:"root,omitempty"`
	// Binds are files and directories of the sandbox bound into the
	// container's root.
	Binds []Bind `cbor:"binds,omitempty"`
}

// Bind binds a file or directory of the sandbox into a container's root.
type Bind struct {
	// Source is the sandbox's path; Target is the path in the
	// container's root, resolved in it.
	Source string `cbor:"src"`
	Target string `cbor:"dst"`
	// ReadOnly makes the bind read-only.
	ReadOnly bool `cbor:"ro,omitempty"`
}

// ValidContainerName reports whether name can name a container: 1-64
// letters, digits, '.', '-' or '_', not "." or "..".
func ValidContainerName(name string) bool {
	if name == "" || len(name) > 64 || name == "." || name == ".." {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// MaxContainerBinds bounds a container's binds.
const MaxContainerBinds = 64

// SpawnerTasks is how many tasks (threads) the agent's process spawner
// may need, counted with the user's commands against the sandbox's pids
// limit: the spawner is a Go program and lives in the commands' cgroup so
// that they inherit it. It runs 8 to 10 threads, all made before it is
// ready (its main thread, the reaper's, the runtime's monitor, template
// and signal threads, and idle spares; it runs on one P); the rest is
// headroom.
const SpawnerTasks = 12

// SpawnerSetupTimeout bounds the spawner's setup, from its start to its
// ready message: a spawner that neither answers nor exits by then fails
// the sandbox's start.
const SpawnerSetupTimeout = time.Minute

// HoldArg, as the agent binary's first argument, makes it only wait for
// the end of its standard input and exit: the host runs it so to hold a
// user namespace with a sandbox's mapping while it makes an idmapped
// mount through it.
const HoldArg = "hold-userns"

// OverlayLayersArg, as the agent binary's first argument, followed by a
// number of layers n, makes it assemble a read-only overlay of the
// detached mounts on descriptors 5 to 5+n-1 (the topmost first), in a
// private mount namespace it was started in, and send the overlay's
// detached mount on the unix socket at descriptor 4 (or, on failure, the
// error's text with no descriptor). The host runs it, as root, to make a
// root of idmapped layers: an overlay takes its layers from its maker's
// mount namespace, where detached mounts are not.
const OverlayLayersArg = "overlay-layers"

// MaxOverlayLayers bounds the layers of an OverlayLayersArg overlay:
// the kernel's own limit is 500.
const MaxOverlayLayers = 500

// AwaitMapsArg, as the agent binary's first argument, followed by the
// numbers of two descriptors (a pipe and the agent binary), makes it
// wait for a byte on the pipe and then execute the binary again as the
// agent proper, or with the arguments that follow the descriptors. The host starts it so in a new user namespace whose
// maps a helper (newuidmap, newgidmap) writes once the process exists;
// the execution after the maps are written is what gives root inside
// its capabilities in the namespace.
const AwaitMapsArg = "await-maps"

// ImageWorkerArg, as the agent binary's first argument, makes it work
// on image trees as root of a user namespace mapped like a sandbox of
// an unprivileged caller (package owners): the host starts it through
// AwaitMapsArg.
const ImageWorkerArg = "image-worker"

// FUSEServerArg, as the agent binary's first argument, makes it the
// sandbox's FUSE server: a process of its own that the agent starts to
// serve the programmable mounts, so that the process holding their FUSE
// devices never uses the mounts itself (a process blocked on a mount it
// serves cannot be killed). Only the agent starts it.
const FUSEServerArg = "fuse-server"

// JoinCgroupsArg, as the agent binary's first argument, followed by a
// count N, "private" or "shared", a program and its arguments, makes it
// write "0" into each of the N cgroup.procs files it inherits from
// descriptor 3 on, close them, with "private" enter a mount namespace of
// its own whose mounts do not propagate, and execute the program with
// the descriptors that follow: the host starts a boundary's own
// processes (runsc) so, already in the sandbox's cgroup, before they
// make any other process or mount.
const JoinCgroupsArg = "join-cgroups"

// VMEnv, in its environment, makes the agent PID 1 of a micro-VM's
// guest kernel. The kernel passes it to the initial ramdisk's /init (the
// agent) from its command line, where a name=value that is no kernel
// parameter becomes init's environment (arguments after "--" would mix
// with the virtio-mmio devices QEMU appends). The agent sets the guest
// up, finds its port to the host (VMPort) and waits there for its Boot,
// whose VM part says what the VM's devices hold.
const VMEnv = "AIRLOCK_AGENT=vm"

// VMPort is the name of the virtio-serial port the agent of a micro-VM
// speaks to the host on.
const VMPort = "airlock.agent"

// Boot is the first frame the host sends. It tells the agent how to prepare
// the sandbox before it accepts requests.
type Boot struct {
	Version  int    `cbor:"v"`
	ID       string `cbor:"id"`
	Hostname string `cbor:"hostname"`
	// Mode selects the PID 1 setup: "process" builds a root filesystem from
	// host binds inside fresh namespaces; "vm" builds it inside a guest
	// kernel, from the devices VM names.
	Mode string   `cbor:"mode"`
	Root RootSpec `cbor:"root"`
	// Env is the base environment of every command.
	Env []string `cbor:"env,omitempty"`
	// Limits applied by the agent to the process that spawns user commands.
	Rlimits Rlimits `cbor:"rlimits"`
	// CgroupFDs are descriptors, inherited by the agent, of cgroup.procs
	// files that the user-command spawner writes "0" into to join the
	// limited cgroup.
	CgroupFDs []int     `cbor:"cgroup_fds,omitempty"`
	Hardening Hardening `cbor:"hardening"`
	// IPC bounds the System V IPC objects of the sandbox's IPC namespace.
	IPC IPCLimits `cbor:"ipc"`
	// Link, when set, asks the agent to make the sandbox's network
	// interface itself and send its file back: the host does so when it
	// cannot enter the sandbox's namespaces (an unprivileged supervisor).
	Link *LinkSpec `cbor:"link,omitempty"`
	// VM is what a micro-VM's agent sets up before the root: set in
	// mode "vm" only.
	VM *VMSpec `cbor:"vm,omitempty"`
	// Sentry is what the agent enforces inside gVisor's Sentry: set in
	// mode "gvisor" only.
	Sentry *SentrySpec `cbor:"sentry,omitempty"`
}

// SentrySpec bounds the user commands inside gVisor's Sentry, in
// cgroups of the Sentry's own; 0: none.
type SentrySpec struct {
	MemoryBytes int64 `cbor:"mem,omitempty"`
	Pids        int64 `cbor:"pids,omitempty"`
}

// VMSpec is the micro-VM's part of the boot: its devices, its network
// interface and the limits that the guest kernel's cgroups enforce on
// user commands.
type VMSpec struct {
	// Mounts are made, in order, before the root is built: the root's
	// lower layer (Root.RootFS names its Target), and the host
	// directories that a default root is made of.
	Mounts []VMMount `cbor:"mounts,omitempty"`
	// Scratch, when set, is the serial of an empty ext4 disk that is the
	// writable tree, in place of a tmpfs (a disk larger than memory
	// allows).
	Scratch string `cbor:"scratch,omitempty"`
	// Link is the guest's one virtio-net interface (Name: the name it
	// gets; FD unused).
	Link *LinkSpec `cbor:"link,omitempty"`
	// MemoryBytes and Pids bound the user commands' cgroup; 0: none.
	MemoryBytes int64 `cbor:"mem,omitempty"`
	Pids        int64 `cbor:"pids,omitempty"`
	// Time is the host's clock at boot, in Unix nanoseconds: the guest
	// has no battery-backed clock of its own (and a restored one has
	// the clock of its snapshot).
	Time int64 `cbor:"time"`
	// Seed is random bytes from the host that the agent adds to the
	// guest kernel's random pool before anything else, and reseeds
	// from: a guest restored from a snapshot starts with the random
	// state every other restore of it has.
	Seed []byte `cbor:"seed,omitempty"`
}

// VMMount is one file system the micro-VM's agent mounts.
type VMMount struct {
	// Source is a block device (/dev/vda) or a virtio-9p share's tag.
	Source string `cbor:"src"`
	// Type is "erofs", "ext4" or "9p".
	Type string `cbor:"type"`
	// Target is the absolute path in the guest it is mounted on.
	Target   string `cbor:"target"`
	Readonly bool   `cbor:"ro,omitempty"`
}

// LinkSpec is the sandbox's network interface, made by the agent: a TAP
// device with these addresses and routes, whose file the agent sends over
// the inherited socket FD (one byte, with the file as SCM_RIGHTS) before
// it builds the root, and then closes.
type LinkSpec struct {
	FD        int    `cbor:"fd"`
	Name      string `cbor:"name"`
	Address   string `cbor:"addr"`
	Gateway   string `cbor:"gw"`
	AddressV6 string `cbor:"addr6,omitempty"`
	GatewayV6 string `cbor:"gw6,omitempty"`
	MTU       uint32 `cbor:"mtu"`
}

// HostRootDirs are the host directories that make up the default root
// (RootSpec.RootFS empty), bound read-only. Where the host has them as
// symlinks into /usr (merged /usr), the same symlinks are made instead.
func HostRootDirs() []string {
	return []string{"usr", "bin", "sbin", "lib", "lib64", "lib32", "libx32"}
}

// Where the agent puts RootSpec.TrustCA, inside the sandbox.
const (
	TrustCAFile     = "/etc/airlock/ca.pem"
	TrustBundleFile = "/etc/airlock/ca-bundle.crt"
	TrustStoreFile  = "/etc/ssl/certs/ca-certificates.crt"
)

// RootSpec describes the sandbox's root filesystem in process mode.
type RootSpec struct {
	// Stage is an empty host directory where the new root is assembled.
	Stage string `cbor:"stage"`
	// RootFS, when set, is a prepared root directory used (read-only)
	// instead of the host's /usr, /bin, /sbin and /lib*.
	RootFS string `cbor:"rootfs,omitempty"`
	// RootFSFD, when not 0, is the agent's descriptor of a detached
	// mount of RootFS, idmapped so that host root's files are the
	// sandbox root's: the agent attaches it and uses it in place of the
	// path.
	RootFSFD int `cbor:"rootfs_fd,omitempty"`
	// RootFSChan, when not 0, is the agent's end of a channel on which
	// the supervisor sends, once the agent runs, the descriptor of a
	// detached mount of RootFS idmapped with the agent's own user
	// namespace; the agent uses it as it would RootFSFD.
	RootFSChan int `cbor:"rootfs_chan,omitempty"`
	// SizeBytes bounds the sandbox's writable tree (tmpfs size). The
	// tree also holds /dev/shm.
	SizeBytes int64 `cbor:"size"`
	// Inodes bounds the number of files and directories of a tmpfs
	// writable tree (nr_inodes); 0: the kernel's default.
	Inodes int64 `cbor:"inodes,omitempty"`
	// DiskFD, when not 0, is the agent's descriptor of a detached mount
	// of a disk-backed filesystem, already bounded in size and inodes,
	// whose root directory belongs to the sandbox's root: the agent
	// attaches it as the writable tree in place of a tmpfs.
	DiskFD int `cbor:"disk_fd,omitempty"`
	// DiskPath, when set, is a directory the agent sees, the root of a
	// disk-backed filesystem made as for DiskFD, which the agent binds
	// as the writable tree in place of a tmpfs (gVisor's Sentry, which
	// reaches the host's mounts through its file server).
	DiskPath string `cbor:"disk_path,omitempty"`
	// Workdir, when set, is made (with its parents, mode 0755) unless
	// it exists: the directory commands start in by default.
	Workdir string `cbor:"workdir,omitempty"`
	// Etc holds generated /etc files, by name relative to /etc.
	Etc map[string][]byte `cbor:"etc,omitempty"`
	// HostEtc lists /etc entries bound read-only from the host (for example
	// ssl, alternatives, ld.so.cache).
	HostEtc []string `cbor:"host_etc,omitempty"`
	// TrustCA, when set, is a PEM certificate the sandbox's TLS clients
	// must trust (the network's interception CA): the agent writes it to
	// TrustCAFile, writes TrustBundleFile with the root's own store
	// (/etc/ssl/certs/ca-certificates.crt) and the CA, and binds that
	// bundle over the store when the store is a regular file.
	TrustCA []byte `cbor:"trust_ca,omitempty"`
	// VFS lists the targets of programmable mounts: FUSE file systems
	// the agent makes before the sandbox is ready and mounts, once the
	// host opens their OpVFS streams, before the host reports the
	// sandbox started. No target is inside another.
	VFS []string `cbor:"vfs,omitempty"`
	// FuseFD, when not 0, is the agent's O_PATH descriptor of a FUSE
	// device node that only the sandbox's root may open, which the
	// agent opens (as its own user namespace must: the kernel takes a
	// FUSE mount's device only from the namespace that mounts it) for
	// each VFS mount; 0: the agent opens /dev/fuse.
	FuseFD int `cbor:"fuse_fd,omitempty"`
	// VFSChan, when not 0, is the agent's end of a SOCK_SEQPACKET socket
	// to the host, which serves the VFS mounts itself: once a mount is
	// made, the agent sends a FUSEHandover with the mount's FUSE device
	// (SCM_RIGHTS) and keeps no descriptor of it, and the host answers
	// with a FUSEServed once it serves the mount. No OpVFS stream is
	// opened then.
	VFSChan int `cbor:"vfs_chan,omitempty"`
	// Direct lists host directories bound into the sandbox.
	Direct []DirectMount `cbor:"direct,omitempty"`
	// Blocked lists paths of the sandbox that are covered, after every
	// mount is made, by an empty read-only directory or file: never
	// visible, whatever the mounts.
	Blocked []string `cbor:"blocked,omitempty"`
}

// DirectMount is a host directory bound at Target, inside the sandbox.
type DirectMount struct {
	Target string `cbor:"target"`
	// HostPath is the host directory, which the agent clones (open_tree)
	// while it still sees the host, unless FD is given.
	HostPath string `cbor:"host"`
	// FD, when not 0, is the agent's descriptor of a detached mount of
	// the host directory that the host made (as root, it reaches
	// directories the sandbox's ids may not).
	FD       int  `cbor:"fd,omitempty"`
	Readonly bool `cbor:"ro,omitempty"`
}

// Rlimits are applied to user commands. Core dumps are always disabled.
type Rlimits struct {
	NoFile uint64 `cbor:"nofile"`
	FSize  uint64 `cbor:"fsize"` // 0 = unlimited
	NProc  uint64 `cbor:"nproc"` // 0 = unlimited; used only when cgroups are not available
	AS     uint64 `cbor:"as"`    // 0 = unlimited
	// MsgQueue, when set, bounds the bytes of POSIX message queues
	// (RLIMIT_MSGQUEUE; 0: none may be made); nil: inherited. It is
	// never raised.
	MsgQueue *uint64 `cbor:"msgqueue,omitempty"`
}

// IPCLimits are written by the agent to the sysctls of the sandbox's own
// IPC namespace before any command runs; commands cannot change them
// (/proc/sys is read-only to them). A zero field leaves the kernel's
// default.
type IPCLimits struct {
	// ShmBytes bounds System V shared memory in total and per segment
	// (kernel.shmall, kernel.shmmax).
	ShmBytes uint64 `cbor:"shm,omitempty"`
	// ShmRmidForced destroys a segment once no process has it attached
	// (kernel.shm_rmid_forced), so that segments are memory of
	// processes, freed when they die, not storage.
	ShmRmidForced bool `cbor:"shm_rmid,omitempty"`
	// MsgQueues and MsgQueueBytes bound System V message queues: their
	// number (kernel.msgmni) and the bytes in each (kernel.msgmnb).
	MsgQueues     int `cbor:"msgmni,omitempty"`
	MsgQueueBytes int `cbor:"msgmnb,omitempty"`
	// Sem bounds System V semaphores (kernel.sem); its zero value
	// leaves the kernel's default.
	Sem SemLimits `cbor:"sem"`
}

// SemLimits are the four numbers of kernel.sem.
type SemLimits struct {
	PerSet     int `cbor:"msl"` // SEMMSL: semaphores in a set
	Total      int `cbor:"mns"` // SEMMNS: semaphores in all
	OpsPerCall int `cbor:"opm"` // SEMOPM: operations in one semop call
	Sets       int `cbor:"mni"` // SEMMNI: sets
}

// Hardening switches the confinement applied to user commands. All are on
// by default; the host only turns one off when the user asks for it.
type Hardening struct {
	Seccomp     bool `cbor:"seccomp"`
	Landlock    bool `cbor:"landlock"`
	AllowPtrace bool `cbor:"ptrace"`
	// NoRootCaps takes root's capabilities inside away too: commands
	// hold none whatever their uid, and set-id bits and file
	// capabilities give nothing (no_new_privs). Without it, root inside
	// holds the sandbox's capabilities (RootCaps, in its own user
	// namespace only) and set-id programs work as on any system. The
	// boundary asks for it when host root is one of the sandbox's ids.
	NoRootCaps bool `cbor:"norootcaps,omitempty"`
}

// Ready is the agent's answer to Boot.
type Ready struct {
	Version int    `cbor:"v"`
	Err     *Error `cbor:"err,omitempty"`
	// Notes lists confinement the agent could not apply (for example
	// landlock missing from the kernel), so the host can report it.
	Notes []string `cbor:"notes,omitempty"`
}

// Request is the first frame of every stream.
type Request struct {
	Op        Op           `cbor:"op"`
	Exec      *ExecRequest `cbor:"exec,omitempty"`
	Path      string       `cbor:"path,omitempty"`
	Mode      uint32       `cbor:"mode,omitempty"`
	Recursive bool         `cbor:"recursive,omitempty"`
	// MaxBytes bounds a read_file answer; the agent refuses larger files.
	MaxBytes int64 `cbor:"max,omitempty"`
	// Offset is where a read_file starts, and where a write_file with
	// InPlace writes.
	Offset int64 `cbor:"off,omitempty"`
	// Length, when more than 0, bounds the bytes a read_file sends from
	// Offset: it ends at Offset+Length or at the end of the file. With
	// it, MaxBytes bounds Length rather than the file's size.
	Length int64 `cbor:"len,omitempty"`
	// InPlace makes a write_file write into the file at Offset (making
	// it if missing, with Mode), rather than replace it whole; a final
	// symlink is refused, not followed.
	InPlace bool `cbor:"inplace,omitempty"`
	// Truncate, with InPlace, cuts the file where the write ends.
	Truncate bool `cbor:"trunc,omitempty"`
	// Link is the target of an OpSymlink.
	Link string `cbor:"link,omitempty"`
	// SetMode makes an OpSetAttr set Mode's permission bits (0 is a
	// mode too).
	SetMode bool `cbor:"setmode,omitempty"`
	// ModTime, when not 0, is the modification time an OpSetAttr sets,
	// in Unix nanoseconds.
	ModTime int64 `cbor:"mtime,omitempty"`
	// Container is an OpContainer's request.
	Container *ContainerRequest `cbor:"container,omitempty"`
}

// ExecRequest starts a command.
type ExecRequest struct {
	Argv    []string      `cbor:"argv"`
	Env     []string      `cbor:"env,omitempty"`
	Dir     string        `cbor:"dir,omitempty"`
	TTY     bool          `cbor:"tty,omitempty"`
	Rows    uint16        `cbor:"rows,omitempty"`
	Cols    uint16        `cbor:"cols,omitempty"`
	Stdin   bool          `cbor:"stdin,omitempty"`
	Timeout time.Duration `cbor:"timeout,omitempty"`
	// User, when set, is who the command runs as: USER, UID,
	// USER:GROUP or UID:GID, resolved in the sandbox's /etc/passwd and
	// /etc/group. Empty: root.
	User string `cbor:"user,omitempty"`
	// NoStarted asks the agent not to send the Started frame: the host
	// does not need the pid and learns of a failure to start from an Err
	// frame. It spares a wake-up of the host while the command runs.
	NoStarted bool `cbor:"nostarted,omitempty"`
	// Container, when set, names the container (OpContainer) the
	// command runs in; empty: the sandbox's own root.
	Container string `cbor:"container,omitempty"`
	// NoOutput gives the command /dev/null as stdout and stderr: no
	// output frames are sent. Not with TTY.
	NoOutput bool `cbor:"noout,omitempty"`
}

// Kind tags a frame on an exec or file stream after the Request.
type Kind uint8

// Frame kinds. Host to agent: Stdin, StdinClose, Signal, Resize, Kill.
// Agent to host: Started, Stdout, Stderr, Exit. Either: Data, End, Err,
// Info.
const (
	KStdin Kind = iota + 1
	KStdinClose
	KSignal
	KResize
	KStarted
	KStdout
	KStderr
	KExit
	KData
	KEnd
	KErr
	KInfo
	KList
	// KKill kills the command and every process it started; the exec
	// then ends with its Exit as usual. (Closing the stream kills too,
	// but says the host no longer wants the result.)
	KKill
)

// Msg is every frame after the Request.
type Msg struct {
	K     Kind       `cbor:"k"`
	Data  []byte     `cbor:"d,omitempty"`
	Sig   int        `cbor:"s,omitempty"`
	Rows  uint16     `cbor:"r,omitempty"`
	Cols  uint16     `cbor:"c,omitempty"`
	Exit  *Exit      `cbor:"x,omitempty"`
	Err   *Error     `cbor:"e,omitempty"`
	Info  *FileInfo  `cbor:"i,omitempty"`
	Files []FileInfo `cbor:"l,omitempty"`
	Usage *Usage     `cbor:"u,omitempty"`
	// Procs and ProcsMore answer OpProcesses: the processes, and how
	// many more there were than the list holds.
	Procs     []Process `cbor:"p,omitempty"`
	ProcsMore int       `cbor:"pm,omitempty"`
}

// Usage is what the user commands use now, and their limit events so
// far, as the agent reads them from their cgroup.
type Usage struct {
	CPUNanos        uint64 `cbor:"cpu"`
	MemoryBytes     uint64 `cbor:"mem"`
	MemoryPeakBytes uint64 `cbor:"peak,omitempty"`
	Pids            uint64 `cbor:"pids"`
	OOMKills        uint64 `cbor:"oom"`
	PidsLimitHits   uint64 `cbor:"pidsmax"`
}

// Exit reports how a command ended.
type Exit struct {
	Code int `cbor:"code"`
	// Signal is the signal that killed the command, or 0.
	Signal int `cbor:"sig,omitempty"`
	// TimedOut is set when the agent killed the command for its timeout.
	TimedOut bool          `cbor:"timeout,omitempty"`
	CPUTime  time.Duration `cbor:"cpu"`
	PeakRSS  int64         `cbor:"rss"`
	Duration time.Duration `cbor:"dur"`
	// Limits is set by an agent that counts its commands' limit events
	// itself (where the host cannot: in gVisor's Sentry, in a VM's
	// guest kernel): the events counted while the command ran, from
	// before it started until it was reaped. Nil: the host counts them.
	Limits *LimitEvents `cbor:"lim,omitempty"`
}

// LimitEvents counts the times the user commands reached a limit.
type LimitEvents struct {
	// OOMKills counts processes killed for the memory limit.
	OOMKills uint64 `cbor:"oom,omitempty"`
	// PidsLimitHits counts forks refused for the pids limit.
	PidsLimitHits uint64 `cbor:"pids,omitempty"`
}

// FileInfo describes one file.
type FileInfo struct {
	Name    string `cbor:"n"`
	Size    int64  `cbor:"s"`
	Mode    uint32 `cbor:"m"` // os.FileMode bits
	ModTime int64  `cbor:"t"` // unix nanoseconds
	IsDir   bool   `cbor:"d,omitempty"`
	Link    string `cbor:"l,omitempty"`
}
