package client

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/jsonblob"
)

// Sandbox is a handle for one sandbox of a session. Its methods are safe
// for concurrent use.
type Sandbox struct {
	c       *Client
	id      string
	created *api.CreateResult
}

// ID returns the sandbox's id ("" for the session's only sandbox).
func (s *Sandbox) ID() string { return s.id }

// Client returns the client the sandbox is reached through.
func (s *Sandbox) Client() *Client { return s.c }

// Isolation returns the isolation level the server chose, for a sandbox
// made by Create ("" otherwise).
func (s *Sandbox) Isolation() string {
	if s.created == nil {
		return ""
	}
	return s.created.Isolation
}

// Env returns, for a sandbox made by Create, the environment commands get:
// CreateParams.Env and, for each secret of its network policy, the
// secret's placeholder (never its value).
func (s *Sandbox) Env() map[string]string {
	if s.created == nil {
		return nil
	}
	return s.created.Env
}

// Notes lists, for a sandbox made by Create, the protections the server's
// machine could not apply, with the reason.
func (s *Sandbox) Notes() []string {
	if s.created == nil {
		return nil
	}
	return append([]string(nil), s.created.Notes...)
}

// Result is the outcome of a command.
type Result struct {
	// ExitCode is the command's exit code; 128+Signal when a signal
	// killed it.
	ExitCode int
	// Stdout and Stderr are the buffered output (Run and Exec only; a
	// streamed command's output went through its Process).
	Stdout, Stderr []byte
	// StdoutTruncated and StderrTruncated report output beyond the
	// sandbox's max_output_bytes that was dropped.
	StdoutTruncated, StderrTruncated bool
	Duration                         time.Duration
	CPUTime                          time.Duration
	PeakMemoryBytes                  int64
	// KilledBy is "timeout", "oom", "signal", or "" when the command
	// ended by itself.
	KilledBy string
	// Signal is the signal that killed the command, or 0.
	Signal int
	// LimitsHit lists the sandbox limits that refused something while the
	// command ran ("pids", "memory", ...).
	LimitsHit []string
}

func newResult(r *api.ExecResult) (*Result, error) {
	res := &Result{
		ExitCode:        r.ExitCode,
		StdoutTruncated: r.StdoutTruncated,
		StderrTruncated: r.StderrTruncated,
		Duration:        time.Duration(r.DurationMs) * time.Millisecond,
		CPUTime:         time.Duration(r.CPUTimeMs) * time.Millisecond,
		PeakMemoryBytes: r.PeakMemoryBytes,
		Signal:          r.Signal,
		LimitsHit:       r.LimitsHit,
	}
	if r.KilledBy != nil {
		res.KilledBy = *r.KilledBy
	}
	var err error
	if res.Stdout, err = decodeBase64("stdout", r.Stdout); err != nil {
		return nil, err
	}
	if res.Stderr, err = decodeBase64("stderr", r.Stderr); err != nil {
		return nil, err
	}
	return res, nil
}

// decodeCut is decodeBase64 of text cut out of a response line: the same
// bytes, or the same error.
func decodeCut(what string, text []byte) ([]byte, error) {
	if len(text) == 0 {
		return nil, nil
	}
	if b, err := jsonblob.DecodeString(text); err == nil {
		return b, nil
	}
	return decodeBase64(what, string(text))
}

func decodeBase64(what, s string) ([]byte, error) {
	if s == "" {
		return nil, nil
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("protocol error: %s from the server is not base64: %w", what, err)
	}
	return b, nil
}

// Exec runs command through /bin/sh -c and returns its buffered output.
// A non-zero exit is not an error: see Result.ExitCode.
func (s *Sandbox) Exec(ctx context.Context, command string) (*Result, error) {
	return s.Run(ctx, api.ExecParams{Command: command})
}

