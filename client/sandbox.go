package client

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
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
	// The base64 of data goes straight into the request line, without
	// encoding/json going over it.
	// The line is written into memory kept from an earlier large line if
	// there is some, and kept in turn once sent.
	params := api.WriteFileParams{SandboxID: s.id, Path: path, Mode: unixMode(mode)}
	n := base64.StdEncoding.EncodedLen(len(data)) + 2*len(path) + len(s.id) + 128
	line := requestHead(jsonblob.Buffer(n+128), api.MethodWriteFile, n)
	line, err := jsonblob.AppendMarshal(line, params, "content", data)
	if err != nil {
		return fmt.Errorf("airlock %s: encoding params: %w", api.MethodWriteFile, err)
	}
	_, _, err = s.c.roundTrip(ctx, api.MethodWriteFile, line, nil, nil, nil)
	jsonblob.Recycle(line)
	return err
}

// ReadFile returns the content of the file at path. A missing file is an
// error matching fs.ErrNotExist. A file larger than one message holds
// (Info's MaxMessageBytes, less a quarter for base64) is refused with an
// *Error whose FileErrorKind is FileTooLarge: read it in parts with Exec.
func (s *Sandbox) ReadFile(ctx context.Context, path string) ([]byte, error) {
	raw, err := json.Marshal(api.ReadFileParams{SandboxID: s.id, Path: path})
	if err != nil {
		return nil, fmt.Errorf("airlock %s: encoding params: %w", api.MethodReadFile, err)
	}
	// A large file's content comes cut out of the response line, as its
	// base64 text.
	var r api.ReadFileResult
	cut, line, err := s.c.roundTrip(ctx, api.MethodReadFile, appendParams(requestHead(nil, api.MethodReadFile, len(raw)), raw), nil, &r, []string{"content"})
	if err != nil {
		return nil, err
	}
	var b []byte
	if cut != nil {
		b, err = decodeCut("file content", cut[0])
		// Nothing else refers to the line: keep its memory for the next.
		jsonblob.Recycle(line)
	} else {
		b, err = decodeBase64("file content", r.Content)
	}
	if err != nil {
		return nil, fmt.Errorf("airlock read_file %s: %w", path, err)
	}
	if b == nil {
		b = []byte{}
	}
	return b, nil
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
