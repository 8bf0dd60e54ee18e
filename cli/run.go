package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/image/store"
	"github.com/airlock-sandbox/airlock/internal/image/variant"
	"github.com/airlock-sandbox/airlock/internal/state"
)

type runFlags struct {
	isolation   string
	kernel      string
	requireKVM  bool
	memory      string
	cpus        float64
	timeout     time.Duration
	pids        int64
	nofile      uint64
	disk        string
	maxFile     string
	maxOutput   string
	env         []string
	envFiles    []string
	name        string
	workdir     string
	user        string
	rootfs      string
	image       string
	hostname    string
	interactive bool
	tty         bool
	asJSON      bool
	allowPtrace bool
	quiet       bool
	detach      bool
	rm          bool
	pool        string
	// network is docker's --network: none or nothing.
	network string
	// entrypoint is --entrypoint, nil when not given.
	entrypoint *string
	publish    []string
	net        networkFlags
	files      mountFlags
}

func (a *app) newRunCmd() *cobra.Command {
	var f runFlags
	var entrypoint string
	cmd := &cobra.Command{
		Use:   "run [flags] -- COMMAND [ARG...]",
		Short: "Run a command in a fresh sandbox",
		Long: `Run a command in a fresh sandbox and remove the sandbox afterwards.

Output streams live, stdin is passed through when it is a pipe or file (or
with -i), and airlock exits with the command's exit code: 128+N when a
signal N killed it, 124 when it hit --timeout, 125 when airlock itself
failed, 126/127 when the command could not be run or was not found.

The sandbox has no network unless a network flag gives it one: then its
only way out is the host's gateway, which answers DNS and lets HTTP and
TLS through to the allowed hosts (--allow-host; ports 80 and 443 unless a
pattern names another), other traffic only by --egress rules, and puts
secrets (--secret) into requests to their hosts, over TLS, while commands
see placeholders. airlock policy changes the allowed hosts of a detached
sandbox while it runs.

-p publishes a TCP port of the sandbox on the host, as docker's -p does
(127.0.0.1 unless an address is given; an empty host port is a free
one): connections to it enter the sandbox through its network, whose
egress stays as the network flags make it (with none, nothing is
allowed out). A server must listen on 0.0.0.0 in the sandbox, not on
127.0.0.1 alone. airlock port lists a detached sandbox's published ports.

Every sandbox has a memory limit (--memory: 1g by default, or a quarter
of the host's memory when smaller; "unlimited" lifts it), which counts
kernel memory too, and a disk (--disk): its writable tree, /dev/shm
included. A disk of at most half of --memory is a tmpfs, held in that
memory; a larger one is an ext4 filesystem in a file under
$AIRLOCK_HOME/disks, which needs root. Either way a full disk fails
writes with "No space left on device", never with an out-of-memory kill.

--pool NAME takes a started sandbox from a pool (airlock pool create)
instead of starting one: the command runs at once, with the pool's
configuration, and the sandbox is removed afterwards; with --detach it
is left running, as run --detach leaves one.`,
		Example: `  airlock run -- python3 -c 'print(1)'
  airlock run --memory 256m --timeout 10s -- sh -c 'echo hi'
  airlock run -it -- bash
  echo data | airlock run -- wc -c
  airlock run --json -- ls /
  airlock run -v "$PWD":/src:ro --mount type=memory,target=/workspace -- make -C /src O=/workspace
  airlock run --detach --timeout 1h     # prints an id; then airlock exec ID -- CMD
  airlock run --pool warm -- python3 -c 'print(1)'   # a sandbox of pool warm (airlock pool create --name warm --size 2)
  airlock run -d -p 8080:8000 -- python3 -m http.server 8000   # http://127.0.0.1:8080 on the host
  airlock run --allow-host pypi.org --allow-host files.pythonhosted.org -- pip download requests
  airlock run --allow-host api.example.com --secret API_KEY@api.example.com -- ./client   # value from $API_KEY here`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("entrypoint") {
				f.entrypoint = &entrypoint
			}
			if f.pool != "" {
				return a.runFromPool(cmd.Context(), cmd, &f, args)
			}
			return a.runRun(cmd.Context(), &f, args)
		},
	}
	fl := cmd.Flags()
	fl.SetInterspersed(false)
	a.configFlags(cmd, &f)
	durationVar(fl, &f.timeout, "timeout", time.Duration(a.base.Resources.TimeoutSeconds)*time.Second, "kill the command and its processes after this long (30 or 30s, 5m; a bare number is seconds)")
	fl.StringVar(&entrypoint, "entrypoint", "", "run this program in place of the image's entrypoint, with the command's words as its arguments; \"\" runs the command alone (as docker, it also drops the image's default command)")
	fl.StringVar(&f.name, "name", "", "with --detach: a name for the sandbox, usable wherever its id is, unique while its record is kept")
	fl.StringVarP(&f.workdir, "workdir", "w", "", "working directory inside the sandbox (default: the image's, else /workspace)")
	fl.StringVarP(&f.user, "user", "u", "", "run as USER, UID, USER:GROUP or UID:GID of the sandbox (default: the image's user, else root)")
	fl.BoolVarP(&f.interactive, "interactive", "i", false, "keep stdin open even when it is a terminal")
	fl.BoolVarP(&f.tty, "tty", "t", false, "allocate a pseudo-terminal")
	fl.BoolVar(&f.asJSON, "json", false, "print one JSON result instead of streaming output")
	fl.BoolVarP(&f.quiet, "quiet", "q", false, "do not print warnings about limits that cannot be enforced")
	fl.BoolVarP(&f.detach, "detach", "d", false, "start the sandbox in the background, print its id and return; it runs until its command ends, airlock kill, or its timeout")
	fl.BoolVar(&f.rm, "rm", false, "remove the sandbox's record when it stops, as docker's --rm does: a sandbox run in the foreground keeps none anyway; with --detach its record, logs and state go once its command ends or it is stopped")
	fl.StringVar(&f.pool, "pool", "", "take a ready sandbox from this pool (airlock pool create) instead of starting one; it has the pool's configuration")
	return cmd
}

