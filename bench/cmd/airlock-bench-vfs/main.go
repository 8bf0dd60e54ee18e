//go:build linux

// Command airlock-bench-vfs measures programmable mounts: the same
// workloads (a sequential write and read of a large file, random 4 KiB
// reads, create+stat+unlink of many files, `git status` on a tree of
// 5,000 files) run inside sandboxes on the sandbox's own tmpfs, through
// a memory mount (pipelined, served one request at a time, and with
// FUSE writeback caching), through a real_fs mount and through a direct
// mount, alternated round by round in one run. It prints a Markdown
// table and writes the numbers as JSON.
//
//	sudo go run ./bench/cmd/airlock-bench-vfs [-rounds 3] [-size-mib 1024] [-json FILE]
//
// See bench/README.md.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/bench/internal/stats"
	"github.com/airlock-sandbox/airlock/internal/vfsfuse"
)

// workerInSandbox is where the worker is copied in each sandbox.
const workerInSandbox = "/tmp/airlock-bench-vfs"

// mode is one way of reaching files: a directory in one of the
// sandboxes.
type mode struct {
	Name string `json:"name"`
	What string `json:"what"`
	// Sandbox is the sandbox the directory is in (its agent's
	// environment differs).
	Sandbox string `json:"sandbox"`
	Dir     string `json:"dir"`
	// Info is the file system the worker found at Dir.
	Info *workResult `json:"info,omitempty"`
	// Rounds are the worker's results, one per round.
	Rounds []*workResult `json:"rounds"`
	// Medians over the rounds.
	WriteMBps   float64 `json:"seq_write_mb_per_s"`
	ReadMBps    float64 `json:"seq_read_mb_per_s"`
	RandPerS    float64 `json:"rand_4k_reads_per_s"`
	RandParPerS float64 `json:"rand_4k_reads_par_per_s"`
	MetaPerS    float64 `json:"create_stat_unlink_files_per_s"`
	GitStatusMs float64 `json:"git_status_ms"`
}

// sandboxSpec is one of the run's sandboxes: the agent's environment
// and the mounts it has.
type sandboxSpec struct {
	name string
	env  map[string]string
	cfg  airlock.Config
}

type report struct {
	Timestamp string   `json:"timestamp"`
	Kernel    string   `json:"kernel"`
	Cores     int      `json:"cores"`
	GoVersion string   `json:"go_version"`
	GoFuse    string   `json:"go_fuse"`
	Commit    string   `json:"airlock_commit,omitempty"`
	LoadStart string   `json:"loadavg_start"`
	LoadEnd   string   `json:"loadavg_end"`
	Loads     []string `json:"loadavg_per_round"`
	Settings  settings `json:"settings"`
	Params    params   `json:"params"`
	Modes     []*mode  `json:"modes"`
	Targets   []target `json:"targets"`
	Notes     []string `json:"notes,omitempty"`
}

type params struct {
	Rounds   int   `json:"rounds"`
	Bytes    int64 `json:"seq_bytes"`
	BS       int   `json:"seq_block_bytes"`
	Reads    int   `json:"rand_reads"`
	ParReads int   `json:"rand_par_reads"`
	Threads  int   `json:"rand_threads"`
	Files    int   `json:"meta_files"`
	GitFiles int   `json:"git_files"`
	GitRuns  int   `json:"git_runs"`
	MemoryMB int64 `json:"sandbox_memory_mb"`
	DiskMB   int64 `json:"sandbox_disk_mb"`
	MountMB  int64 `json:"memory_mount_mb"`
}

// settings are the FUSE settings the mounts use.
type settings struct {
	MaxWrite       int    `json:"max_write"`
	MaxReadAhead   int    `json:"max_readahead"`
	AttrTimeout    string `json:"attr_timeout"`
	EntryTimeout   string `json:"entry_timeout"`
	Server         string `json:"server"`
	MaxBackground  string `json:"max_background"`
	FuseMaxPages   string `json:"fuse_max_pages_limit,omitempty"`
	WritebackModes string `json:"writeback"`
}

