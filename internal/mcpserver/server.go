// Package mcpserver serves airlock sandboxes to a model as Model Context
// Protocol tools: create a sandbox, run commands in it, move files in and
// out, let it reach a host, and close it. Secrets and the hosts they
// belong to come from the server's own configuration, never from a tool
// call, so a model can use a credential without ever reading it; every
// output a model gets is bounded, and says when it was cut.
package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/policy"
)

// Options configure a server.
type Options struct {
	// Base is every sandbox's configuration before a tool call's own
	// (image, limits, allowed hosts). Its Network, when set, holds the
	// secrets sandboxes may use and the hosts always allowed.
	Base airlock.Config
	// MaxOutputBytes bounds each of stdout and stderr an exec returns.
	// Default DefaultMaxOutput.
	MaxOutputBytes int64
	// MaxReadBytes bounds what read_file returns. Default DefaultMaxRead.
	MaxReadBytes int64
	// MaxSandboxes bounds the sandboxes open at once. Default
	// DefaultMaxSandboxes.
	MaxSandboxes int
	// Version is reported to the client.
	Version string
	Logger  *slog.Logger
	// Create starts a sandbox; default airlock.Create.
	Create func(ctx context.Context, cfg airlock.Config) (*airlock.Sandbox, error)
}

// Defaults of Options.
const (
	DefaultMaxOutput    = 64 << 10
	DefaultMaxRead      = 1 << 20
	DefaultMaxSandboxes = 8
	// maxExecTimeout bounds an exec's timeout_seconds.
	maxExecTimeout = time.Hour
	// defaultExecTimeout is an exec's timeout when the call gives none.
	defaultExecTimeout = 5 * time.Minute
)

// Server is one client's MCP session.
type Server struct {
	o   Options
	mcp *mcp.Server

	mu  sync.Mutex
	sbs map[string]*airlock.Sandbox
}

// New makes a server with airlock's tools.
func New(o Options) *Server {
	if o.MaxOutputBytes <= 0 {
		o.MaxOutputBytes = DefaultMaxOutput
	}
	if o.MaxReadBytes <= 0 {
		o.MaxReadBytes = DefaultMaxRead
	}
	if o.MaxSandboxes <= 0 {
		o.MaxSandboxes = DefaultMaxSandboxes
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Create == nil {
		o.Create = airlock.Create
	}
	s := &Server{o: o, sbs: map[string]*airlock.Sandbox{}}
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: "airlock", Title: "airlock sandboxes", Version: o.Version}, &mcp.ServerOptions{
		Instructions: "Run code in isolated Linux sandboxes. Create one with sandbox_create, run shell commands with exec, " +
			"move files with write_file, read_file and list_files, and close it with sandbox_close when done. " +
			"A sandbox has no network unless hosts are allowed; API keys configured on the server are placed into " +
			"requests to their own hosts, and commands only ever see placeholders.",
	})
	s.addTools()
	return s
}

