//go:build linux

package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/bench/internal/stats"
)

// trueCmd is the command every measurement runs: argv form, no shell, so
// only the sandbox's own cost is measured.
var trueCmd = airlock.Command{Argv: []string{"true"}}

func runTrue(ctx context.Context, sb *airlock.Sandbox) (*airlock.ExecResult, error) {
	res, err := sb.Run(ctx, trueCmd)
	if err != nil {
		return nil, err
	}
	if res.ExitCode != 0 {
		return nil, fmt.Errorf("true exited with %d (stderr %q)", res.ExitCode, res.Stderr)
	}
	return res, nil
}

// ttiResult is time-to-interactive: airlock.Create up to the result of the
// first command.
type ttiResult struct {
	Runs int `json:"runs"`
	// ColdMs is the very first Create+Run of this process (page cache and
	// lazy kernel state cold for this bench); it is not in the summaries.
	ColdMs float64 `json:"cold_first_ms"`
	// TTI is Create + first Run, in milliseconds.
	TTI stats.Summary `json:"tti_ms"`
	// Create and FirstRun split TTI.
	Create   stats.Summary `json:"create_ms"`
	FirstRun stats.Summary `json:"first_run_ms"`
	// FirstRunAgent is the agent's own measure of the first command
	// (spawn to exit, ExecResult.Duration); FirstRun minus it is transport.
	FirstRunAgent stats.Summary `json:"first_run_agent_ms"`
	// Close is sb.Close, not part of TTI.
	Close stats.Summary `json:"close_ms"`
	// Notes are the sandbox's degraded-confinement notes, if any: a
	// sandbox without cgroups, say, is cheaper than a fully confined one.
	Notes []string `json:"notes,omitempty"`
}

func measureTTI(ctx context.Context, cfg airlock.Config, runs int) (*ttiResult, error) {
	r := &ttiResult{Runs: runs}
	var tti, create, first, firstAgent, closeT []time.Duration
	for i := -1; i < runs; i++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		t0 := time.Now()
		sb, err := airlock.Create(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("create sandbox (run %d): %w", i+1, err)
		}
		t1 := time.Now()
		res, err := runTrue(ctx, sb)
		t2 := time.Now()
		if err != nil {
			sb.Close()
			return nil, fmt.Errorf("first command (run %d): %w", i+1, err)
		}
		if i < 0 {
			r.Notes = sb.Notes()
		}
		cerr := sb.Close()
		t3 := time.Now()
		if cerr != nil {
			return nil, fmt.Errorf("close sandbox (run %d): %w", i+1, cerr)
		}
		if i < 0 {
			r.ColdMs = ms(t2.Sub(t0))
			continue
		}
		tti = append(tti, t2.Sub(t0))
		create = append(create, t1.Sub(t0))
		first = append(first, t2.Sub(t1))
		firstAgent = append(firstAgent, res.Duration)
		closeT = append(closeT, t3.Sub(t2))
	}
	r.TTI = stats.Summarize(stats.Millis(tti))
	r.Create = stats.Summarize(stats.Millis(create))
	r.FirstRun = stats.Summarize(stats.Millis(first))
	r.FirstRunAgent = stats.Summarize(stats.Millis(firstAgent))
	r.Close = stats.Summarize(stats.Millis(closeT))
	return r, nil
}

// execResult is the round trip of one command in a running sandbox.
type execResult struct {
	Warmup int `json:"warmup"`
	Runs   int `json:"runs"`
	// RTT is sb.Run of `true`, call to result, in milliseconds.
	RTT stats.Summary `json:"rtt_ms"`
	// Agent is the agent's own measure (ExecResult.Duration: spawn request
	// to exit status); RTT minus Agent is the host<->agent transport.
	Agent stats.Summary `json:"agent_ms"`
	// Ping is a no-op request round trip: the transport alone.
	Ping stats.Summary `json:"ping_ms"`
}