// configFlags registers the flags that configure a sandbox, shared by
// run and pool create. The flags with defaults default to the built-in
// configuration.
func (a *app) configFlags(cmd *cobra.Command, f *runFlags) {
	fl := cmd.Flags()
	base := a.base
	fl.StringVar(&f.isolation, "isolation", string(cmp.Or(base.Isolation, airlock.IsolationProcess)), "isolation level: process, gvisor or vm")
	fl.StringVar(&f.kernel, "kernel", base.Kernel, "with --isolation vm: the guest kernel to boot (an uncompressed vmlinux; default the one `airlock kernel build` made)")
	fl.BoolVar(&f.requireKVM, "require-kvm", base.RequireKVM, "with --isolation vm: refuse to start without hardware virtualisation instead of emulating the guest's CPU")
	fl.StringVarP(&f.memory, "memory", "m", "", "memory limit for all processes, kernel memory and a tmpfs disk included (e.g. 512m, 2g; plain numbers are MiB; default 1g, or a quarter of the host's memory when smaller; \"unlimited\" for none)")
	fl.Float64Var(&f.cpus, "cpus", 0, "CPU quota in cores (e.g. 0.5)")
	fl.Int64Var(&f.pids, "pids-limit", cmp.Or(base.PidsLimit, airlock.DefaultPidsLimit), fmt.Sprintf("maximum processes and threads, airlock's process spawner included (at least %d)", airlock.MinPidsLimit))
	fl.Uint64Var(&f.nofile, "nofile-limit", cmp.Or(base.NofileLimit, airlock.DefaultNofileLimit), "maximum open files per process")
	fl.StringVar(&f.disk, "disk", "", "size of the sandbox's writable tree (/, /tmp, /workspace, /dev/shm), with one file per 8k; up to half of --memory it is a tmpfs (memory), larger it is a file under $AIRLOCK_HOME (root only); full, writes fail with ENOSPC (default: half of --memory, at most 1g)")
	fl.StringVar(&f.maxFile, "max-file-size", "", "largest file a command may write (default: bounded by --disk)")
	fl.StringVar(&f.maxOutput, "max-output", "", "with --json: bytes of stdout and of stderr kept (default 16m)")
	fl.StringArrayVarP(&f.env, "env", "e", nil, "set an environment variable (KEY=VALUE, or KEY to copy it from here)")
	fl.StringArrayVar(&f.envFiles, "env-file", nil, "read environment variables from a file, a KEY=VALUE (or KEY) per line, # for comments, as docker reads it; -e wins; repeatable")
	fl.StringVar(&f.rootfs, "rootfs", "", "use a prepared root directory instead of the host's /usr, /bin, /lib")
	fl.StringVar(&f.image, "image", "", "run this image instead of the host's /usr, /bin, /lib: a variant (minimal, standard, full) or an OCI image (python:3.12-slim, REGISTRY/REPO@sha256:..., an OCI layout directory, a docker-save tarball); got into the image cache first when missing; without a command, the image's own runs")
	fl.StringVar(&f.hostname, "hostname", "", "hostname inside the sandbox (default: the sandbox id)")
	fl.BoolVar(&f.allowPtrace, "allow-ptrace", false, "let commands ptrace each other (debuggers, strace)")
	fl.StringArrayVarP(&f.publish, "publish", "p", nil, "publish a TCP port of the sandbox on the host, as docker does: [[IP:][HOST_PORT]:]SANDBOX_PORT[/tcp]; IP defaults to 127.0.0.1, an empty HOST_PORT is a free one (airlock port shows it); gives the sandbox a network that allows no egress unless a network flag allows some (repeatable)")
	fl.StringVar(&f.network, "network", "", "docker's --network: only none, which is the default; a sandbox gets a network from --allow-host, --egress, --network-config or -p, through airlock's gateway")
	f.net.register(cmd)
	f.files.register(cmd)
}