// Run serves the client on t until it goes away; every sandbox it made
// is then closed.
func (s *Server) Run(ctx context.Context, t mcp.Transport) error {
	defer s.closeAll()
	err := s.mcp.Run(ctx, t)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

func (s *Server) closeAll() {
	s.mu.Lock()
	sbs := slices.Collect(maps.Values(s.sbs))
	clear(s.sbs)
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, sb := range sbs {
		wg.Go(func() {
			if err := sb.Close(); err != nil {
				s.o.Logger.Warn("close sandbox", "sandbox", sb.ID(), "err", err)
			}
		})
	}
	wg.Wait()
}

// sandbox finds a sandbox of this session.
func (s *Server) sandbox(id string) (*airlock.Sandbox, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb, ok := s.sbs[id]
	if !ok {
		ids := slices.Sorted(maps.Keys(s.sbs))
		if len(ids) == 0 {
			return nil, fmt.Errorf("no sandbox %q: there is none open; create one with sandbox_create", id)
		}
		return nil, fmt.Errorf("no sandbox %q: the open ones are %s", id, strings.Join(ids, ", "))
	}
	return sb, nil
}

// Tool inputs and outputs. The jsonschema tags are the descriptions a
// model reads.

type createIn struct {
	Image          string   `json:"image,omitempty" jsonschema:"root file system: host (default), minimal, standard (python, node, git, gcc), full, or an OCI image reference"`
	MemoryMB       int64    `json:"memory_mb,omitempty" jsonschema:"memory limit in MiB (default 1024)"`
	TimeoutSeconds int64    `json:"timeout_seconds,omitempty" jsonschema:"the sandbox is closed after this many seconds (default: when the session ends)"`
	AllowedHosts   []string `json:"allowed_hosts,omitempty" jsonschema:"host names the sandbox may reach over HTTP(S), such as pypi.org or *.github.com; none by default"`
}

type createOut struct {
	SandboxID string   `json:"sandbox_id"`
	Image     string   `json:"image"`
	Env       []string `json:"env,omitempty" jsonschema:"variables that hold placeholders for configured secrets"`
	Notes     []string `json:"notes,omitempty"`
}

type execIn struct {
	SandboxID      string `json:"sandbox_id"`
	Command        string `json:"command" jsonschema:"a shell command line, run with /bin/sh -c"`
	WorkingDir     string `json:"working_dir,omitempty" jsonschema:"directory to run in (default /workspace)"`
	TimeoutSeconds int64  `json:"timeout_seconds,omitempty" jsonschema:"kill the command after this many seconds (default 300, at most 3600; in the background: none)"`
	Background     bool   `json:"background,omitempty" jsonschema:"start the command and return at once with its pid, leaving it running (a server, a watcher) until it exits or the sandbox closes; its output is discarded, so redirect it to a file to read later"`
}

type execOut struct {
	ExitCode        int    `json:"exit_code"`
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	StdoutTruncated bool   `json:"stdout_truncated,omitempty"`
	StderrTruncated bool   `json:"stderr_truncated,omitempty"`
	KilledBy        string `json:"killed_by,omitempty" jsonschema:"timeout, oom or signal when the command did not exit by itself"`
	DurationMs      int64  `json:"duration_ms"`
	Pid             int    `json:"pid,omitempty" jsonschema:"with background: the command's process id in the sandbox"`
}

type writeIn struct {
	SandboxID string `json:"sandbox_id"`
	Path      string `json:"path" jsonschema:"absolute path in the sandbox; parent directories are made"`
	Content   string `json:"content" jsonschema:"the file's text"`
}

type writeOut struct {
	Bytes int `json:"bytes"`
}

type readIn struct {
	SandboxID string `json:"sandbox_id"`
	Path      string `json:"path" jsonschema:"absolute path in the sandbox"`
	Offset    int64  `json:"offset,omitempty" jsonschema:"byte to start at (default 0)"`
}

type readOut struct {
	Content   string `json:"content"`
	Size      int64  `json:"size" jsonschema:"the whole file's size"`
	Truncated bool   `json:"truncated,omitempty" jsonschema:"true when the file goes on past content: read again with a larger offset"`
	Binary    bool   `json:"binary,omitempty" jsonschema:"true when the file is not UTF-8 text; content then holds it with invalid bytes replaced"`
}

type listIn struct {
	SandboxID string `json:"sandbox_id"`
	Path      string `json:"path" jsonschema:"absolute path of a directory in the sandbox"`
}

type entry struct {
	Name string `json:"name"`
	Type string `json:"type" jsonschema:"file, dir, symlink or other"`
	Size int64  `json:"size"`
}

type listOut struct {
	Entries   []entry `json:"entries"`
	Truncated bool    `json:"truncated,omitempty"`
}

type procOut struct {
	Processes []proc `json:"processes"`
	// More counts the processes past the list's bound.
	More int `json:"more,omitempty"`
}

type proc struct {
	PID     int    `json:"pid"`
	PPID    int    `json:"ppid"`
	State   string `json:"state" jsonschema:"R running, S sleeping, D waiting on a device, Z zombie, T stopped"`
	CPUMs   int64  `json:"cpu_ms"`
	RSSKiB  int64  `json:"rss_kib"`
	Command string `json:"command"`
}

type idIn struct {
	SandboxID string `json:"sandbox_id"`
}

type hostIn struct {
	SandboxID string `json:"sandbox_id"`
	Host      string `json:"host" jsonschema:"a host name (api.example.com) or a pattern (*.example.com)"`
}

type okOut struct {
	OK bool `json:"ok"`
}

// maxListEntries bounds what list_files returns.
const maxListEntries = 1000

func (s *Server) addTools() {
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "sandbox_create", Description: "Create an isolated Linux sandbox and return its sandbox_id. " +
		"Close it with sandbox_close when done; all sandboxes close when the session ends."}, s.create)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "exec", Description: "Run a shell command in a sandbox and return its exit code and output. " +
		"Output is cut at a bound, and stdout_truncated or stderr_truncated say so: redirect large output to a file and read parts of it. " +
		"With background, the command is started and left running (a server to call with later commands), and its pid returned."}, s.exec)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "write_file", Description: "Write a text file in a sandbox, replacing it if it exists."}, s.write)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "read_file", Description: "Read a file from a sandbox. Large files come back in parts: truncated says there is more, read again from offset + the bytes read."}, s.read)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "list_files", Description: "List a directory of a sandbox."}, s.list)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "processes", Description: "List the processes running in a sandbox (as ps would, in any image): " +
		"pid, parent, state, CPU time, memory and command line. Use it to see what a background command is doing, or what is left running."}, s.processes)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "sandbox_close", Description: "Close a sandbox: its processes end and its files are gone."}, s.close)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "policy_allow", Description: "Let a sandbox reach one more host over HTTP(S). The sandbox must have been created with a network (allowed_hosts, or the server's configuration)."}, s.allow)
}

