//go:build linux

// Command airlock-bench measures how fast airlock sandboxes start, how
// fast they run commands and how much host memory they hold while idle, and
// compares the start with other ways of isolating a process on the same
// machine in the same run. It also measures what driving a sandbox through
// `airlock rpc` (package client) costs next to the embed API. Given
// -baseline REV, it also builds the airlock of an earlier revision and
// compares the two, alternated in the same run. It prints a Markdown table
// and writes the raw numbers as JSON.
//
//	go run ./bench/cmd/airlock-bench [-json FILE] [-n SCALE] [-agent PATH] [-airlock PATH] [-baseline REV]
//
// It needs what airlock needs (user namespaces; cgroups for the full
// confinement, which usually means root). See bench/README.md.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == egressCmd {
		os.Exit(egressMain())
	}
	os.Exit(run())
}

func run() int {
	var (
		jsonPath   = flag.String("json", filepath.Join("bench", "results", "latest.json"), "write the raw results as JSON to `FILE`, relative to the repository root by default (\"-\" for none)")
		agentPath  = flag.String("agent", "", "airlock-guest binary to use (default: build ./cmd/airlock-guest with CGO_ENABLED=0 into a temp dir)")
		cliPath    = flag.String("airlock", "", "the airlock binary at `PATH` whose rpc command the rpc section drives (default: build ./cmd/airlock with CGO_ENABLED=0 into a temp dir)")
		scale      = flag.Float64("n", 1, "scale every run count by this `factor` (0.1 for a quick smoke run)")
		ttiRuns    = flag.Int("tti-runs", 50, "sandboxes to create for time to interactive")
		execRuns   = flag.Int("exec-runs", 500, "commands to run for the exec round trip")
		execWarmup = flag.Int("exec-warmup", 10, "untimed commands before the exec round trip")
		idleN      = flag.Int("idle-sandboxes", 20, "sandboxes kept running for the memory measurement")
		idleWait   = flag.Duration("idle-wait", time.Second, "how long the sandboxes idle before memory is read")
		refRuns    = flag.Int("ref-runs", 50, "runs of each reference point and phase probe")
		refWarmup  = flag.Int("ref-warmup", 2, "untimed runs before each reference point and phase probe")
		rpcRuns    = flag.Int("rpc-runs", 300, "commands run through each of airlock rpc and the embed API, alternated, for the RPC overhead")
		rpcWarmup  = flag.Int("rpc-warmup", 10, "untimed commands through each of airlock rpc and the embed API before the RPC overhead")
		clientPath = flag.String("httpclient", "", "the HTTP client binary at `PATH` that the egress section runs (default: build ./bench/cmd/airlock-httpclient with CGO_ENABLED=0 into a temp dir)")
		egReqs     = flag.Int("egress-requests", 2000, "timed keep-alive requests of the egress section, per protocol and way")
		egConns    = flag.Int("egress-conns", 200, "timed new HTTPS connections of the egress section, per way")
		egNames    = flag.Int("egress-names", 16, "names never seen before that the egress section connects to, each once per way")
		egBulk     = flag.Int("egress-bulk-mib", 256, "size in `MiB` of each download of the egress section")
		egProfile  = flag.String("egress-cpuprofile", "", "write a CPU profile of the process that runs the sandbox's network during each run of the client in the sandbox into `DIR`")
		baseRev    = flag.String("baseline", "", "compare this build with the airlock of git revision `REV` (e.g. ca5b440 or HEAD~20), built from it, in the same run: time to interactive and exec round trip through airlock rpc, alternated")
		baseTTI    = flag.Int("baseline-tti-runs", 200, "sandboxes created by each build for the baseline comparison of time to interactive")
		baseExec   = flag.Int("baseline-exec-runs", 1000, "commands run by each build for the baseline comparison of the exec round trip")
		baseWarmup = flag.Int("baseline-warmup", 10, "untimed pairs before each series of the baseline comparison")
		skip       = flag.String("skip", "", "comma-separated sections to leave out: "+strings.Join(sections, ","))
		timeout    = flag.Duration("timeout", 5*time.Minute, "give up after this long")
	)
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: airlock-bench [flags]\n\nMeasures airlock sandbox start, exec round trip, idle memory, airlock rpc overhead and egress, and with -baseline compares this build with an earlier revision; see bench/README.md.\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() > 0 || *scale <= 0 {
		flag.Usage()
		return 2
	}
	skipped, err := parseSkip(*skip)
	if err != nil {
		fmt.Fprintf(os.Stderr, "airlock-bench: %v\n", err)
		return 2
	}
	scaled := func(n int) int {
		if n <= 0 {
			return 0
		}
		return max(1, int(math.Round(float64(n)**scale)))
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()

	start := time.Now()
	rep := &report{
		Timestamp: start.UTC().Format(time.RFC3339),
		Params: params{
			TTIRuns: scaled(*ttiRuns), ExecRuns: scaled(*execRuns), ExecWarmup: *execWarmup,
			IdleSandboxes: *idleN, IdleWaitMs: idleWait.Milliseconds(),
			RefRuns: scaled(*refRuns), RefWarmup: *refWarmup,
			RPCRuns: scaled(*rpcRuns), RPCWarmup: *rpcWarmup, Scale: *scale,
			EgressRequests: scaled(*egReqs), EgressConns: scaled(*egConns), EgressNames: scaled(*egNames),
			EgressBulkBytes: int64(scaled(*egBulk)) * mib,
			BaselineTTIRuns: scaled(*baseTTI), BaselineExecRuns: scaled(*baseExec), BaselineWarmup: *baseWarmup,
		},
	}
	logf := func(format string, a ...any) {
		fmt.Fprintf(os.Stderr, "[%5.1fs] "+format+"\n", append([]any{time.Since(start).Seconds()}, a...)...)
	}
	failed := false
	fail := func(section string, err error) {
		failed = true
		rep.Errors = append(rep.Errors, section+": "+err.Error())
		logf("%s failed: %v", section, err)
	}

	tmp, err := os.MkdirTemp("", "airlock-bench-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "airlock-bench: %v\n", err)
		return 1
	}
	defer os.RemoveAll(tmp)
	// A private state directory: the sandboxes' mount points go there.
	home := filepath.Join(tmp, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		fmt.Fprintf(os.Stderr, "airlock-bench: %v\n", err)
		return 1
	}
	os.Setenv("AIRLOCK_HOME", home)

	mod := moduleRoot(ctx)
	rep.Host = gatherHost(ctx, mod)
	// The default result file is relative to the repository, wherever
	// the program runs from.
	jsonSet := false
	flag.Visit(func(f *flag.Flag) { jsonSet = jsonSet || f.Name == "json" })
	if !jsonSet && mod != "" {
		*jsonPath = filepath.Join(mod, "bench", "results", "latest.json")
	}

	// The baseline section runs only when it is given a revision; one that
	// names no commit fails before anything is built.
	baseline := *baseRev != "" && !skipped["baseline"]
	var baseCommit string
	if baseline {
		if baseCommit, err = resolveRevision(ctx, mod, *baseRev); err != nil {
			fmt.Fprintf(os.Stderr, "airlock-bench: %v\n", err)
			return 1
		}
	}

	if *agentPath != "" {
		p, err := filepath.Abs(*agentPath)
		if err == nil {
			_, err = os.Stat(p)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "airlock-bench: -agent: %v\n", err)
			return 1
		}
		rep.Agent = p
	} else {
		logf("building the agent (CGO_ENABLED=0 go build ./cmd/airlock-guest)")
		p, d, err := buildAgent(ctx, mod, tmp)
		if err != nil {
			fmt.Fprintf(os.Stderr, "airlock-bench: %v\n", err)
			return 1
		}
		rep.Agent, rep.AgentBuilt, rep.AgentBuildMs = p, true, ms(d)
		logf("agent built in %.1f s", d.Seconds())
	}
	// The rpc and baseline sections drive `airlock rpc`: that binary is
	// only needed, and built, when one of them runs.
	if !skipped["rpc"] || baseline {
		if err := rep.findCLI(ctx, *cliPath, mod, tmp, logf); err != nil {
			fmt.Fprintf(os.Stderr, "airlock-bench: %v (or leave the sections that need it out with -skip rpc,baseline)\n", err)
			return 1
		}
	}
	if baseline {
		logf("building airlock and airlock-guest of %s (%s) from git archive", *baseRev, baseCommit)
		b, err := newBaseline(ctx, mod, *baseRev, baseCommit, tmp)
		if err != nil {
			fmt.Fprintf(os.Stderr, "airlock-bench: %v (or leave the section out with -skip baseline)\n", err)
			return 1
		}
		b.After = baselineBuild{Revision: rep.treeName(), Airlock: rep.Airlock, Agent: rep.Agent}
		rep.Baseline = b
		logf("%s built in %.1f s", b.Describe, b.BuildMs/1e3)
	}
	// So is the egress section's HTTP client.
	if !skipped["egress"] {
		if err := rep.findClient(ctx, *clientPath, mod, tmp, logf); err != nil {
			fmt.Fprintf(os.Stderr, "airlock-bench: %v (or leave the section out with -skip egress)\n", err)
			return 1
		}
	}
	cfg := airlock.Config{AgentPath: rep.Agent}
	pr := rep.Params

	if !skipped["refs"] {
		logf("reference points: %d runs each", pr.RefRuns)
		rep.References = references(ctx, pr.RefRuns, pr.RefWarmup, tmp)
	}
	if !skipped["phases"] {
		logf("phase probes: %d runs each", pr.RefRuns)
		rep.Phases = phaseProbes(ctx, pr.RefRuns, pr.RefWarmup, rep.Agent)
		rep.Phases = append(rep.Phases, internalProbes(ctx, pr.RefRuns, pr.RefWarmup, rep.Agent)...)
	}
	if !skipped["tti"] {
		logf("time to interactive: %d sandboxes", pr.TTIRuns)
		if rep.TTI, err = measureTTI(ctx, cfg, pr.TTIRuns); err != nil {
			fail("time to interactive", err)
		}
	}
	if !skipped["exec"] && ctx.Err() == nil {
		logf("exec round trip: %d warm-up + %d commands, then %d pings", pr.ExecWarmup, pr.ExecRuns, pr.ExecRuns)
		if rep.Exec, err = measureExec(ctx, cfg, pr.ExecWarmup, pr.ExecRuns); err != nil {
			fail("exec round trip", err)
		}
	}
	if !skipped["memory"] && ctx.Err() == nil {
		logf("idle memory: %d sandboxes", pr.IdleSandboxes)
		if rep.Memory, err = measureMemory(ctx, cfg, pr.IdleSandboxes, *idleWait); err != nil {
			fail("idle memory", err)
		}
	}
	if !skipped["rpc"] && ctx.Err() == nil {
		logf("rpc: %d warm-up + %d commands each through airlock rpc and the embed API, alternated; then %d MiB write_file/read_file, %d rounds", pr.RPCWarmup, pr.RPCRuns, rpcFileBytes/mib, rpcFileRounds)
		if rep.RPC, err = measureRPC(ctx, cfg, rep.Airlock, home, pr.RPCWarmup, pr.RPCRuns); err != nil {
			fail("rpc", err)
		}
	}
	if baseline && ctx.Err() == nil {
		logf("baseline: %s against %s through airlock rpc, alternated: %d warm-up + %d sandboxes each, then %d warm-up + %d commands each", rep.Baseline.Before.Revision, rep.Baseline.After.Revision, pr.BaselineWarmup, pr.BaselineTTIRuns, pr.BaselineWarmup, pr.BaselineExecRuns)
		if err := measureBaseline(ctx, rep.Baseline, tmp, pr.BaselineWarmup, pr.BaselineTTIRuns, pr.BaselineExecRuns); err != nil {
			fail("baseline", err)
		}
	}
	if !skipped["egress"] && ctx.Err() == nil {
		logf("egress: the same HTTP client directly and in a sandbox, against local servers in a network namespace: %d keep-alive requests per protocol, %d new connections, %d new names, %d MiB downloads", pr.EgressRequests, pr.EgressConns, pr.EgressNames, pr.EgressBulkBytes/mib)
		eg := egressParams{
			Agent: rep.Agent, Client: rep.HTTPClient,
			Requests: pr.EgressRequests, Conns: pr.EgressConns, Names: pr.EgressNames, BulkBytes: pr.EgressBulkBytes,
			CPUProfile: *egProfile,
		}
		if deadline, ok := ctx.Deadline(); ok {
			eg.Timeout = time.Until(deadline)
		}
		var err error
		if eg.CPUProfile != "" {
			if eg.CPUProfile, err = filepath.Abs(eg.CPUProfile); err == nil {
				err = os.MkdirAll(eg.CPUProfile, 0o755)
			}
		}
		if err == nil {
			rep.Egress, err = measureEgress(ctx, eg, logf)
		}
		if err != nil {
			fail("egress", err)
		} else if rep.Egress.Skipped != "" {
			logf("egress skipped: %s", rep.Egress.Skipped)
		}
	}
	if err := ctx.Err(); err != nil && !failed {
		fail("benchmark", err)
	}
	rep.DurationSec = time.Since(start).Seconds()
	rep.Host.LoadEnd = loadAvg()
	rep.evaluate()
	logf("done")

	fmt.Println()
	rep.writeTable(os.Stdout)

	if *jsonPath != "" && *jsonPath != "-" {
		if err := writeJSON(*jsonPath, rep); err != nil {
			fmt.Fprintf(os.Stderr, "airlock-bench: %v\n", err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "wrote %s\n", *jsonPath)
	}
	if failed {
		return 1
	}
	return 0
}

// sections are the parts of the benchmark that -skip can leave out.
var sections = []string{"refs", "phases", "tti", "exec", "memory", "rpc", "baseline", "egress"}

// parseSkip reads -skip: a comma-separated list of sections.
func parseSkip(list string) (map[string]bool, error) {
	skipped := map[string]bool{}
	for _, s := range strings.Split(list, ",") {
		if s = strings.TrimSpace(s); s != "" {
			if !slices.Contains(sections, s) {
				return nil, fmt.Errorf("unknown section %q in -skip (the sections are %s)", s, strings.Join(sections, ","))
			}
			skipped[s] = true
		}
	}
	return skipped, nil
}

// findCLI sets r.Airlock to the airlock binary the rpc section drives:
// path when given, else one built from the module.
func (r *report) findCLI(ctx context.Context, path, mod, tmp string, logf func(string, ...any)) error {
	if path != "" {
		p, err := filepath.Abs(path)
		if err == nil {
			_, err = os.Stat(p)
		}
		if err != nil {
			return fmt.Errorf("-airlock: %w", err)
		}
		r.Airlock = p
		return nil
	}
	logf("building the airlock command (CGO_ENABLED=0 go build ./cmd/airlock)")
	p, d, err := buildCLI(ctx, mod, tmp)
	if err != nil {
		return err
	}
	r.Airlock, r.AirlockBuilt, r.AirlockBuildMs = p, true, ms(d)
	logf("airlock built in %.1f s", d.Seconds())
	return nil
}

// findClient sets r.HTTPClient to the egress section's HTTP client: path
// when given, else one built from the module.
func (r *report) findClient(ctx context.Context, path, mod, tmp string, logf func(string, ...any)) error {
	if path != "" {
		p, err := filepath.Abs(path)
		if err == nil {
			_, err = os.Stat(p)
		}
		if err != nil {
			return fmt.Errorf("-httpclient: %w", err)
		}
		r.HTTPClient = p
		return nil
	}
	logf("building the HTTP client (CGO_ENABLED=0 go build ./bench/cmd/airlock-httpclient)")
	p, d, err := buildHTTPClient(ctx, mod, tmp)
	if err != nil {
		return err
	}
	r.HTTPClient, r.HTTPClientBuilt = p, true
	logf("HTTP client built in %.1f s", d.Seconds())
	return nil
}

func writeJSON(path string, rep *report) error {
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