func (f *runFlags) config() (airlock.Config, error) {
	c := airlock.Config{
		Isolation:   airlock.Isolation(f.isolation),
		Kernel:      f.kernel,
		RequireKVM:  f.requireKVM,
		RootFS:      f.rootfs,
		Image:       f.image,
		Hostname:    f.hostname,
		PidsLimit:   f.pids,
		NofileLimit: f.nofile,
		AllowPtrace: f.allowPtrace,
		Resources:   airlock.Resources{CPUs: f.cpus},
		Env:         map[string]string{},
	}
	var err error
	if strings.EqualFold(strings.TrimSpace(f.memory), "unlimited") {
		c.Resources.MemoryMB = airlock.MemoryUnlimited
	} else if c.Resources.MemoryMB, err = parseMiB(f.memory, "--memory"); err != nil {
		return c, err
	}
	if c.DiskMB, err = parseMiB(f.disk, "--disk"); err != nil {
		return c, err
	}
	if c.MaxFileSizeMB, err = parseMiB(f.maxFile, "--max-file-size"); err != nil {
		return c, err
	}
	if f.maxOutput != "" {
		n, err := parseBytes(f.maxOutput)
		if err != nil {
			return c, fmt.Errorf("--max-output: %w", err)
		}
		c.MaxOutputBytes = n
	}
	if f.timeout > 0 {
		// As asked: a sandbox that runs a command outlives it by
		// commandMargin, added where it is created (withCommandMargin).
		c.Resources.TimeoutSeconds = int64((f.timeout + time.Second - 1) / time.Second)
	}
	fromFiles, err := readEnvFiles(f.envFiles)
	if err != nil {
		return c, err
	}
	for _, kv := range append(fromFiles, f.env...) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			v, ok = os.LookupEnv(k)
			if !ok {
				continue
			}
		}
		c.Env[k] = v
	}
	switch {
	case f.network != "" && f.network != "none":
		return c, fmt.Errorf("--network %s: airlock has no docker networks: a sandbox has none unless --allow-host, --egress or --network-config give it one, through airlock's gateway, which enforces them (and -p publishes a port); --network none is the default", f.network)
	case f.network == "none" && (f.net.set() || len(f.publish) > 0):
		return c, errors.New("--network none, and a flag that gives the sandbox a network (--allow-host, --egress, --network-config, -p): drop one")
	}
	if c.Network, err = f.net.config(c.Env); err != nil {
		return c, err
	}
	if c.Ports, err = parsePublishes(f.publish); err != nil {
		return c, err
	}
	if err := f.files.apply(&c); err != nil {
		return c, err
	}
	return c, nil
}