type target struct {
	Name     string  `json:"name"`
	Measured float64 `json:"measured"`
	Goal     float64 `json:"goal"`
	Met      bool    `json:"met"`
	Detail   string  `json:"detail"`
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == workArg {
		work(os.Args[2:])
		return
	}
	var (
		rounds    = flag.Int("rounds", 3, "rounds; each runs every mode once, in an order rotated by one each round")
		sizeMiB   = flag.Int64("size-mib", 1024, "size of the sequential file in `MiB`")
		reads     = flag.Int("reads", 20000, "random 4 KiB reads one at a time, per round and mode")
		parReads  = flag.Int("par-reads", 40000, "random 4 KiB reads by -threads readers at once, per round and mode")
		threads   = flag.Int("threads", 8, "readers at once")
		files     = flag.Int("files", 10000, "files created, stated and unlinked per round and mode")
		gitFiles  = flag.Int("git-files", 5000, "files of the tree git status looks at")
		gitRuns   = flag.Int("git-runs", 3, "timed git status runs per round and mode (after one untimed)")
		only      = flag.String("modes", "", "comma-separated modes to run (default all): tmpfs,memory,memory-serial,memory-writeback,real_fs,direct")
		ops       = flag.String("ops", "seq,rand,meta,git", "workloads to run")
		agentPath = flag.String("agent", "", "the agent binary (default: build ./cmd/airlock-guest)")
		workerBin = flag.String("worker", "", "this program built with CGO_ENABLED=0, copied into the sandboxes (default: build it)")
		jsonPath  = flag.String("json", filepath.Join("bench", "results", "vfs.json"), "write the results as JSON to `FILE` (\"-\" for none)")
		cpuprof   = flag.String("cpuprofile", "", "write a CPU profile of this process (the host side of the mounts) to `DIR`/MODE-ROUND.pprof for each run")
		perfAgent = flag.String("perf-agent", "", "record the agent of each run with `perf record -g` into DIR/agent-MODE-ROUND.data (the mounts are served by this process: see -cpuprofile)")
		timeout   = flag.Duration("timeout", 30*time.Minute, "give up after this long")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	p := params{
		Rounds: *rounds, Bytes: *sizeMiB << 20, BS: 1 << 20, Reads: *reads, ParReads: *parReads, Threads: *threads,
		Files: *files, GitFiles: *gitFiles, GitRuns: *gitRuns,
	}
	// The sandbox's own tree must hold the file as a tmpfs (a disk of
	// at most half the memory limit is one); the memory mount too.
	p.DiskMB = max(1024, 2*(*sizeMiB))
	p.MemoryMB = 2*p.DiskMB + 512
	p.MountMB = p.DiskMB
	rep, err := run(ctx, p, *only, *ops, *agentPath, *workerBin, *cpuprof, *perfAgent)
	if err != nil {
		fmt.Fprintf(os.Stderr, "airlock-bench-vfs: %v\n", err)
		os.Exit(1)
	}
	printTable(os.Stdout, rep)
	if *jsonPath != "-" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		os.MkdirAll(filepath.Dir(*jsonPath), 0o755)
		if err := os.WriteFile(*jsonPath, append(b, '\n'), 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "airlock-bench-vfs: %v\n", err)
			os.Exit(1)
		}
		fmt.Fprintf(os.Stderr, "wrote %s\n", *jsonPath)
	}
}

var start = time.Now()

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "[%6.1fs] "+format+"\n", append([]any{time.Since(start).Seconds()}, a...)...)
}

