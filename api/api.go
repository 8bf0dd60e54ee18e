// Package api holds the JSON-RPC 2.0 wire types that `airlock rpc`, the
// per-sandbox control socket and every client speak. One message per line,
// UTF-8 JSON, on stdin/stdout (or the socket). Binary data (file content,
// command output, stdin) is base64 (standard encoding, with padding).
//
// Requests that act on a sandbox take an optional "sandbox_id". It may be
// omitted while the session has exactly one sandbox.
//
// Params are decoded strictly: a member that the method's params type
// here does not have is refused with CodeInvalidParams, whose message
// names it by its path ("resources.memory_mbs") and the field it was
// likely meant to be. Keys match fields regardless of case, as
// encoding/json matches them.
//
// Streaming exec ("exec_stream") answers with several responses carrying
// the request's id: output chunks ({"stdout": ...} or {"stderr": ...})
// and then one final response with "done": true and the exit status. A
// client that wants one response per id passes "mode": "notifications":
// chunks then arrive as "exec.output" notifications and only the final
// result is a response.
package api

import (
	"encoding/json"
	"time"
)

// Version is the protocol version reported by "info".
const Version = 1

// Method names.
const (
	MethodCreate      = "create"
	MethodExec        = "exec"
	MethodExecStream  = "exec_stream"
	MethodStdin       = "stdin"
	MethodSignal      = "signal"
	MethodResize      = "resize"
	MethodCancel      = "cancel"
	MethodWriteFile   = "write_file"
	MethodReadFile    = "read_file"
	MethodListFiles   = "list_files"
	MethodStat        = "stat"
	MethodMkdir       = "mkdir"
	MethodRemove      = "remove"
	MethodSymlink     = "symlink"  // SymlinkParams
	MethodSetAttr     = "set_attr" // SetAttrParams
	MethodClose       = "close"
	MethodSubscribe   = "events.subscribe"
	MethodUnsubscribe = "events.unsubscribe"
	MethodInfo        = "info"
	// MethodAttach streams the output of a detached sandbox's main command
	// (control socket only); stdin goes to it with "stdin" and the attach
	// request's id.
	MethodAttach = "attach"

	// The policy methods read and change the host lists of a running
	// sandbox's network policy. Each answers with a PolicyResult: the
	// lists in force after the change. On a sandbox created without
	// "network" they fail with CodeUnsupported.
	MethodPolicyGet    = "policy.get"    // SandboxParams
	MethodPolicyAllow  = "policy.allow"  // PolicyHostParams
	MethodPolicyDeny   = "policy.deny"   // PolicyHostParams
	MethodPolicyRemove = "policy.remove" // PolicyHostParams

	// MethodStats answers with what a running sandbox uses now (Usage).
	MethodStats = "stats" // SandboxParams

	// MethodPause stops every process of a running sandbox where it is,
	// its agent included, until MethodResume; both take SandboxParams
	// and answer {}. While paused, requests that need the sandbox's
	// processes (exec, the file methods) fail with CodePaused; policy,
	// ports, stats and close are served.
	MethodPause  = "pause"
	MethodResume = "resume"

	// MethodProcesses lists the processes of a running sandbox's
	// commands, as ps inside it would (SandboxParams): a
	// ProcessesResult.
	MethodProcesses = "processes"

	// MethodPortForward publishes a TCP port of a running sandbox on the
	// host (PortForwardParams), as docker's -p does, and answers with
	// the address bound (PortForward). Connections to it enter the
	// sandbox through its network stack; no egress opens. It needs a
	// sandbox with a network (CodeUnsupported otherwise).
	MethodPortForward = "port_forward"
	// MethodPortForwardClose stops a published port
	// (PortForwardCloseParams): its listener and its connections close.
	MethodPortForwardClose = "port_forward_close"

	// The pool methods keep sandboxes started ahead of "create", so that
	// a create that names a pool ("pool": its pool_id) answers at once.
	// A session's pools end with it, closing the sandboxes still waiting.
	MethodPoolCreate = "pool.create" // PoolCreateParams; answers PoolCreateResult
	MethodPoolClose  = "pool.close"  // PoolParams
	MethodPoolList   = "pool.list"   // no params; answers PoolListResult

	// Notifications sent by the server.
	NotifyEvent      = "event"
	NotifyExecOutput = "exec.output"
	// NotifyImageProgress reports, while create gets its image into
	// the cache (a build, a download or a pull), how far it is
	// (ImageProgress).
	NotifyImageProgress = "image.progress"
)