// StartDetached starts a command that runs on without anyone waiting for
// it, as `docker exec -d` does, and returns its process id in the
// sandbox: its output is discarded, and it ends when it exits, its
// timeout passes or the sandbox stops (the "exec" event reports its end).
// params.OpenStdin and params.TTY are refused; params.Stdin, given
// whole, is its input.
func (s *Sandbox) StartDetached(ctx context.Context, params api.ExecParams) (int, error) {
	s.setID(&params.SandboxID)
	params.Mode, params.Detach = "", true
	var r api.ExecDetachedResult
	if err := s.c.call(ctx, api.MethodExec, params, &r); err != nil {
		return 0, err
	}
	return r.Pid, nil
}

// Run runs a command (params.Command through /bin/sh -c, or params.Argv
// as is) and returns its buffered output. If ctx ends first, the command
// is killed and Run returns ctx.Err(). A command that cannot be started
// is an *Error matching ErrCommandFailed (see IsCommandNotFound).
func (s *Sandbox) Run(ctx context.Context, params api.ExecParams) (*Result, error) {
	s.setID(&params.SandboxID)
	params.Mode = ""
	raw, err := json.Marshal(params)
	if err != nil {
		return nil, fmt.Errorf("airlock %s: encoding params: %w", api.MethodExec, err)
	}
	// A large output comes cut out of the response line, as base64 text,
	// rather than decoded by encoding/json into several copies.
	var r api.ExecResult
	cut, line, err := s.c.roundTrip(ctx, api.MethodExec, appendParams(requestHead(nil, api.MethodExec, len(raw)), raw), raw, &r, []string{"stdout", "stderr"})
	if err != nil {
		return nil, err
	}
	res, err := newResult(&r)
	if err == nil && cut != nil {
		if res.Stdout, err = decodeCut("stdout", cut[0]); err == nil {
			res.Stderr, err = decodeCut("stderr", cut[1])
		}
		// Nothing else refers to the line: keep its memory for the next.
		jsonblob.Recycle(line)
	}
	if err != nil {
		return nil, fmt.Errorf("airlock exec: %w", err)
	}
	return res, nil
}

func (s *Sandbox) setID(id *string) {
	if s.id != "" {
		*id = s.id
	}
}

// WriteFile writes data to path, replacing the file. mode holds the
// permission bits; 0 means 0644.
func (s *Sandbox) WriteFile(ctx context.Context, path string, data []byte, mode fs.FileMode) error {
	return s.writeFile(ctx, api.WriteFileParams{SandboxID: s.id, Path: path, Mode: unixMode(mode)}, data)
}

// WriteFileAt writes data into the file at path from offset, in place:
// the rest of the file stays, and with truncate the file is cut where
// data ends. A missing file is made with mode's permission bits (0:
// 0644); a final symlink is refused, not followed.
func (s *Sandbox) WriteFileAt(ctx context.Context, path string, offset int64, data []byte, mode fs.FileMode, truncate bool) error {
	return s.writeFile(ctx, api.WriteFileParams{SandboxID: s.id, Path: path, Mode: unixMode(mode), Offset: &offset, Truncate: truncate}, data)
}

func (s *Sandbox) writeFile(ctx context.Context, params api.WriteFileParams, data []byte) error {
	// The base64 of data goes straight into the request line, without
	// encoding/json going over it.
	// The line is written into memory kept from an earlier large line if
	// there is some, and kept in turn once sent.
	n := base64.StdEncoding.EncodedLen(len(data)) + 2*len(params.Path) + len(s.id) + 192
	line := requestHead(jsonblob.Buffer(n+128), api.MethodWriteFile, n)
	line, err := jsonblob.AppendMarshal(line, params, "content", data)
	if err != nil {
		return fmt.Errorf("airlock %s: encoding params: %w", api.MethodWriteFile, err)
	}
	_, _, err = s.c.roundTrip(ctx, api.MethodWriteFile, line, nil, nil, nil)
	jsonblob.Recycle(line)
	return err
}

// StreamChunk is how much of a file WriteFileFrom and ReadFileTo carry
// in one request.
const StreamChunk = 8 << 20