// commandMargin is how long a sandbox that runs one command with a
// timeout outlives that timeout, so that the command's own timeout is
// what fires and is reported.
const commandMargin = 30 * time.Second

// withCommandMargin is cfg for creating a sandbox that runs one command
// with timeout (0: none). cfg itself, as the user asked for it, is what
// is recorded.
func withCommandMargin(cfg airlock.Config, timeout time.Duration) airlock.Config {
	if timeout > 0 {
		cfg.Resources.TimeoutSeconds = int64((timeout + commandMargin) / time.Second)
	}
	return cfg
}

// parseBytes reads sizes such as 512, 512k, 64m, 2g (binary units).
func parseBytes(s string) (int64, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	s = strings.TrimSuffix(strings.TrimSuffix(s, "ib"), "b")
	mult := int64(1)
	if s != "" {
		switch s[len(s)-1] {
		case 'k':
			mult = 1 << 10
		case 'm':
			mult = 1 << 20
		case 'g':
			mult = 1 << 30
		case 't':
			mult = 1 << 40
		}
		if mult > 1 {
			s = s[:len(s)-1]
		}
	}
	n, err := strconv.ParseFloat(s, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a size (examples: 512k, 256m, 2g)", s)
	}
	return int64(n * float64(mult)), nil
}

// parseMiB reads a size in MiB; bare numbers are MiB.
func parseMiB(s, flag string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n, nil
	}
	n, err := parseBytes(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", flag, err)
	}
	if n > 0 && n < 1<<20 {
		return 0, fmt.Errorf("%s: %s is less than 1 MiB", flag, s)
	}
	return n >> 20, nil
}