// ImageProgress is the params of an image.progress notification.
type ImageProgress struct {
	// Image is the image as create named it.
	Image string `json:"image"`
	// Step is "resolve", "download", "unpack", "build", "verify",
	// "pack" or "done".
	Step string `json:"step"`
	// Item is what the step works on: a layer's digest, a file.
	Item string `json:"item,omitempty"`
	// Done of Total bytes, or of items when Unit is "items"; Total is
	// absent when not known.
	Done  int64 `json:"done"`
	Total int64 `json:"total,omitempty"`
	// Unit is absent for bytes, "items" for a count (packages).
	Unit string `json:"unit,omitempty"`
}

// Image is the image a sandbox runs, in create's result.
type Image struct {
	// Name is as create named it ("host" by default).
	Name string `json:"name"`
	// Key is its content key in the image cache (absent for host).
	Key string `json:"key,omitempty"`
	// WorkingDir is where commands start unless they say otherwise.
	WorkingDir string `json:"working_dir,omitempty"`
	// User is the image's user, Entrypoint and Cmd its default command.
	User       string   `json:"user,omitempty"`
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
}

// Request is a JSON-RPC 2.0 request or, without ID, a notification.
type Request struct {
	JSONRPC string          `json:"jsonrpc"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params,omitempty"`
	ID      json.RawMessage `json:"id,omitempty"`
}