// WriteFileFrom writes what r yields to path, replacing the file, in
// requests of StreamChunk bytes, so that a file of any size goes with
// memory flat on both sides. The first part replaces the file (a link
// there is replaced, not followed) and the others are written after it
// in place; when one fails, the file is left partial. It returns the
// bytes written.
func (s *Sandbox) WriteFileFrom(ctx context.Context, path string, r io.Reader, mode fs.FileMode) (int64, error) {
	buf := make([]byte, StreamChunk)
	var off int64
	for {
		k, err := io.ReadFull(r, buf)
		if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
			return off, fmt.Errorf("airlock write_file %s: read the source: %w", path, err)
		}
		if off == 0 {
			if werr := s.WriteFile(ctx, path, buf[:k], mode); werr != nil {
				return off, werr
			}
		} else if k > 0 {
			if werr := s.WriteFileAt(ctx, path, off, buf[:k], mode, false); werr != nil {
				return off, werr
			}
		}
		off += int64(k)
		if err != nil || k == 0 {
			return off, nil
		}
	}
}

// ReadFile returns the content of the file at path. A missing file is an
// error matching fs.ErrNotExist. A file larger than one message holds
// (Info's MaxMessageBytes, less a quarter for base64) is refused with an
// *Error whose FileErrorKind is FileTooLarge: read it in parts with
// ReadFileAt, or stream it with ReadFileTo.
func (s *Sandbox) ReadFile(ctx context.Context, path string) ([]byte, error) {
	b, _, err := s.readFile(ctx, api.ReadFileParams{SandboxID: s.id, Path: path})
	return b, err
}

// ReadFileAt returns length bytes of the file at path from offset (fewer
// where the file ends; length 0: to the end, within what one message
// holds), and the file's whole size.
func (s *Sandbox) ReadFileAt(ctx context.Context, path string, offset, length int64) ([]byte, int64, error) {
	b, r, err := s.readFile(ctx, api.ReadFileParams{SandboxID: s.id, Path: path, Offset: offset, Length: length})
	return b, r.FileSize, err
}

// ReadFileTo writes the content of the file at path to w, read in
// requests of StreamChunk bytes, so that a file of any size goes with
// memory flat on both sides. It returns the bytes written.
func (s *Sandbox) ReadFileTo(ctx context.Context, path string, w io.Writer) (int64, error) {
	var off int64
	for {
		b, _, err := s.ReadFileAt(ctx, path, off, StreamChunk)
		if err != nil {
			return off, err
		}
		if _, err := w.Write(b); err != nil {
			return off, fmt.Errorf("airlock read_file %s: %w", path, err)
		}
		off += int64(len(b))
		if len(b) < StreamChunk {
			return off, nil
		}
	}
}

func (s *Sandbox) readFile(ctx context.Context, params api.ReadFileParams) ([]byte, api.ReadFileResult, error) {
	path := params.Path
	var r api.ReadFileResult
	raw, err := json.Marshal(params)
	if err != nil {
		return nil, r, fmt.Errorf("airlock %s: encoding params: %w", api.MethodReadFile, err)
	}
	// A large file's content comes cut out of the response line, as its
	// base64 text.
	cut, line, err := s.c.roundTrip(ctx, api.MethodReadFile, appendParams(requestHead(nil, api.MethodReadFile, len(raw)), raw), nil, &r, []string{"content"})
	if err != nil {
		return nil, r, err
	}
	var b []byte
	if cut != nil {
		b, err = decodeCut("file content", cut[0])
		// Nothing else refers to the line: keep its memory for the next.
		jsonblob.Recycle(line)
	} else {
		b, err = decodeBase64("file content", r.Content)
	}
	r.Content = ""
	if err != nil {
		return nil, r, fmt.Errorf("airlock read_file %s: %w", path, err)
	}
	if b == nil {
		b = []byte{}
	}
	return b, r, nil
}