func (a *app) runRun(ctx context.Context, f *runFlags, args []string) error {
	if err := checkTTY(f.tty, f.interactive); err != nil {
		return err
	}
	if f.name != "" {
		if !f.detach {
			return fmt.Errorf("--name needs --detach: a sandbox run in the foreground leaves no record to name")
		}
		if err := state.ValidateName(f.name); err != nil {
			return fmt.Errorf("--name: %w", err)
		}
		if store, id, err := resolveSandbox(f.name); err == nil {
			if rec, err := store.Get(id); err == nil && rec.Name == f.name {
				return fmt.Errorf("the name %q is taken by sandbox %s: remove it (`%s rm %s`) or choose another name", f.name, id, a.name, f.name)
			}
		}
	}
	asked, err := f.config()
	if err != nil {
		return err
	}
	cfg, err := a.withBase(asked)
	if err != nil {
		return err
	}
	if len(args) == 0 && f.entrypoint != nil && *f.entrypoint == "" {
		return errors.New(`--entrypoint "" and no command: nothing to run; give the command after --`)
	}
	if len(args) == 0 && !f.detach && cfg.Image == "" && f.entrypoint == nil {
		return fmt.Errorf("give the command to run after --, --image for an image's own command, or --detach for a sandbox that waits for %s exec", a.name)
	}
	if cfg.Image != "" && !f.quiet {
		view := newProgressView(os.Stderr, f.asJSON)
		cfg.OnImageProgress = both(cfg.OnImageProgress, func(p airlock.ImageProgress) { view.Report(store.Progress(p)) })
		defer view.Close()
	}
	if f.detach {
		if f.interactive {
			return errors.New("--detach and --interactive cannot be combined: use airlock attach to reach a detached command's input")
		}
		// Got here, with progress, so that the supervisor finds it.
		if cfg.Image != "" {
			if _, err := airlock.PrepareImage(ctx, cfg); err != nil {
				return err
			}
		}
		// The supervisor lays what was asked over the built-in
		// configuration again: the Go values of that cannot be sent.
		return a.runDetached(ctx, f, asked, args)
	}
	if f.tty && f.asJSON {
		return errors.New("--tty and --json cannot be combined: a terminal session has no single result")
	}
	// Clean up after earlier supervisors that were killed, off the
	// critical path.
	go airlock.Sweep()
	sb, err := airlock.Create(ctx, withCommandMargin(cfg, f.timeout))
	if err != nil {
		if f.asJSON {
			return writeJSONError(err)
		}
		return err
	}
	defer sb.Close()
	if !f.quiet && !f.asJSON {
		for _, n := range sb.Notes() {
			a.warnf("warning: %s", termText(n))
		}
		for _, p := range sb.Ports() {
			a.warnf("sandbox port %d/%s published at %s", p.SandboxPort, p.Protocol, net.JoinHostPort(p.HostIP, strconv.Itoa(int(p.HostPort))))
		}
	}
	if args = imageCommand(sb.Image(), f.entrypoint, args); len(args) == 0 {
		return fmt.Errorf("image %s names no command to run: give one after --", cfg.Image)
	}
	command := airlock.Command{Argv: args, Dir: f.workdir, User: f.user, Timeout: f.timeout}
	stdinIsTTY := term.IsTerminal(int(os.Stdin.Fd()))
	if f.interactive || !stdinIsTTY {
		command.Stdin = os.Stdin
	}
	if f.asJSON {
		return a.runJSON(ctx, sb, command)
	}
	command.Stdout, command.Stderr = os.Stdout, os.Stderr
	if f.tty {
		return a.runTTY(ctx, sb, command, f.interactive && stdinIsTTY)
	}
	p, err := sb.Start(ctx, command)
	if err != nil {
		return a.startFailure(err)
	}
	stopSignals := a.forwardSignals(p)
	defer stopSignals()
	res, err := p.Wait()
	if err != nil {
		return err
	}
	return a.exitFor(res)
}

func (a *app) startFailure(err error) error {
	var se *airlock.StartError
	if errors.As(err, &se) {
		a.warnf("%s", termText(withImageHint(se)))
		return exitError{se.ExitCode()}
	}
	return err
}

// imageCommand is what run runs in a sandbox of img, as docker runs it:
// the words given after the image's entrypoint, or after --entrypoint's
// program in its place ("" for none); given no words, the image's
// entrypoint and default command, or --entrypoint's program alone.
func imageCommand(img airlock.ImageInfo, entrypoint *string, args []string) []string {
	switch {
	case entrypoint != nil && *entrypoint == "":
		return args
	case entrypoint != nil:
		return append([]string{*entrypoint}, args...)
	case len(args) == 0:
		return img.DefaultCommand()
	}
	return append(slices.Clone(img.Entrypoint), args...)
}

// withImageHint is the message of a command that failed to start, with,
// when the program was not found and its name looks like an image's (as
// docker's habit of `docker run IMAGE COMMAND` would give), how to name
// an image.
func withImageHint(se *airlock.StartError) string {
	msg := se.Err.Error()
	if !se.NotFound || len(se.Argv) == 0 || !looksLikeImage(se.Argv[0]) {
		return msg
	}
	hint := "airlock run --image " + shellJoin(se.Argv[:1])
	if len(se.Argv) > 1 {
		hint += " -- " + shellJoin(se.Argv[1:])
	}
	return fmt.Sprintf("%s; if %s is an image, name it with --image: %s", msg, se.Argv[0], hint)
}

// looksLikeImage reports whether name, given as a program, is rather an
// image: a variant, "host", a reference with a tag or digest
// (python:3.12-slim, REGISTRY/REPO@sha256:...), or one of the images
// docker users most often name bare (`docker run alpine ...`).
func looksLikeImage(name string) bool {
	if name == "host" || variant.IsVariant(name) || bareImage(name) {
		return true
	}
	if strings.HasPrefix(name, "/") || strings.HasPrefix(name, ".") || strings.ContainsAny(name, " \t\n'\"$") {
		return false
	}
	return strings.Contains(name, ":") || strings.Contains(name, "@sha256:")
}