// Response is a JSON-RPC 2.0 response: Result or Error, never both.
type Response struct {
	JSONRPC string          `json:"jsonrpc"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *Error          `json:"error,omitempty"`
	ID      json.RawMessage `json:"id"`
}

// Notification is a message from the server with no id.
type Notification struct {
	JSONRPC string `json:"jsonrpc"`
	Method  string `json:"method"`
	Params  any    `json:"params"`
}

// Error is a JSON-RPC error object. Message says what failed and what to
// do; Data, when present, carries machine-readable details.
type Error struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

func (e *Error) Error() string { return e.Message }

// Error codes: the JSON-RPC 2.0 standard ones, then airlock's own.
const (
	CodeParseError     = -32700 // the line is not JSON
	CodeInvalidRequest = -32600 // not a JSON-RPC 2.0 request object
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602 // params missing, of the wrong type, or invalid
	CodeInternal       = -32603

	CodeStartFailed     = -32000 // the sandbox could not be started
	CodeNotFound        = -32001 // no such sandbox, exec or file, or (policy.remove) host pattern
	CodeNotRunning      = -32002 // the sandbox has stopped (closed, timed out, crashed)
	CodeLimitExceeded   = -32003 // message, output, file or request-count limit
	CodePolicyDenied    = -32004 // refused by network or file policy
	CodeCommandFailed   = -32005 // the command could not be started (not found, not executable)
	CodeFileError       = -32006 // a file operation failed; Data.kind says how
	CodeCancelled       = -32007 // the request was cancelled, or the session ended
	CodeUnsupported     = -32008 // a feature this build, platform or sandbox does not offer (policy.* without a network)
	CodePermissionError = -32009 // the caller may not do this (for example create on a control socket)
	CodePaused          = -32010 // the sandbox is paused (pause): resume it first; also pause of a paused one, resume of one that is not
)

// FileErrorData is the Data of CodeFileError.
type FileErrorData struct {
	// Kind is one of not_found, exists, permission, is_dir, not_dir,
	// not_empty, no_space, too_large, invalid.
	Kind string `json:"kind"`
	Path string `json:"path,omitempty"`
}

// CommandFailedData is the Data of CodeCommandFailed.
type CommandFailedData struct {
	// ExitCode is what a shell would return: 127 not found, 126 not
	// executable.
	ExitCode int `json:"exit_code"`
}

// Resources bounds what a sandbox may use.
type Resources struct {
	CPUs float64 `json:"cpus,omitempty"`
	// MemoryMB bounds the memory of the sandbox's processes, with the
	// kernel memory they cause and a tmpfs disk. 0 or absent: 1024, or a
	// quarter of the host's memory when smaller; -1: no limit.
	MemoryMB       int64 `json:"memory_mb,omitempty"`
	TimeoutSeconds int64 `json:"timeout_seconds,omitempty"`
}

// CreateParams configures a sandbox; the fields follow the embed API's
// airlock.Config.
type CreateParams struct {
	Image       string            `json:"image,omitempty"`
	RootFS      string            `json:"rootfs,omitempty"`
	Isolation   string            `json:"isolation,omitempty"`
	Resources   Resources         `json:"resources,omitzero"`
	Env         map[string]string `json:"env,omitempty"`
	PidsLimit   int64             `json:"pids_limit,omitempty"`
	NofileLimit uint64            `json:"nofile_limit,omitempty"`
	// DiskMB bounds the writable tree (/, /tmp, /workspace, /dev/shm)
	// and its files (one per 8 KiB). 0 or absent: half the memory
	// limit, at most 1024. Up to half the memory limit it is a tmpfs;
	// larger, a file under the state directory (root only; refused
	// otherwise with CodeInvalidParams).
	DiskMB         int64  `json:"disk_mb,omitempty"`
	MaxFileSizeMB  int64  `json:"max_file_size_mb,omitempty"`
	MaxOutputBytes int64  `json:"max_output_bytes,omitempty"`
	Hostname       string `json:"hostname,omitempty"`
	AllowPtrace    bool   `json:"allow_ptrace,omitempty"`
	// Network is the sandbox's egress policy, the JSON of policy.Config
	// (json.Marshal of one will do): allowed_hosts, denied_hosts,
	// block_private_ips, allowed_cidrs, egress, secrets,
	// scrub_responses, policy_script, dns_servers, extra_root_cas.
	// Absent or null: no network interface at all. {}: a network on
	// which nothing is allowed until policy.allow adds hosts. It is
	// decoded strictly: an unknown field or a secret given twice is
	// refused with CodeInvalidParams, as is an invalid policy (the
	// message names the field). Secret values never appear in responses,
	// events, logs or the state directory; commands see placeholders
	// (CreateResult.Env). Env may set a secret's variable only to
	// "${NAME}", which stands for the placeholder.
	Network json.RawMessage `json:"network,omitempty"`
	// VFS is the JSON of airlock.VFSConfig: mounts (programmable:
	// {"type": "memory", "size_mb": N}, {"type": "real_fs", "host_path":
	// P, "readonly": true}, {"type": "overlay", "upper": {...}, "lower":
	// {...}}), direct_mounts ({"host_path": P, "readonly": true}) and
	// blocked_paths, by absolute sandbox path. It is decoded strictly;
	// a bad mount (an unknown type, a host_path that does not exist, a
	// target that is not absolute or hides /proc, two mounts at one
	// target) is refused with CodeInvalidParams before anything starts.
	VFS json.RawMessage `json:"vfs,omitempty"`
	// Ports publishes TCP ports of the sandbox on the host, as
	// port_forward does, once it has started. A sandbox without
	// "network" that publishes ports gets a network on which nothing is
	// allowed ({}): a published port opens no egress.
	Ports []PortMapping `json:"ports,omitempty"`
	// Pool takes the sandbox from a pool of this session (a pool_id from
	// pool.create), ready at once, configured as the pool's params say;
	// no other field may be given with it.
	Pool string `json:"pool,omitempty"`
}

// PoolCreateParams starts a pool: Size sandboxes (1 to 64) of the
// configuration create would start, kept ready; each one a create takes
// is replaced in the background. A sandbox's resources.timeout_seconds
// counts from when create takes it.
type PoolCreateParams struct {
	CreateParams
	Size int `json:"size"`
}

// PoolCreateResult names the new pool.
type PoolCreateResult struct {
	PoolID string `json:"pool_id"`
}

// PoolParams names a pool.
type PoolParams struct {
	PoolID string `json:"pool_id"`
}

// PoolInfo describes a pool: Ready of its Size sandboxes are ready now;
// Started and Failed count its starts, Discarded the ready sandboxes that
// ended before a create took them.
type PoolInfo struct {
	PoolID    string `json:"pool_id"`
	Isolation string `json:"isolation"`
	Size      int    `json:"size"`
	Ready     int    `json:"ready"`
	Started   int    `json:"started"`
	Failed    int    `json:"failed"`
	Discarded int    `json:"discarded"`
}

// PoolListResult lists the session's pools, oldest first.
type PoolListResult struct {
	Pools []PoolInfo `json:"pools"`
}

// CreateResult describes the new sandbox.
type CreateResult struct {
	SandboxID string `json:"sandbox_id"`
	Isolation string `json:"isolation"`
	// Ports are the ports published by create's "ports", with the host
	// addresses bound.
	Ports []PortForward `json:"ports,omitempty"`
	// Env is the environment commands get, with placeholders in place of
	// secret values.
	Env map[string]string `json:"env"`
	// Notes lists protections this machine could not apply.
	Notes []string `json:"notes,omitempty"`
	Image Image    `json:"image"`
}

// SandboxParams names the sandbox a request is for.
type SandboxParams struct {
	SandboxID string `json:"sandbox_id,omitempty"`
}

// PolicyHostParams names a host pattern for policy.allow, policy.deny
// and policy.remove: "api.example.com", "*.example.com" (any subdomain)
// or "*" (any public host). An invalid pattern is refused with
// CodeInvalidParams; policy.remove of a pattern in neither list with
// CodeNotFound.
type PolicyHostParams struct {
	SandboxID string `json:"sandbox_id,omitempty"`
	Host      string `json:"host"`
}

// PortMapping asks for a TCP port of the sandbox to be published on the
// host, as docker's -p [HOST_IP:]HOST_PORT:SANDBOX_PORT does.
type PortMapping struct {
	// SandboxPort is the port a server in the sandbox listens on, on
	// all its addresses (0.0.0.0) or on its own (10.88.0.2): a server
	// that listens on 127.0.0.1 alone is not reachable from outside
	// it. Required, 1 to 65535.
	SandboxPort uint16 `json:"sandbox_port"`
	// HostPort is the host's port; 0 or absent: a free one, chosen by
	// the system (the answer says which).
	HostPort uint16 `json:"host_port,omitempty"`
	// HostIP is the host address to listen on; absent: 127.0.0.1.
	// "0.0.0.0" or "::" publish on every address of the host.
	HostIP string `json:"host_ip,omitempty"`
	// Protocol is "tcp" (the default, when absent); "udp" is refused
	// with CodeInvalidParams, since only TCP ports can be published.
	Protocol string `json:"protocol,omitempty"`
}

// PortForwardParams publishes a port of a running sandbox: the fields
// of PortMapping, and the sandbox.
type PortForwardParams struct {
	SandboxID   string `json:"sandbox_id,omitempty"`
	SandboxPort uint16 `json:"sandbox_port"`
	HostPort    uint16 `json:"host_port,omitempty"`
	HostIP      string `json:"host_ip,omitempty"`
	Protocol    string `json:"protocol,omitempty"`
}

// PortForward is a published port: the host address it listens on and
// the sandbox's port it leads to.
type PortForward struct {
	HostIP      string `json:"host_ip"`
	HostPort    uint16 `json:"host_port"`
	SandboxPort uint16 `json:"sandbox_port"`
	Protocol    string `json:"protocol"`
}

// PortForwardCloseParams names the published port to stop by its host
// port and, when the sandbox publishes that port on several host
// addresses, its host address (absent: every one). A port that is not
// published is CodeNotFound.
type PortForwardCloseParams struct {
	SandboxID string `json:"sandbox_id,omitempty"`
	HostPort  uint16 `json:"host_port"`
	HostIP    string `json:"host_ip,omitempty"`
}

// PortForwardCloseResult lists the published ports that were stopped.
type PortForwardCloseResult struct {
	Closed []PortForward `json:"closed"`
}

// PolicyResult lists the host patterns in force, normalised (lower
// case, no trailing dot). A denied pattern wins over every allowed one.
type PolicyResult struct {
	AllowedHosts []string `json:"allowed_hosts"`
	DeniedHosts  []string `json:"denied_hosts"`
}

// ExecParams runs a command: Command through /bin/sh -c, or Argv as is.
type ExecParams struct {
	SandboxID  string            `json:"sandbox_id,omitempty"`
	Command    string            `json:"command,omitempty"`
	Argv       []string          `json:"argv,omitempty"`
	WorkingDir string            `json:"working_dir,omitempty"`
	Env        map[string]string `json:"env,omitempty"`
	// User runs the command as USER, UID, USER:GROUP or UID:GID of the
	// sandbox's accounts; default the image's user, else root.
	User string `json:"user,omitempty"`
	// TimeoutSeconds kills the command's whole process tree after this
	// long; the result says killed_by "timeout".
	TimeoutSeconds float64 `json:"timeout_seconds,omitempty"`
	// Stdin is the command's whole input, base64.
	Stdin string `json:"stdin,omitempty"`
	// OpenStdin keeps stdin open for "stdin" requests until they close it.
	OpenStdin bool   `json:"open_stdin,omitempty"`
	TTY       bool   `json:"tty,omitempty"`
	Rows      uint16 `json:"rows,omitempty"`
	Cols      uint16 `json:"cols,omitempty"`
	// Mode (exec_stream only): "responses" (default) or "notifications".
	Mode string `json:"mode,omitempty"`
	// Detach (exec only) starts the command and answers at once with an
	// ExecDetachedResult, as `docker exec -d` does: the command runs on,
	// its output discarded, after the request and its session end, until
	// it exits, its timeout passes or the sandbox stops. Its end is
	// reported by the "exec" event. Not with open_stdin or tty.
	Detach bool `json:"detach,omitempty"`
}

// ExecDetachedResult is the answer to an exec with detach: the command's
// process id inside the sandbox.
type ExecDetachedResult struct {
	Pid int `json:"pid"`
}

// Exec stream modes.
const (
	ModeResponses     = "responses"
	ModeNotifications = "notifications"
)

// ExecResult is the result of exec, and (with Done set and no output) the
// final response of exec_stream.
type ExecResult struct {
	ExitCode        int      `json:"exit_code"`
	Stdout          string   `json:"stdout,omitempty"`
	Stderr          string   `json:"stderr,omitempty"`
	StdoutTruncated bool     `json:"stdout_truncated,omitempty"`
	StderrTruncated bool     `json:"stderr_truncated,omitempty"`
	DurationMs      int64    `json:"duration_ms"`
	CPUTimeMs       int64    `json:"cpu_time_ms"`
	PeakMemoryBytes int64    `json:"peak_memory_bytes"`
	KilledBy        *string  `json:"killed_by"` // timeout, oom, signal, or null
	Signal          int      `json:"signal"`
	LimitsHit       []string `json:"limits_hit,omitempty"`
	Done            bool     `json:"done,omitempty"`
}

// ExecChunk is one piece of output of exec_stream: a response in
// "responses" mode, the params of an "exec.output" notification (with ID
// set to the exec request's id) in "notifications" mode.
type ExecChunk struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Stdout string          `json:"stdout,omitempty"`
	Stderr string          `json:"stderr,omitempty"`
}

// ExecRefParams names a running exec by the id of the request that
// started it.
type ExecRefParams struct {
	SandboxID string          `json:"sandbox_id,omitempty"`
	ID        json.RawMessage `json:"id"`
}

// StdinParams writes to, or closes, a running exec's stdin.
type StdinParams struct {
	SandboxID string          `json:"sandbox_id,omitempty"`
	ID        json.RawMessage `json:"id"`
	Data      string          `json:"data,omitempty"`
	Close     bool            `json:"close,omitempty"`
}

// SignalParams sends a signal, by name ("TERM", "SIGTERM") or number.
type SignalParams struct {
	SandboxID string          `json:"sandbox_id,omitempty"`
	ID        json.RawMessage `json:"id"`
	Signal    json.RawMessage `json:"signal"`
}

// ResizeParams changes a TTY exec's window size.
type ResizeParams struct {
	SandboxID string          `json:"sandbox_id,omitempty"`
	ID        json.RawMessage `json:"id"`
	Rows      uint16          `json:"rows"`
	Cols      uint16          `json:"cols"`
}

// WriteFileParams writes a whole file; mode defaults to 0644 (420).
// With Offset (0 included), the content is written into the file at that
// offset, in place: the rest of the file stays (a missing file is made
// with Mode), and Truncate cuts the file where the content ends. Large
// files are written so, in parts; a final symlink is then refused rather
// than followed.
type WriteFileParams struct {
	SandboxID string `json:"sandbox_id,omitempty"`
	Path      string `json:"path"`
	Content   string `json:"content"`
	Mode      uint32 `json:"mode,omitempty"`
	Offset    *int64 `json:"offset,omitempty"`
	Truncate  bool   `json:"truncate,omitempty"`
}

// WriteFileResult reports what was written.
type WriteFileResult struct {
	Size int64 `json:"size"`
}

// PathParams names a file.
type PathParams struct {
	SandboxID string `json:"sandbox_id,omitempty"`
	Path      string `json:"path"`
}

// ReadFileParams reads a whole file. MaxBytes bounds the file's size
// (default, and most, what fits in one message: 64 MiB with the default
// 128 MiB message limit); a larger file is refused with CodeFileError,
// kind too_large.
//
// Offset and Length read a part: Length bytes from Offset (0: to the
// end), within MaxBytes, so that a file of any size is read in parts.
//
// HostPath, when set, names an existing regular file on the host where
// the server runs (not a symbolic link), which the server truncates and
// writes the content to, instead of putting it in the result: a client
// on the same host (the SDKs, for large reads) skips base64 both ways.
// No message limit applies then; what is read is bounded by MaxBytes if
// set, and by the file's size when the read starts.
type ReadFileParams struct {
	SandboxID string `json:"sandbox_id,omitempty"`
	Path      string `json:"path"`
	MaxBytes  int64  `json:"max_bytes,omitempty"`
	Offset    int64  `json:"offset,omitempty"`
	Length    int64  `json:"length,omitempty"`
	HostPath  string `json:"host_path,omitempty"`
}

// ReadFileResult carries a file's content: Size bytes of it, from the
// offset asked for, of a file of FileSize bytes. With a HostPath, the
// content is in that file and Content is empty.
type ReadFileResult struct {
	Content  string `json:"content"`
	Size     int64  `json:"size"`
	Mode     uint32 `json:"mode"`
	FileSize int64  `json:"file_size"`
}

// FileInfo describes a file; Mode holds the permission bits (and
// file-type bits as Go's io/fs encodes them).
type FileInfo struct {
	Name    string    `json:"name"`
	Size    int64     `json:"size"`
	Mode    uint32    `json:"mode"`
	IsDir   bool      `json:"is_dir"`
	ModTime time.Time `json:"mod_time"`
	Link    string    `json:"link,omitempty"`
}

// ListFilesResult lists a directory.
type ListFilesResult struct {
	Files []FileInfo `json:"files"`
}

// MkdirParams creates a directory; mode defaults to 0755.
type MkdirParams struct {
	SandboxID string `json:"sandbox_id,omitempty"`
	Path      string `json:"path"`
	Mode      uint32 `json:"mode,omitempty"`
	Parents   bool   `json:"parents,omitempty"`
}

// RemoveParams removes a file or, with Recursive, a tree.
type RemoveParams struct {
	SandboxID string `json:"sandbox_id,omitempty"`
	Path      string `json:"path"`
	Recursive bool   `json:"recursive,omitempty"`
}

// SymlinkParams makes Path a symbolic link to Target (stored as given,
// never followed), replacing a file or link at Path.
type SymlinkParams struct {
	SandboxID string `json:"sandbox_id,omitempty"`
	Path      string `json:"path"`
	Target    string `json:"target"`
}

// SetAttrParams sets Path's permission bits (Mode, at most 0777) and
// modification time (ModTime), each when present, without following a
// final symlink.
type SetAttrParams struct {
	SandboxID string     `json:"sandbox_id,omitempty"`
	Path      string     `json:"path"`
	Mode      *uint32    `json:"mode,omitempty"`
	ModTime   *time.Time `json:"mod_time,omitempty"`
}

// AttachParams attaches to a detached sandbox's main command. Mode is
// as for exec_stream: "responses" (default) or "notifications".
type AttachParams struct {
	SandboxID string `json:"sandbox_id,omitempty"`
	Mode      string `json:"mode,omitempty"`
}

// SubscribeParams selects event types; empty means all.
type SubscribeParams struct {
	Types []string `json:"types,omitempty"`
}

// SubscribeResult lists the types now delivered.
type SubscribeResult struct {
	Types []string `json:"types"`
}

// InfoResult describes the server and its sandboxes.
type InfoResult struct {
	Version         string        `json:"version"`
	Protocol        int           `json:"protocol"`
	MaxMessageBytes int64         `json:"max_message_bytes"`
	Sandboxes       []SandboxInfo `json:"sandboxes"`
	// EventsDropped counts the events this session dropped because the
	// client read them too slowly.
	EventsDropped int64 `json:"events_dropped"`
}

// SandboxInfo describes one sandbox of a session.
type SandboxInfo struct {
	SandboxID string    `json:"sandbox_id"`
	Isolation string    `json:"isolation"`
	CreatedAt time.Time `json:"created_at"`
	PID       int       `json:"pid"`
	Notes     []string  `json:"notes,omitempty"`
	// State is "running", "paused" (see MethodPause) or "stopped" (the
	// sandbox ended by itself, for example at its timeout; close it to
	// forget it).
	State string `json:"state"`
	// Ports are the sandbox's published ports.
	Ports []PortForward `json:"ports,omitempty"`
}

// Event is the params of an "event" notification. Exactly one detail
// field is set, matching Type.
type Event struct {
	Type      string          `json:"type"` // exec, file, network, lifecycle
	Timestamp int64           `json:"timestamp"`
	SandboxID string          `json:"sandbox_id,omitempty"`
	Exec      json.RawMessage `json:"exec,omitempty"`
	File      json.RawMessage `json:"file,omitempty"`
	Network   json.RawMessage `json:"network,omitempty"`
	Lifecycle json.RawMessage `json:"lifecycle,omitempty"`
	// Dropped counts the events dropped just before this one because the
	// client read them too slowly.
	Dropped int64 `json:"dropped,omitempty"`
}

// Event types.
const (
	EventExec      = "exec"
	EventFile      = "file"
	EventNetwork   = "network"
	EventLifecycle = "lifecycle"
)

// ExecEvent reports a finished command.
type ExecEvent struct {
	Command    []string `json:"command"`
	ExitCode   int      `json:"exit_code"`
	DurationMs int64    `json:"duration_ms"`
	// KilledBy is "timeout", "oom", "signal" or "".
	KilledBy string `json:"killed_by,omitempty"`
}

// FileEvent reports a file operation.
type FileEvent struct {
	// Op is the operation: write, read, list, stat, mkdir, remove, ...
	Op   string `json:"op"`
	Path string `json:"path"`
	// To is where a rename or link leads.
	To   string `json:"to,omitempty"`
	Size int64  `json:"size,omitempty"`
	// Blocked is set when the operation was refused (by a hook, the
	// policy script, a read-only mount or a blocked path), and Reason
	// says why.
	Blocked bool   `json:"blocked,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// NetworkEvent reports a request, connection, flow or DNS question that
// crossed (or was refused at) the sandbox's network boundary.
type NetworkEvent struct {
	// Kind is "http" (one HTTP request, plain or intercepted TLS),
	// "dns" (one DNS question), "tcp" (a connection that is not
	// intercepted, or that was refused before any request), "udp", or
	// "inbound" (a connection from the host through a published port:
	// Host is the host address it came in at, IP and Port the sandbox's
	// address and port, RequestBytes what went in, ResponseBytes what
	// came out).
	Kind   string `json:"kind"`
	Method string `json:"method,omitempty"`
	URL    string `json:"url,omitempty"`
	// Host is the request's host, the DNS question, or the first name
	// pinned to IP.
	Host string `json:"host,omitempty"`
	// IP and Port are the destination of a connection or flow.
	IP   string `json:"ip,omitempty"`
	Port uint16 `json:"port,omitempty"`
	// Proto is "tcp" or "udp" (for DNS: how the question came).
	Proto string `json:"proto,omitempty"`
	// QType is a DNS question's type ("A", "AAAA", ...); Answers are the
	// addresses its answer gave the sandbox.
	QType         string   `json:"qtype,omitempty"`
	Answers       []string `json:"answers,omitempty"`
	StatusCode    int      `json:"status_code,omitempty"`
	RequestBytes  int64    `json:"request_bytes,omitempty"`
	ResponseBytes int64    `json:"response_bytes,omitempty"`
	DurationMs    int64    `json:"duration_ms,omitempty"`
	Blocked       bool     `json:"blocked"`
	// Reason says why it was blocked: a code ("host_not_allowed",
	// "blocked_ip", "secret_leak", ...), then ": " and a detail.
	Reason string `json:"reason,omitempty"`
}

// Network event kinds.
const (
	NetHTTP = "http"
	NetDNS  = "dns"
	NetTCP  = "tcp"
	NetUDP  = "udp"
	// NetInbound is a connection from the host through a published
	// port; it never crosses the egress policy.
	NetInbound = "inbound"
)

// LifecycleEvent reports a sandbox starting or stopping.
type LifecycleEvent struct {
	// State is, for example, "started" or "stopped".
	State      string `json:"state"`
	DurationMs int64  `json:"duration_ms,omitempty"`
	Reason     string `json:"reason,omitempty"`
}

// ProcessInfo is a process of a sandbox's commands: the result of
// "processes" (docker top). Pids are the sandbox's own.
type ProcessInfo struct {
	PID  int    `json:"pid"`
	PPID int    `json:"ppid"`
	UID  uint32 `json:"uid"`
	// State is the kernel's letter: R running, S sleeping, D in an
	// uninterruptible wait, Z zombie, T stopped, ...
	State     string `json:"state"`
	CPUNanos  int64  `json:"cpu_nanos"`
	RSSBytes  int64  `json:"rss_bytes"`
	ElapsedMs int64  `json:"elapsed_ms"`
	// Command is its argv (cut to 512 bytes), or its name in brackets
	// for a process without one (a zombie).
	Command []string `json:"command"`
}

// ProcessesResult lists a sandbox's processes by pid; More counts those
// left out past the list's bound (512 processes, 48 KiB).
type ProcessesResult struct {
	Processes []ProcessInfo `json:"processes"`
	More      int           `json:"more,omitempty"`
}

// Usage is what a sandbox uses at one moment: the result of "stats".
// CPU is cumulative: the CPU share over an interval is the difference of
// two readings' CPUNanos over the time between them.
type Usage struct {
	Time time.Time `json:"time"`
	// CPUNanos is the CPU time its processes have used so far.
	CPUNanos uint64 `json:"cpu_nanos"`
	// CPUs is its CPU quota in cores; 0: unlimited.
	CPUs float64 `json:"cpus,omitempty"`
	// MemoryBytes is the memory its processes use now (page cache and
	// tmpfs files included), MemoryPeakBytes the most so far (0 when the
	// kernel does not report it) and MemoryLimitBytes the bound.
	MemoryBytes      uint64 `json:"memory_bytes"`
	MemoryPeakBytes  uint64 `json:"memory_peak_bytes,omitempty"`
	MemoryLimitBytes uint64 `json:"memory_limit_bytes,omitempty"`
	// Pids is how many processes and threads it has, PidsLimit the bound.
	Pids      uint64 `json:"pids"`
	PidsLimit uint64 `json:"pids_limit,omitempty"`
	// OOMKills and PidsLimitHits count, so far, the processes the memory
	// limit killed and the forks the pids limit refused.
	OOMKills      uint64 `json:"oom_kills"`
	PidsLimitHits uint64 `json:"pids_limit_hits"`
	// NetRxBytes and NetTxBytes count the bytes of the frames it has
	// received and sent on its network interface; both are 0 without a
	// network.
	NetRxBytes uint64 `json:"net_rx_bytes"`
	NetTxBytes uint64 `json:"net_tx_bytes"`
}
