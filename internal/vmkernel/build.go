package vmkernel

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Progress is a step of a build: "extract", "configure", "verify",
// "compile" (Objects counts the files compiled and linked so far),
// "install", "done".
type Progress struct {
	Arch    string
	Step    string
	Objects int
}

// BuildOptions says what to build and where.
type BuildOptions struct {
	CacheDir string
	Arch     string
	// Source is the tarball to build from; FindSource's when nil.
	Source *Source
	// Jobs is make's -j; the number of CPUs when 0.
	Jobs int
	// Rebuild builds even when the cache holds the kernel, replacing it.
	Rebuild bool
	// Progress, when set, is told each step as it begins, and the
	// compile's object count as it grows.
	Progress func(Progress)
	// Log, when set, gets the build's whole output as well as the
	// kernel's build.log.
	Log io.Writer
	// Logger records what the build does.
	Logger *slog.Logger
}

// logFile is the build's output in a kernel's directory; a failed build
// leaves it as kernels/failed-<arch>.log.
const logFile = "build.log"

// Build returns the kernel for opts.Arch from the cache, building it first
// when the cache does not hold it. cached says whether it was there.
func Build(ctx context.Context, opts BuildOptions) (k Kernel, cached bool, err error) {
	if _, err := Fragment(opts.Arch); err != nil {
		return Kernel{}, false, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var src Source
	if opts.Source != nil {
		src = *opts.Source
	} else if src, err = FindSource(ctx, SourceDir); err != nil {
		return Kernel{}, false, fmt.Errorf("build the %s guest kernel: %w", opts.Arch, err)
	}
	key, err := Key(src, opts.Arch)
	if err != nil {
		return Kernel{}, false, err
	}
	root := filepath.Join(opts.CacheDir, kernelsDir)
	dir := filepath.Join(root, key)
	if !opts.Rebuild {
		if k, err := read(dir); err == nil {
			return k, true, nil
		}
	}
	if err := missingTools(opts.Arch); err != nil {
		return Kernel{}, false, err
	}
	if err := os.MkdirAll(filepath.Join(root, ".locks"), 0o755); err != nil {
		return Kernel{}, false, fmt.Errorf("make the kernel cache: %w", err)
	}
	unlock, err := Lock(ctx, filepath.Join(root, ".locks", key))
	if err != nil {
		return Kernel{}, false, fmt.Errorf("wait for another build of the %s kernel: %w", opts.Arch, err)
	}
	defer unlock()
	if !opts.Rebuild {
		// Built by whoever held the lock.
		if k, err := read(dir); err == nil {
			return k, true, nil
		}
	}
	log.Info("building the guest kernel", "arch", opts.Arch, "source", src.Path, "version", src.Version, "key", key)
	start := time.Now()
	m, err := run(ctx, opts, src, root, key, start)
	if err != nil {
		return Kernel{}, false, fmt.Errorf("build the %s guest kernel from %s %s: %w", opts.Arch, src.Package, src.Version, err)
	}
	log.Info("built the guest kernel", "arch", opts.Arch, "key", key, "release", m.Release, "size", m.Size, "took", time.Since(start).Round(time.Second))
	if k, err = read(dir); err != nil {
		return Kernel{}, false, fmt.Errorf("read the %s kernel just built: %w", opts.Arch, err)
	}
	if opts.Progress != nil {
		opts.Progress(Progress{Arch: opts.Arch, Step: "done"})
	}
	return k, false, nil
}

// run runs build.sh in a scratch directory under root and moves what it
// made to root/key.
func run(ctx context.Context, opts BuildOptions, src Source, root, key string, start time.Time) (Manifest, error) {
	tmp, err := os.MkdirTemp(root, ".build-"+key+"-")
	if err != nil {
		return Manifest{}, fmt.Errorf("make a build directory: %w", err)
	}
	defer os.RemoveAll(tmp)
	frag, _ := Fragment(opts.Arch)
	fragPath, script := filepath.Join(tmp, opts.Arch+".config"), filepath.Join(tmp, "build.sh")
	out := filepath.Join(tmp, "out")
	if err := os.WriteFile(fragPath, frag, 0o644); err != nil {
		return Manifest{}, fmt.Errorf("write the fragment: %w", err)
	}
	if err := os.WriteFile(script, buildScript, 0o755); err != nil {
		return Manifest{}, fmt.Errorf("write the build script: %w", err)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return Manifest{}, fmt.Errorf("make the output directory: %w", err)
	}
	logf, err := os.Create(filepath.Join(out, logFile))
	if err != nil {
		return Manifest{}, fmt.Errorf("make the build log: %w", err)
	}
	defer logf.Close()
	jobs := opts.Jobs
	if jobs <= 0 {
		jobs = runtime.NumCPU()
	}
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(),
		"AIRLOCK_KERNEL_SOURCE="+src.Path,
		"AIRLOCK_KERNEL_ARCH="+opts.Arch,
		"AIRLOCK_KERNEL_FRAGMENT="+fragPath,
		"AIRLOCK_KERNEL_WORK="+filepath.Join(tmp, "src"),
		"AIRLOCK_KERNEL_OUT="+out,
		"AIRLOCK_KERNEL_JOBS="+strconv.Itoa(jobs),
		"LC_ALL=C",
	)
	// make starts many processes: a cancelled build ends them all.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	pr, pw, err := os.Pipe()
	if err != nil {
		return Manifest{}, fmt.Errorf("make a pipe: %w", err)
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		return Manifest{}, fmt.Errorf("start the build script: %w", err)
	}
	pw.Close()
	tail := follow(pr, logf, opts)
	pr.Close()
	if err := cmd.Wait(); err != nil {
		failed := filepath.Join(root, "failed-"+opts.Arch+".log")
		_ = os.Rename(filepath.Join(out, logFile), failed)
		if ctx.Err() != nil {
			return Manifest{}, ctx.Err()
		}
		return Manifest{}, fmt.Errorf("%w; the last lines:\n%s\n(the whole log: %s)", err, strings.Join(tail, "\n"), failed)
	}
	m, err := manifest(out, src, opts.Arch, key, time.Since(start))
	if err != nil {
		return Manifest{}, err
	}
	dir := filepath.Join(root, key)
	if err := os.RemoveAll(dir); err != nil {
		return Manifest{}, fmt.Errorf("remove the old kernel: %w", err)
	}
	if err := os.Rename(out, dir); err != nil {
		return Manifest{}, fmt.Errorf("move the kernel into the cache: %w", err)
	}
	return m, nil
}