func measureExec(ctx context.Context, cfg airlock.Config, warmup, runs int) (*execResult, error) {
	sb, err := airlock.Create(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	defer sb.Close()
	for i := 0; i < warmup; i++ {
		if _, err := runTrue(ctx, sb); err != nil {
			return nil, fmt.Errorf("warm-up command: %w", err)
		}
	}
	rtt := make([]time.Duration, 0, runs)
	agent := make([]time.Duration, 0, runs)
	for i := 0; i < runs; i++ {
		t0 := time.Now()
		res, err := runTrue(ctx, sb)
		d := time.Since(t0)
		if err != nil {
			return nil, fmt.Errorf("command %d: %w", i+1, err)
		}
		rtt = append(rtt, d)
		agent = append(agent, res.Duration)
	}
	pings := make([]time.Duration, 0, runs)
	for i := 0; i < runs; i++ {
		t0 := time.Now()
		if err := sb.Ping(ctx); err != nil {
			return nil, fmt.Errorf("ping %d: %w", i+1, err)
		}
		pings = append(pings, time.Since(t0))
	}
	return &execResult{
		Warmup: warmup,
		Runs:   runs,
		RTT:    stats.Summarize(stats.Millis(rtt)),
		Agent:  stats.Summarize(stats.Millis(agent)),
		Ping:   stats.Summarize(stats.Millis(pings)),
	}, nil
}

// memResult is the host memory that idle sandboxes hold.
type memResult struct {
	Sandboxes int `json:"sandboxes"`
	// Supervisor is this process: its VmRSS before the sandboxes were
	// created and with them idle, after a GC in both cases.
	SupervisorBefore int64 `json:"supervisor_rss_before_bytes"`
	SupervisorAfter  int64 `json:"supervisor_rss_after_bytes"`
	// GoHeapGrowth is the supervisor's live Go heap growth (HeapInuse).
	GoHeapGrowth int64 `json:"supervisor_go_heap_growth_bytes"`
	// InSandbox is the sum over every sandbox process on the host (agent
	// and spawner) of its PSS, or VmRSS where PSS cannot be read.
	InSandbox int64 `json:"in_sandbox_bytes"`
	// Per sandbox: (total after - baseline) / Sandboxes and its two parts.
	PerSandbox           int64 `json:"per_sandbox_bytes"`
	SupervisorPerSandbox int64 `json:"supervisor_per_sandbox_bytes"`
	InSandboxPerSandbox  int64 `json:"in_sandbox_per_sandbox_bytes"`
	// Average per-process figures, for where the memory is.
	AgentPSS   int64   `json:"agent_pss_bytes"`
	AgentRSS   int64   `json:"agent_rss_bytes"`
	SpawnerPSS int64   `json:"spawner_pss_bytes"`
	SpawnerRSS int64   `json:"spawner_rss_bytes"`
	Processes  float64 `json:"processes_per_sandbox"`
	// Source is "pss" when every process's PSS was read, else "rss" or
	// "mixed".
	Source string `json:"source"`
	// KernelPerSandbox is the growth of system-wide Slab + PageTables +
	// KernelStack + Shmem per sandbox: kernel objects (namespaces, mounts,
	// the tmpfs root's files) that no process RSS shows. Informational:
	// other activity on the machine moves it too.
	KernelPerSandbox int64 `json:"kernel_per_sandbox_bytes"`
	// Sample lists the processes of the first sandbox.
	Sample []procMem `json:"sample_processes"`
	// Close is closing all the sandboxes, one after another.
	CloseAllMs float64 `json:"close_all_ms"`
}

func settle() {
	runtime.GC()
	debug.FreeOSMemory()
}

func heapInuse() int64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}

func measureMemory(ctx context.Context, cfg airlock.Config, n int, idle time.Duration) (_ *memResult, err error) {
	if n <= 0 {
		return nil, fmt.Errorf("need at least one sandbox")
	}
	r := &memResult{Sandboxes: n}
	settle()
	if r.SupervisorBefore, err = selfRSS(); err != nil {
		return nil, err
	}
	heap0 := heapInuse()
	mi0, _ := readMeminfo()

	sbs := make([]*airlock.Sandbox, 0, n)
	defer func() {
		for _, sb := range sbs {
			sb.Close()
		}
	}()
	for i := 0; i < n; i++ {
		sb, err := airlock.Create(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("create sandbox %d of %d: %w", i+1, n, err)
		}
		sbs = append(sbs, sb)
		if _, err := runTrue(ctx, sb); err != nil {
			return nil, fmt.Errorf("command in sandbox %d: %w", i+1, err)
		}
	}
	select {
	case <-time.After(idle):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	settle()
	if r.SupervisorAfter, err = selfRSS(); err != nil {
		return nil, err
	}
	r.GoHeapGrowth = heapInuse() - heap0
	mi1, _ := readMeminfo()

	var nproc, nPSS, nRSS int
	var agentPSS, agentRSS, spPSS, spRSS int64
	var nAgent, nSp int
	for i, sb := range sbs {
		pids := processTree(sb.PID())
		for j, pid := range pids {
			m, err := readProcMem(pid)
			if err != nil {
				continue // exited between the walk and the read
			}
			nproc++
			r.InSandbox += m.Charged
			if m.Source == "pss" {
				nPSS++
			} else {
				nRSS++
			}
			// The agent is the tree's root; the spawner its only
			// long-lived child.
			if j == 0 {
				agentPSS += m.PSS
				agentRSS += m.RSS
				nAgent++
			} else {
				spPSS += m.PSS
				spRSS += m.RSS
				nSp++
			}
			if i == 0 {
				r.Sample = append(r.Sample, m)
			}
		}
	}
	switch {
	case nRSS == 0:
		r.Source = "pss"
	case nPSS == 0:
		r.Source = "rss"
	default:
		r.Source = "mixed"
	}
	nn := int64(n)
	growth := r.SupervisorAfter - r.SupervisorBefore
	r.SupervisorPerSandbox = growth / nn
	r.InSandboxPerSandbox = r.InSandbox / nn
	r.PerSandbox = (growth + r.InSandbox) / nn
	r.Processes = float64(nproc) / float64(n)
	if nAgent > 0 {
		r.AgentPSS, r.AgentRSS = agentPSS/int64(nAgent), agentRSS/int64(nAgent)
	}
	if nSp > 0 {
		r.SpawnerPSS, r.SpawnerRSS = spPSS/int64(nSp), spRSS/int64(nSp)
	}
	r.KernelPerSandbox = (mi1.kernel() - mi0.kernel()) / nn

	t0 := time.Now()
	for _, sb := range sbs {
		if err := sb.Close(); err != nil {
			return nil, fmt.Errorf("close sandbox: %w", err)
		}
	}
	r.CloseAllMs = ms(time.Since(t0))
	sbs = nil
	return r, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