// bareImage reports whether name is one of Docker Hub's most pulled
// official images, which docker users name without a tag.
func bareImage(name string) bool {
	switch name {
	case "alpine", "busybox", "ubuntu", "debian", "fedora", "centos", "rockylinux", "almalinux", "archlinux", "amazonlinux",
		"python", "node", "golang", "rust", "ruby", "php", "perl", "openjdk", "eclipse-temurin", "gcc", "bash",
		"nginx", "httpd", "redis", "postgres", "mysql", "mariadb", "mongo", "memcached", "rabbitmq", "hello-world":
		return true
	}
	return false
}

// shellJoin quotes argv for a POSIX shell where a word needs it.
func shellJoin(argv []string) string {
	words := make([]string, len(argv))
	for i, w := range argv {
		if w != "" && strings.Trim(w, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=@,+%") == "" {
			words[i] = w
			continue
		}
		words[i] = "'" + strings.ReplaceAll(w, "'", `'"'"'`) + "'"
	}
	return strings.Join(words, " ")
}

func (a *app) exitFor(res *airlock.ExecResult) error {
	switch {
	case res.KilledBy == airlock.KilledByTimeout:
		a.warnf("command timed out and was killed")
		return exitError{124}
	case res.KilledBy == airlock.KilledByOOM:
		a.warnf("command ran out of memory and was killed (raise --memory)")
	}
	for _, l := range res.LimitsHit {
		if l == "pids" {
			a.warnf("the pids limit refused new processes (raise --pids-limit)")
		}
	}
	if res.ExitCode != 0 {
		return exitError{res.ExitCode}
	}
	return nil
}

func (a *app) runTTY(ctx context.Context, sb *airlock.Sandbox, command airlock.Command, raw bool) error {
	command.TTY = true
	fd := int(os.Stdout.Fd())
	if w, h, err := term.GetSize(fd); err == nil {
		command.Cols, command.Rows = uint16(w), uint16(h)
	}
	command.Stderr = nil
	if raw {
		old, err := term.MakeRaw(int(os.Stdin.Fd()))
		if err != nil {
			return fmt.Errorf("put the terminal in raw mode: %w", err)
		}
		defer term.Restore(int(os.Stdin.Fd()), old)
	}
	p, err := sb.Start(ctx, command)
	if err != nil {
		return a.startFailure(err)
	}
	defer followResize(p, fd)()
	res, err := p.Wait()
	if err != nil {
		return err
	}
	return a.exitFor(res)
}

func (a *app) runJSON(ctx context.Context, sb *airlock.Sandbox, command airlock.Command) error {
	res, err := sb.Run(ctx, command)
	if err != nil {
		var se *airlock.StartError
		if errors.As(err, &se) {
			code := se.ExitCode()
			msg := withImageHint(se) + "\n"
			return writeResult(os.Stdout, jsonResult{SandboxID: sb.ID(), ExitCode: code, Notes: sb.Notes()}, nil, []byte(msg))
		}
		return writeJSONError(err)
	}
	out := jsonResult{
		SandboxID:       sb.ID(),
		ExitCode:        res.ExitCode,
		StdoutTruncated: res.StdoutTruncated,
		StderrTruncated: res.StderrTruncated,
		DurationMs:      res.Duration.Milliseconds(),
		CPUTimeMs:       res.CPUTime.Milliseconds(),
		PeakMemoryBytes: res.PeakMemoryBytes,
		LimitsHit:       res.LimitsHit,
		Notes:           sb.Notes(),
		Ports:           sb.Ports(),
	}
	if res.KilledBy != "" {
		k := string(res.KilledBy)
		out.KilledBy = &k
	}
	if res.Signal != 0 {
		s := res.Signal
		out.Signal = &s
	}
	return writeResult(os.Stdout, out, res.Stdout, res.Stderr)
}

func writeJSONError(err error) error {
	_ = writeJSON(map[string]string{"error": err.Error()})
	return exitError{125}
}