// manifest writes out's manifest.json, last, once the image is there.
func manifest(out string, src Source, arch, key string, took time.Duration) (Manifest, error) {
	frag, _ := Fragment(arch)
	image := "vmlinux"
	if arch == "arm64" {
		image = "Image"
	}
	fi, err := os.Stat(filepath.Join(out, image))
	if err != nil {
		return Manifest{}, fmt.Errorf("the build made no kernel image: %w", err)
	}
	rel, err := os.ReadFile(filepath.Join(out, "release"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Manifest{}, fmt.Errorf("read the kernel's release: %w", err)
	}
	m := Manifest{
		Key: key, Arch: arch, Source: src.Package, SourceVersion: src.Version,
		Release: strings.TrimSpace(string(rel)), FragmentSHA256: sum(frag), ScriptSHA256: sum(buildScript),
		Image: image, Size: fi.Size(), BuildMS: took.Milliseconds(), BuiltAt: time.Now().UTC(),
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return Manifest{}, err
	}
	if err := os.WriteFile(filepath.Join(out, manifestFile), append(b, '\n'), 0o644); err != nil {
		return Manifest{}, fmt.Errorf("write the kernel's manifest: %w", err)
	}
	return m, nil
}

// tailLines is how many of the build's last lines an error shows.
const tailLines = 30

// follow copies the build's output to the log (and opts.Log), tells
// opts.Progress the steps and the compile's progress, and returns the
// last lines.
func follow(r io.Reader, logf io.Writer, opts BuildOptions) []string {
	w := logf
	if opts.Log != nil {
		w = io.MultiWriter(logf, opts.Log)
	}
	var tail []string
	objects := 0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(w, line)
		if len(tail) == tailLines {
			tail = tail[1:]
		}
		tail = append(tail, line)
		if opts.Progress == nil {
			continue
		}
		if step, ok := strings.CutPrefix(line, "==> "); ok {
			name, _, _ := strings.Cut(step, " ")
			opts.Progress(Progress{Arch: opts.Arch, Step: name, Objects: objects})
			continue
		}
		if f := strings.Fields(line); len(f) >= 2 && (f[0] == "CC" || f[0] == "AS" || f[0] == "LD" || f[0] == "AR") {
			objects++
			opts.Progress(Progress{Arch: opts.Arch, Step: "compile", Objects: objects})
		}
	}
	// A read error ends the output early; Wait reports the build's end.
	_, _ = io.Copy(w, r)
	return tail
}