// Symlink makes path a symbolic link to target (stored as given, never
// followed), replacing a file or link at path.
func (s *Sandbox) Symlink(ctx context.Context, target, path string) error {
	return s.c.call(ctx, api.MethodSymlink, api.SymlinkParams{SandboxID: s.id, Path: path, Target: target}, nil)
}

// SetAttr sets the permission bits of path to mode (when mode is not nil)
// and its modification time to mtime (when not zero), without following
// a final symlink.
func (s *Sandbox) SetAttr(ctx context.Context, path string, mode *fs.FileMode, mtime time.Time) error {
	p := api.SetAttrParams{SandboxID: s.id, Path: path}
	if mode != nil {
		m := unixMode(*mode)
		p.Mode = &m
	}
	if !mtime.IsZero() {
		p.ModTime = &mtime
	}
	return s.c.call(ctx, api.MethodSetAttr, p, nil)
}

// ListFiles lists the directory at path. fs.FileMode(info.Mode) gives each
// entry's mode as io/fs encodes it.
func (s *Sandbox) ListFiles(ctx context.Context, path string) ([]api.FileInfo, error) {
	var r api.ListFilesResult
	if err := s.c.call(ctx, api.MethodListFiles, api.PathParams{SandboxID: s.id, Path: path}, &r); err != nil {
		return nil, err
	}
	return r.Files, nil
}

// Stat describes the file at path.
func (s *Sandbox) Stat(ctx context.Context, path string) (api.FileInfo, error) {
	var r api.FileInfo
	err := s.c.call(ctx, api.MethodStat, api.PathParams{SandboxID: s.id, Path: path}, &r)
	return r, err
}

// Mkdir creates the directory path with the permission bits of mode (0
// means 0755), and with parents its missing parents too (an existing
// directory is then no error).
func (s *Sandbox) Mkdir(ctx context.Context, path string, mode fs.FileMode, parents bool) error {
	return s.c.call(ctx, api.MethodMkdir, api.MkdirParams{
		SandboxID: s.id, Path: path, Mode: unixMode(mode), Parents: parents,
	}, nil)
}

// Remove removes the file or empty directory at path, or with recursive
// the whole tree.
func (s *Sandbox) Remove(ctx context.Context, path string, recursive bool) error {
	return s.c.call(ctx, api.MethodRemove, api.RemoveParams{SandboxID: s.id, Path: path, Recursive: recursive}, nil)
}

// Close stops the sandbox and removes everything it held. Later requests
// for it fail with ErrNotRunning or ErrNotFound.
func (s *Sandbox) Close(ctx context.Context) error {
	return s.c.call(ctx, api.MethodClose, api.SandboxParams{SandboxID: s.id}, nil)
}

// Hosts returns the allowed and denied host patterns of the sandbox's
// network policy now in force. A sandbox created without a network has
// none: the error matches ErrUnsupported.
func (s *Sandbox) Hosts(ctx context.Context) (allowed, denied []string, err error) {
	var r api.PolicyResult
	if err := s.c.call(ctx, api.MethodPolicyGet, api.SandboxParams{SandboxID: s.id}, &r); err != nil {
		return nil, nil, err
	}
	return r.AllowedHosts, r.DeniedHosts, nil
}

// AllowHost adds a pattern ("api.example.com", "*.example.com" or "*",
// for ports 80 and 443; with ":PORT", as in "api.example.com:8443", for
// that port alone) to the allowed hosts of the running sandbox, and
// removes it from the denied hosts if it is there exactly; a broader
// denied pattern still wins. An
// invalid pattern is an error matching ErrInvalidParams; a sandbox created
// without a network, ErrUnsupported.
func (s *Sandbox) AllowHost(ctx context.Context, pattern string) error {
	return s.c.call(ctx, api.MethodPolicyAllow, api.PolicyHostParams{SandboxID: s.id, Host: pattern}, nil)
}