func run(ctx context.Context, p params, only, ops, agentPath, workerBin, cpuprof, perfAgent string) (*report, error) {
	rep := &report{
		Timestamp: time.Now().UTC().Format(time.RFC3339),
		Cores:     runtime.NumCPU(),
		GoVersion: runtime.Version(),
		LoadStart: loadAvg(),
		Params:    p,
		Settings: settings{
			// The process level's (internal/boundary/process).
			MaxWrite: vfsfuse.LargestWrite, MaxReadAhead: vfsfuse.LargestWrite,
			AttrTimeout: "1s (vfsfuse default; 1m for memory mounts, whose every change the kernel makes or is told of)", EntryTimeout: "1s (1m for memory mounts), negative entries 1s",
			Server:         fmt.Sprintf("the supervisor (this process, GOMAXPROCS %d) reads the mounts' FUSE devices itself", runtime.GOMAXPROCS(0)),
			MaxBackground:  "64 (internal/vfsfuse)",
			WritebackModes: "off, except memory-writeback (AIRLOCK_VFS_WRITEBACK=1)",
		},
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		rep.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/hanwen/go-fuse/v2" {
				rep.GoFuse = d.Version
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/fs/fuse/max_pages_limit"); err == nil {
		rep.Settings.FuseMaxPages = strings.TrimSpace(string(b))
	}
	tmp, err := os.MkdirTemp("", "airlock-bench-vfs-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	home := filepath.Join(tmp, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		return nil, err
	}
	os.Setenv("AIRLOCK_HOME", home)
	mod := moduleRoot(ctx)
	rep.Commit = gitOut(ctx, mod, "describe", "--always", "--dirty")
	if agentPath == "" {
		logf("building the agent")
		if agentPath, err = build(ctx, mod, tmp, "./cmd/airlock-guest"); err != nil {
			return nil, err
		}
	}
	if workerBin == "" {
		logf("building the worker")
		if workerBin, err = build(ctx, mod, tmp, "./bench/cmd/airlock-bench-vfs"); err != nil {
			return nil, err
		}
	}
	workerBytes, err := os.ReadFile(workerBin)
	if err != nil {
		return nil, err
	}
	// The host directories of the real_fs and direct mounts are on a
	// tmpfs, as the sandbox's own tree is.
	shm, err := os.MkdirTemp("/dev/shm", "airlock-bench-vfs-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(shm)
	realDir, directDir := filepath.Join(shm, "real"), filepath.Join(shm, "direct")
	for _, d := range []string{realDir, directDir} {
		if err := os.Mkdir(d, 0o777); err != nil {
			return nil, err
		}
		// Writable by the sandbox's own ids, whichever they are.
		os.Chmod(d, 0o777)
	}

	base := func() airlock.Config {
		return airlock.Config{
			AgentPath: agentPath,
			Resources: airlock.Resources{MemoryMB: p.MemoryMB},
			DiskMB:    p.DiskMB,
			PidsLimit: 4096,
		}
	}
	mainCfg := base()
	mainCfg.VFS = airlock.VFSConfig{
		Mounts: map[string]airlock.MountSpec{
			"/mnt/mem":  {Type: airlock.MountMemory, SizeMB: p.MountMB},
			"/mnt/real": {Type: airlock.MountRealFS, HostPath: realDir},
		},
		DirectMounts: map[string]airlock.DirectMount{"/mnt/direct": {HostPath: directDir}},
	}
	memOnly := base()
	memOnly.VFS = airlock.VFSConfig{Mounts: map[string]airlock.MountSpec{"/mnt/mem": {Type: airlock.MountMemory, SizeMB: p.MountMB}}}
	specs := []sandboxSpec{
		{name: "main", cfg: mainCfg},
		{name: "serial", env: map[string]string{"AIRLOCK_VFS_SERIAL": "1"}, cfg: memOnly},
		{name: "writeback", env: map[string]string{"AIRLOCK_VFS_WRITEBACK": "1"}, cfg: memOnly},
	}
	all := []*mode{
		{Name: "tmpfs", What: "the sandbox's own tree (tmpfs)", Sandbox: "main", Dir: "/tmp/native"},
		{Name: "memory", What: "memory mount", Sandbox: "main", Dir: "/mnt/mem/b"},
		{Name: "memory-serial", What: "memory mount, one request at a time", Sandbox: "serial", Dir: "/mnt/mem/b"},
		{Name: "memory-writeback", What: "memory mount, FUSE writeback cache", Sandbox: "writeback", Dir: "/mnt/mem/b"},
		{Name: "real_fs", What: "real_fs mount of a host tmpfs directory", Sandbox: "main", Dir: "/mnt/real/b"},
		{Name: "direct", What: "direct (bind) mount of a host tmpfs directory", Sandbox: "main", Dir: "/mnt/direct/b"},
	}
	modes := all
	if only != "" {
		want := strings.Split(only, ",")
		modes = nil
		for _, m := range all {
			if slices.Contains(want, m.Name) {
				modes = append(modes, m)
			}
		}
		if len(modes) == 0 {
			return nil, fmt.Errorf("-modes %q names no mode", only)
		}
	}
	rep.Modes = modes
	sbs := map[string]*airlock.Sandbox{}
	defer func() {
		for _, sb := range sbs {
			sb.Close()
		}
	}()
	for _, s := range specs {
		if !slices.ContainsFunc(modes, func(m *mode) bool { return m.Sandbox == s.name }) {
			continue
		}
		for k, v := range s.env {
			os.Setenv(k, v)
		}
		sb, err := airlock.Create(ctx, s.cfg)
		for k := range s.env {
			os.Unsetenv(k)
		}
		if err != nil {
			return nil, fmt.Errorf("create the %s sandbox: %w", s.name, err)
		}
		sbs[s.name] = sb
		rep.Notes = append(rep.Notes, sb.Notes()...)
		if err := sb.WriteFile(ctx, workerInSandbox, workerBytes, 0o755); err != nil {
			return nil, fmt.Errorf("copy the worker into the %s sandbox: %w", s.name, err)
		}
	}
	slices.Sort(rep.Notes)
	rep.Notes = slices.Compact(rep.Notes)

	runWorker := func(m *mode, label string, args ...string) (*workResult, error) {
		sb := sbs[m.Sandbox]
		argv := append([]string{workerInSandbox, workArg, "-dir", m.Dir}, args...)
		var stopProf func()
		if label != "" && cpuprof != "" {
			os.MkdirAll(cpuprof, 0o755)
			f, err := os.Create(filepath.Join(cpuprof, label+".pprof"))
			if err != nil {
				return nil, err
			}
			if err := pprof.StartCPUProfile(f); err != nil {
				f.Close()
				return nil, err
			}
			stopProf = func() { pprof.StopCPUProfile(); f.Close() }
		}
		var perf *exec.Cmd
		if label != "" && perfAgent != "" && m.Name != "tmpfs" && m.Name != "direct" {
			os.MkdirAll(perfAgent, 0o755)
			perf = exec.Command("perf", "record", "-q", "-g", "-p", strconv.Itoa(sb.PID()), "-o", filepath.Join(perfAgent, "agent-"+label+".data"))
			perf.Stdout, perf.Stderr = os.Stderr, os.Stderr
			if err := perf.Start(); err != nil {
				return nil, err
			}
			time.Sleep(300 * time.Millisecond)
		}
		// Without asynchronous preemption: its signals interrupt FUSE
		// requests in flight, which a mount may answer with EINTR (a
		// close that flushes times under writeback caching does).
		res, err := sb.Run(ctx, airlock.Command{Argv: argv, Env: map[string]string{"GODEBUG": "asyncpreemptoff=1"}, Timeout: 20 * time.Minute})
		if stopProf != nil {
			stopProf()
		}
		if perf != nil {
			perf.Process.Signal(os.Interrupt)
			perf.Wait()
		}
		if err != nil {
			return nil, err
		}
		if res.ExitCode != 0 {
			return nil, fmt.Errorf("the worker in %s exited with %d: %s", m.Dir, res.ExitCode, bytes.TrimSpace(res.Stderr))
		}
		var w workResult
		if err := json.Unmarshal(res.Stdout, &w); err != nil {
			return nil, fmt.Errorf("the worker in %s: %v (%q)", m.Dir, err, res.Stdout)
		}
		return &w, nil
	}
	wl := strings.Split(ops, ",")
	setup := "info"
	if slices.Contains(wl, "git") {
		setup += ",gitsetup"
	}
	for _, m := range modes {
		logf("%s: setting up %s", m.Name, m.Dir)
		w, err := runWorker(m, "", "-ops", setup, "-git-files", fmt.Sprint(p.GitFiles))
		if err != nil {
			return nil, err
		}
		m.Info = w
		if w.ReadAheadKB == "" {
			if b, err := os.ReadFile("/sys/class/bdi/" + w.Dev + "/read_ahead_kb"); err == nil {
				w.ReadAheadKB = strings.TrimSpace(string(b))
			}
		}
	}
	var wops []string
	for _, o := range wl {
		switch o {
		case "seq", "rand", "meta", "git":
			wops = append(wops, o)
			if o == "rand" || (o == "seq" && !slices.Contains(wl, "rand")) {
				wops = append(wops, "rm")
			}
		default:
			return nil, fmt.Errorf("-ops: unknown workload %q", o)
		}
	}
	if slices.Contains(wl, "rand") && !slices.Contains(wl, "seq") {
		return nil, fmt.Errorf("-ops: rand reads the file seq writes")
	}
	for r := range p.Rounds {
		rep.Loads = append(rep.Loads, loadAvg())
		for i := range modes {
			m := modes[(i+r)%len(modes)]
			logf("round %d/%d: %s", r+1, p.Rounds, m.Name)
			w, err := runWorker(m, fmt.Sprintf("%s-%d", m.Name, r+1), "-ops", strings.Join(wops, ","),
				"-size", fmt.Sprint(p.Bytes), "-bs", fmt.Sprint(p.BS), "-reads", fmt.Sprint(p.Reads),
				"-par-reads", fmt.Sprint(p.ParReads), "-threads", fmt.Sprint(p.Threads),
				"-files", fmt.Sprint(p.Files), "-git-runs", fmt.Sprint(p.GitRuns), "-seed", fmt.Sprint(r+1))
			if err != nil {
				return nil, fmt.Errorf("round %d, %s: %w", r+1, m.Name, err)
			}
			m.Rounds = append(m.Rounds, w)
			logf("  %s", w.brief())
		}
	}
	rep.LoadEnd = loadAvg()
	for _, m := range modes {
		m.summarize()
	}
	rep.judge()
	return rep, nil
}

func (w *workResult) brief() string {
	var parts []string
	if w.WriteS > 0 {
		parts = append(parts, fmt.Sprintf("write %.0f MB/s, read %.0f MB/s", float64(w.Bytes)/w.WriteS/1e6, float64(w.Bytes)/w.ReadS/1e6))
	}
	if w.RandS > 0 {
		parts = append(parts, fmt.Sprintf("random %.0f/s, ×%d %.0f/s", float64(w.RandReads)/w.RandS, w.Threads, float64(w.RandParReads)/w.RandParS))
	}
	if w.MetaS > 0 {
		parts = append(parts, fmt.Sprintf("meta %.0f files/s (create %.2fs stat %.2fs unlink %.2fs)", float64(w.MetaFiles)/w.MetaS, w.MetaCreateS, w.MetaStatS, w.MetaUnlinkS))
	}
	if len(w.GitStatusS) > 0 {
		parts = append(parts, fmt.Sprintf("git status %.0f ms", 1e3*stats.Percentile(w.GitStatusS, 50)))
	}
	return strings.Join(parts, "; ")
}

// summarize takes the medians over the rounds.
func (m *mode) summarize() {
	med := func(f func(w *workResult) (float64, bool)) float64 {
		var v []float64
		for _, w := range m.Rounds {
			if x, ok := f(w); ok {
				v = append(v, x)
			}
		}
		if len(v) == 0 {
			return 0
		}
		return stats.Percentile(v, 50)
	}
	m.WriteMBps = med(func(w *workResult) (float64, bool) { return float64(w.Bytes) / w.WriteS / 1e6, w.WriteS > 0 })
	m.ReadMBps = med(func(w *workResult) (float64, bool) { return float64(w.Bytes) / w.ReadS / 1e6, w.ReadS > 0 })
	m.RandPerS = med(func(w *workResult) (float64, bool) { return float64(w.RandReads) / w.RandS, w.RandS > 0 })
	m.RandParPerS = med(func(w *workResult) (float64, bool) { return float64(w.RandParReads) / w.RandParS, w.RandParS > 0 })
	m.MetaPerS = med(func(w *workResult) (float64, bool) { return float64(w.MetaFiles) / w.MetaS, w.MetaS > 0 })
	m.GitStatusMs = med(func(w *workResult) (float64, bool) {
		return 1e3 * stats.Percentile(w.GitStatusS, 50), len(w.GitStatusS) > 0
	})
}

func (rep *report) mode(name string) *mode {
	for _, m := range rep.Modes {
		if m.Name == name {
			return m
		}
	}
	return nil
}

// judge states the targets that the run's modes allow.
func (rep *report) judge() {
	native, mem, serial := rep.mode("tmpfs"), rep.mode("memory"), rep.mode("memory-serial")
	add := func(name string, a, b, goal float64, detail string) {
		if a == 0 || b == 0 {
			return
		}
		r := a / b
		rep.Targets = append(rep.Targets, target{Name: name, Measured: r, Goal: goal, Met: r >= goal, Detail: detail})
	}
	if native != nil && mem != nil {
		add("sequential write, memory mount ÷ tmpfs", mem.WriteMBps, native.WriteMBps, 0.5, fmt.Sprintf("%.0f vs %.0f MB/s", mem.WriteMBps, native.WriteMBps))
		add("sequential read, memory mount ÷ tmpfs", mem.ReadMBps, native.ReadMBps, 0.5, fmt.Sprintf("%.0f vs %.0f MB/s", mem.ReadMBps, native.ReadMBps))
		add("create+stat+unlink, memory mount ÷ tmpfs", mem.MetaPerS, native.MetaPerS, 0.2, fmt.Sprintf("%.0f vs %.0f files/s", mem.MetaPerS, native.MetaPerS))
	}
	if mem != nil && serial != nil {
		add("sequential write, pipelined ÷ one request at a time", mem.WriteMBps, serial.WriteMBps, 3, fmt.Sprintf("%.0f vs %.0f MB/s", mem.WriteMBps, serial.WriteMBps))
		add("sequential read, pipelined ÷ one request at a time", mem.ReadMBps, serial.ReadMBps, 3, fmt.Sprintf("%.0f vs %.0f MB/s", mem.ReadMBps, serial.ReadMBps))
		add(fmt.Sprintf("random 4 KiB reads by %d readers, pipelined ÷ one request at a time", rep.Params.Threads), mem.RandParPerS, serial.RandParPerS, 3, fmt.Sprintf("%.0f vs %.0f reads/s", mem.RandParPerS, serial.RandParPerS))
	}
}

func printTable(w *os.File, rep *report) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("## airlock-bench-vfs\n\n")
	p("kernel %s, %d cores, go-fuse %s, %s, airlock %s; load %s at the start, %s at the end (per round: %s)\n\n",
		rep.Kernel, rep.Cores, rep.GoFuse, rep.GoVersion, rep.Commit, rep.LoadStart, rep.LoadEnd, strings.Join(rep.Loads, "; "))
	p("sequential file %d MiB in %d KiB calls; %d random 4 KiB reads one at a time and %d by %d readers; %d files created, stated, unlinked; git status on %d files (median of %d after one untimed); %d rounds, modes alternated, medians\n\n",
		rep.Params.Bytes>>20, rep.Params.BS>>10, rep.Params.Reads, rep.Params.ParReads, rep.Params.Threads, rep.Params.Files, rep.Params.GitFiles, rep.Params.GitRuns, rep.Params.Rounds)
	p("| workload |")
	for _, m := range rep.Modes {
		p(" %s |", m.Name)
	}
	p("\n|---|")
	for range rep.Modes {
		p("--:|")
	}
	p("\n")
	row := func(name, unit string, f func(m *mode) float64) {
		p("| %s |", name)
		for _, m := range rep.Modes {
			v := f(m)
			if v == 0 || math.IsNaN(v) {
				p(" |")
				continue
			}
			p(" %s %s |", num(v), unit)
		}
		p("\n")
	}
	row("sequential write", "MB/s", func(m *mode) float64 { return m.WriteMBps })
	row("sequential read", "MB/s", func(m *mode) float64 { return m.ReadMBps })
	row("random 4 KiB reads, one at a time", "/s", func(m *mode) float64 { return m.RandPerS })
	row(fmt.Sprintf("random 4 KiB reads, %d readers", rep.Params.Threads), "/s", func(m *mode) float64 { return m.RandParPerS })
	row("create+stat+unlink", "files/s", func(m *mode) float64 { return m.MetaPerS })
	row("git status", "ms", func(m *mode) float64 { return m.GitStatusMs })
	p("\n| target | measured | goal | verdict |\n|---|--:|--:|---|\n")
	for _, t := range rep.Targets {
		v := "met"
		if !t.Met {
			v = "**not met**"
		}
		meas, goal := fmt.Sprintf("%.0f %%", 100*t.Measured), fmt.Sprintf("≥ %.0f %%", 100*t.Goal)
		if t.Goal > 1 {
			meas, goal = fmt.Sprintf("%.2fx", t.Measured), fmt.Sprintf("≥ %.0fx", t.Goal)
		}
		p("| %s | %s (%s) | %s | %s |\n", t.Name, meas, t.Detail, goal, v)
	}
	s := rep.Settings
	p("\nFUSE settings: max_write %d KiB, max_readahead %d KiB, attr timeout %s, entry timeout %s, max_pages_limit %s, max_background %s, %s, writeback %s\n",
		s.MaxWrite>>10, s.MaxReadAhead>>10, s.AttrTimeout, s.EntryTimeout, s.FuseMaxPages, s.MaxBackground, s.Server, s.WritebackModes)
	for _, m := range rep.Modes {
		if m.Info == nil {
			continue
		}
		p("- %s (%s): %s at %s, dev %s, options %s / %s", m.Name, m.What, m.Info.FSType, m.Dir, m.Info.Dev, m.Info.MountOptions, m.Info.SuperOptions)
		if m.Info.FSType == "fuse" {
			p(", read_ahead_kb %s", m.Info.ReadAheadKB)
		}
		p("\n")
	}
	for _, n := range rep.Notes {
		p("- note: %s\n", n)
	}
}

func num(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// build builds the package pkg with CGO_ENABLED=0 into dir.
func build(ctx context.Context, mod, dir, pkg string) (string, error) {
	if mod == "" {
		return "", fmt.Errorf("cannot build %s: not inside the airlock module (run from the repository, or pass -agent and -worker)", pkg)
	}
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = mod
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s: %v\n%s", pkg, err, b)
	}
	return out, nil
}

func moduleRoot(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return ""
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return ""
	}
	return filepath.Dir(gomod)
}

func gitOut(ctx context.Context, dir string, args ...string) string {
	if dir == "" {
		return ""
	}
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