func (s *Server) create(ctx context.Context, _ *mcp.CallToolRequest, in createIn) (*mcp.CallToolResult, createOut, error) {
	s.mu.Lock()
	n := len(s.sbs)
	s.mu.Unlock()
	if n >= s.o.MaxSandboxes {
		return nil, createOut{}, fmt.Errorf("%d sandboxes are open, the most this server allows: close one with sandbox_close first", n)
	}
	cfg := s.o.Base
	if in.Image != "" {
		cfg.Image = in.Image
	}
	if in.MemoryMB != 0 {
		cfg.Resources.MemoryMB = in.MemoryMB
	}
	if in.TimeoutSeconds != 0 {
		cfg.Resources.TimeoutSeconds = in.TimeoutSeconds
	}
	cfg.MaxOutputBytes = s.o.MaxOutputBytes
	if len(in.AllowedHosts) > 0 {
		var nw policy.Config
		if cfg.Network != nil {
			nw = *cfg.Network
		}
		nw.AllowedHosts = append(slices.Clone(nw.AllowedHosts), in.AllowedHosts...)
		cfg.Network = &nw
	}
	if cfg.Logger == nil {
		cfg.Logger = s.o.Logger
	}
	sb, err := s.o.Create(ctx, cfg)
	if err != nil {
		return nil, createOut{}, fmt.Errorf("create sandbox: %w", err)
	}
	s.mu.Lock()
	s.sbs[sb.ID()] = sb
	s.mu.Unlock()
	out := createOut{SandboxID: sb.ID(), Image: cfg.Image, Notes: sb.Notes()}
	if out.Image == "" {
		out.Image = "host"
	}
	if cfg.Network != nil {
		for name := range cfg.Network.Secrets {
			out.Env = append(out.Env, name)
		}
		slices.Sort(out.Env)
	}
	return nil, out, nil
}

func (s *Server) exec(ctx context.Context, _ *mcp.CallToolRequest, in execIn) (*mcp.CallToolResult, execOut, error) {
	sb, err := s.sandbox(in.SandboxID)
	if err != nil {
		return nil, execOut{}, err
	}
	if strings.TrimSpace(in.Command) == "" {
		return nil, execOut{}, errors.New("command is empty: give a shell command line, such as \"ls -la\"")
	}
	timeout := defaultExecTimeout
	if in.Background {
		timeout = 0
	}
	if in.TimeoutSeconds < 0 || time.Duration(in.TimeoutSeconds)*time.Second > maxExecTimeout {
		return nil, execOut{}, fmt.Errorf("timeout_seconds %d is out of range: give 1 to %d", in.TimeoutSeconds, int(maxExecTimeout/time.Second))
	}
	if in.TimeoutSeconds > 0 {
		timeout = time.Duration(in.TimeoutSeconds) * time.Second
	}
	cmd := airlock.Command{Shell: in.Command, Dir: in.WorkingDir, Timeout: timeout}
	if in.Background {
		// Its own context: the command outlives this call.
		cmd.DiscardOutput = true
		p, err := sb.Start(context.WithoutCancel(ctx), cmd)
		if err != nil {
			return nil, execOut{}, fmt.Errorf("exec in the background: %w", err)
		}
		return nil, execOut{Pid: p.Pid()}, nil
	}
	res, err := sb.Run(ctx, cmd)
	if err != nil {
		return nil, execOut{}, fmt.Errorf("exec: %w", err)
	}
	return nil, execOut{
		ExitCode:        res.ExitCode,
		Stdout:          text(res.Stdout),
		Stderr:          text(res.Stderr),
		StdoutTruncated: res.StdoutTruncated,
		StderrTruncated: res.StderrTruncated,
		KilledBy:        string(res.KilledBy),
		DurationMs:      res.Duration.Milliseconds(),
	}, nil
}