// DenyHost adds a pattern to the denied hosts, which win over every allowed
// pattern and egress rule, and removes it from the allowed hosts if it is
// there exactly. Errors as for AllowHost.
func (s *Sandbox) DenyHost(ctx context.Context, pattern string) error {
	return s.c.call(ctx, api.MethodPolicyDeny, api.PolicyHostParams{SandboxID: s.id, Host: pattern}, nil)
}

// RemoveHost removes a pattern from the allowed and denied hosts. A
// pattern in neither is an error matching ErrNotFound; others as for
// AllowHost.
func (s *Sandbox) RemoveHost(ctx context.Context, pattern string) error {
	return s.c.call(ctx, api.MethodPolicyRemove, api.PolicyHostParams{SandboxID: s.id, Host: pattern}, nil)
}

// PortForward publishes TCP port m.SandboxPort of the running sandbox on
// the host, at m.HostIP (default 127.0.0.1) and m.HostPort (0: a free
// port), as docker's -p does, and returns the address bound. A server
// in the sandbox must listen on 0.0.0.0 (not 127.0.0.1 alone) to be
// reached. No egress opens. A sandbox created without a network is an
// error matching ErrUnsupported; a mapping that is not valid, or a host
// port in use, ErrInvalidParams.
func (s *Sandbox) PortForward(ctx context.Context, m api.PortMapping) (api.PortForward, error) {
	var r api.PortForward
	err := s.c.call(ctx, api.MethodPortForward, api.PortForwardParams{
		SandboxID: s.id, SandboxPort: m.SandboxPort, HostPort: m.HostPort, HostIP: m.HostIP, Protocol: m.Protocol,
	}, &r)
	return r, err
}

// ClosePortForward stops the sandbox's ports published at hostPort on
// hostIP (empty: on any host address), and returns what it stopped. A
// port not published is an error matching ErrNotFound.
func (s *Sandbox) ClosePortForward(ctx context.Context, hostIP string, hostPort uint16) ([]api.PortForward, error) {
	var r api.PortForwardCloseResult
	err := s.c.call(ctx, api.MethodPortForwardClose, api.PortForwardCloseParams{SandboxID: s.id, HostIP: hostIP, HostPort: hostPort}, &r)
	return r.Closed, err
}

// unixMode converts the permission and special bits of an fs.FileMode to
// their Unix encoding.
func unixMode(m fs.FileMode) uint32 {
	u := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		u |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		u |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		u |= 0o1000
	}
	return u
}

// Pause stops every process of the sandbox where it is, its agent
// included, until Resume. Meanwhile execs and file operations fail
// with an error matching ErrPaused; policy, ports, Usage and Close are
// served.
func (s *Sandbox) Pause(ctx context.Context) error {
	return s.c.call(ctx, api.MethodPause, api.SandboxParams{SandboxID: s.id}, nil)
}

// Resume lets a paused sandbox's processes run on.
func (s *Sandbox) Resume(ctx context.Context) error {
	return s.c.call(ctx, api.MethodResume, api.SandboxParams{SandboxID: s.id}, nil)
}

// Processes lists the processes of the sandbox's commands by pid, as ps
// inside it would (docker top); more counts those past the list's bound.
func (s *Sandbox) Processes(ctx context.Context) (procs []api.ProcessInfo, more int, err error) {
	var r api.ProcessesResult
	if err := s.c.call(ctx, api.MethodProcesses, api.SandboxParams{SandboxID: s.id}, &r); err != nil {
		return nil, 0, err
	}
	return r.Processes, r.More, nil
}

// Usage returns what the running sandbox uses now: CPU time so far,
// memory, processes, limit events and network bytes. Without cgroups the
// error matches ErrUnsupported.
func (s *Sandbox) Usage(ctx context.Context) (*api.Usage, error) {
	var u api.Usage
	if err := s.c.call(ctx, api.MethodStats, api.SandboxParams{SandboxID: s.id}, &u); err != nil {
		return nil, err
	}
	return &u, nil
}