// text is b as a string a model can read: invalid UTF-8 replaced.
func text(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

func (s *Server) write(ctx context.Context, _ *mcp.CallToolRequest, in writeIn) (*mcp.CallToolResult, writeOut, error) {
	sb, err := s.sandbox(in.SandboxID)
	if err != nil {
		return nil, writeOut{}, err
	}
	if err := sb.WriteFile(ctx, in.Path, []byte(in.Content), 0o644); err != nil {
		return nil, writeOut{}, fmt.Errorf("write %s: %w", in.Path, err)
	}
	return nil, writeOut{Bytes: len(in.Content)}, nil
}

func (s *Server) read(ctx context.Context, _ *mcp.CallToolRequest, in readIn) (*mcp.CallToolResult, readOut, error) {
	sb, err := s.sandbox(in.SandboxID)
	if err != nil {
		return nil, readOut{}, err
	}
	if in.Offset < 0 {
		return nil, readOut{}, errors.New("offset must not be negative")
	}
	var buf strings.Builder
	fi, n, err := sb.ReadFileAt(ctx, in.Path, &buf, in.Offset, s.o.MaxReadBytes)
	if err != nil {
		return nil, readOut{}, fmt.Errorf("read %s: %w", in.Path, err)
	}
	data := buf.String()
	out := readOut{Size: fi.Size, Truncated: in.Offset+n < fi.Size, Content: data, Binary: !utf8.ValidString(data)}
	if out.Binary {
		out.Content = strings.ToValidUTF8(data, "\uFFFD")
	}
	return nil, out, nil
}

func (s *Server) list(ctx context.Context, _ *mcp.CallToolRequest, in listIn) (*mcp.CallToolResult, listOut, error) {
	sb, err := s.sandbox(in.SandboxID)
	if err != nil {
		return nil, listOut{}, err
	}
	files, err := sb.ListFiles(ctx, in.Path)
	if err != nil {
		return nil, listOut{}, fmt.Errorf("list %s: %w", in.Path, err)
	}
	out := listOut{Entries: []entry{}}
	for i, f := range files {
		if i == maxListEntries {
			out.Truncated = true
			break
		}
		kind := "other"
		switch {
		case f.IsDir:
			kind = "dir"
		case f.Mode.IsRegular():
			kind = "file"
		case f.Mode&fs.ModeSymlink != 0:
			kind = "symlink"
		}
		out.Entries = append(out.Entries, entry{Name: f.Name, Type: kind, Size: f.Size})
	}
	return nil, out, nil
}

func (s *Server) processes(ctx context.Context, _ *mcp.CallToolRequest, in idIn) (*mcp.CallToolResult, procOut, error) {
	sb, err := s.sandbox(in.SandboxID)
	if err != nil {
		return nil, procOut{}, err
	}
	list, more, err := sb.Processes(ctx)
	if err != nil {
		return nil, procOut{}, err
	}
	out := procOut{Processes: []proc{}, More: more}
	for _, p := range list {
		out.Processes = append(out.Processes, proc{
			PID: p.PID, PPID: p.PPID, State: p.State, CPUMs: p.CPUNanos / 1e6, RSSKiB: p.RSSBytes >> 10,
			Command: strings.Join(p.Command, " "),
		})
	}
	return nil, out, nil
}

func (s *Server) close(_ context.Context, _ *mcp.CallToolRequest, in idIn) (*mcp.CallToolResult, okOut, error) {
	sb, err := s.sandbox(in.SandboxID)
	if err != nil {
		return nil, okOut{}, err
	}
	s.mu.Lock()
	delete(s.sbs, in.SandboxID)
	s.mu.Unlock()
	if err := sb.Close(); err != nil {
		return nil, okOut{}, fmt.Errorf("close: %w", err)
	}
	return nil, okOut{OK: true}, nil
}

func (s *Server) allow(_ context.Context, _ *mcp.CallToolRequest, in hostIn) (*mcp.CallToolResult, okOut, error) {
	sb, err := s.sandbox(in.SandboxID)
	if err != nil {
		return nil, okOut{}, err
	}
	if err := sb.AllowHost(in.Host); err != nil {
		return nil, okOut{}, fmt.Errorf("allow %s: %w", in.Host, err)
	}
	return nil, okOut{OK: true}, nil
}
