//go:build linux

package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/bench/internal/stats"
)

// params are the run counts actually used.
type params struct {
	TTIRuns       int     `json:"tti_runs"`
	ExecRuns      int     `json:"exec_runs"`
	ExecWarmup    int     `json:"exec_warmup"`
	IdleSandboxes int     `json:"idle_sandboxes"`
	IdleWaitMs    int64   `json:"idle_wait_ms"`
	RefRuns       int     `json:"ref_runs"`
	RefWarmup     int     `json:"ref_warmup"`
	RPCRuns       int     `json:"rpc_runs"`
	RPCWarmup     int     `json:"rpc_warmup"`
	Scale         float64 `json:"scale"`
}

// target is one goal with its verdict. Targets are reported, never
// enforced through the exit code. A target passes when its value is at
// most Limit, or, with HigherIsBetter, at least Limit.
type target struct {
	Name           string  `json:"name"`
	Metric         string  `json:"metric"`
	Unit           string  `json:"unit"`
	Limit          float64 `json:"limit"`
	HigherIsBetter bool    `json:"higher_is_better,omitempty"`
	Value          float64 `json:"value"`
	Measured       bool    `json:"measured"`
	Pass           bool    `json:"pass"`
}

// report is everything a run produced; it is also the JSON file.
type report struct {
	Timestamp    string   `json:"timestamp"`
	DurationSec  float64  `json:"duration_seconds"`
	Host         hostInfo `json:"host"`
	Agent        string   `json:"agent"`
	AgentBuilt   bool     `json:"agent_built"`
	AgentBuildMs float64  `json:"agent_build_ms,omitempty"`
	// Airlock is the airlock binary the rpc section drove.
	Airlock        string      `json:"airlock,omitempty"`
	AirlockBuilt   bool        `json:"airlock_built,omitempty"`
	AirlockBuildMs float64     `json:"airlock_build_ms,omitempty"`
	Params         params      `json:"params"`
	Targets        []target    `json:"targets"`
	TTI            *ttiResult  `json:"time_to_interactive,omitempty"`
	Exec           *execResult `json:"exec,omitempty"`
	Memory         *memResult  `json:"memory,omitempty"`
	RPC            *rpcResult  `json:"rpc,omitempty"`
	References     []refResult `json:"references,omitempty"`
	Phases         []refResult `json:"phase_probes,omitempty"`
	Errors         []string    `json:"errors,omitempty"`
}

const mib = 1 << 20

func (r *report) evaluate() {
	tti := target{Name: "time to interactive", Metric: "p50", Unit: "ms", Limit: 15}
	if r.TTI != nil {
		tti.Value, tti.Measured = r.TTI.TTI.P50, true
	}
	rtt := target{Name: "exec round trip", Metric: "p50", Unit: "ms", Limit: 1}
	if r.Exec != nil {
		rtt.Value, rtt.Measured = r.Exec.RTT.P50, true
	}
	mem := target{Name: "idle host memory per sandbox", Metric: "mean", Unit: "MiB", Limit: 8}
	if r.Memory != nil {
		mem.Value, mem.Measured = float64(r.Memory.PerSandbox)/mib, true
	}
	over := target{Name: "rpc overhead", Metric: "p50 ratio", Unit: "x", Limit: 1.3}
	wr := target{Name: "rpc write_file throughput", Metric: "median", Unit: "MB/s", Limit: 200, HigherIsBetter: true}
	rd := target{Name: "rpc read_file throughput", Metric: "median", Unit: "MB/s", Limit: 200, HigherIsBetter: true}
	if r.RPC != nil {
		over.Value, over.Measured = r.RPC.Ratio, r.RPC.Ratio > 0
		wr.Value, wr.Measured = r.RPC.RPCWrite.MBps, r.RPC.RPCWrite.MBps > 0
		rd.Value, rd.Measured = r.RPC.RPCRead.MBps, r.RPC.RPCRead.MBps > 0
	}
	r.Targets = nil
	for _, t := range []target{tti, rtt, mem, over, wr, rd} {
		if t.HigherIsBetter {
			t.Pass = t.Measured && t.Value >= t.Limit
		} else {
			t.Pass = t.Measured && t.Value <= t.Limit
		}
		r.Targets = append(r.Targets, t)
	}
}

func fmtMs(v float64) string {
	switch {
	case math.IsNaN(v):
		return "–"
	case v < 1:
		return fmt.Sprintf("%.3f ms", v)
	case v < 100:
		return fmt.Sprintf("%.2f ms", v)
	default:
		return fmt.Sprintf("%.0f ms", v)
	}
}

func fmtMiB(b int64) string { return fmt.Sprintf("%.2f MiB", float64(b)/mib) }

func fmtMBps(v float64) string {
	if v <= 0 || math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf("%.0f MB/s", v)
}

func verdict(t target) string {
	switch {
	case !t.Measured:
		return "not measured"
	case t.Pass:
		return "PASS"
	default:
		return "FAIL"
	}
}

// writeTable prints the report as Markdown, ready to paste into a README.
func (r *report) writeTable(w io.Writer) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	h := r.Host
	commit := h.Describe
	if commit == "" {
		commit = h.Commit
	}
	if commit == "" {
		commit = "unknown commit"
	}
	p("## airlock benchmark\n\n")
	p("airlock %s · %s · %s × %d cores · %s · %s · load %s → %s\n\n", commit, h.Kernel, h.CPUModel, h.Cores, h.GoVersion, r.Timestamp, h.LoadStart, h.LoadEnd)

	p("| target | measured | p95 | goal | verdict |\n|---|--:|--:|---|---|\n")
	for _, t := range r.Targets {
		val, p95 := "–", "–"
		switch t.Name {
		case "time to interactive":
			if r.TTI != nil {
				val, p95 = fmtMs(r.TTI.TTI.P50), fmtMs(r.TTI.TTI.P95)
			}
			p("| time to interactive: Create → first `true` result (%d runs) | %s | %s | p50 ≤ %g ms | %s |\n", r.Params.TTIRuns, val, p95, t.Limit, verdict(t))
		case "exec round trip":
			if r.Exec != nil {
				val, p95 = fmtMs(r.Exec.RTT.P50), fmtMs(r.Exec.RTT.P95)
			}
			p("| exec round trip of `true` in a running sandbox (%d runs) | %s | %s | p50 ≤ %g ms | %s |\n", r.Params.ExecRuns, val, p95, t.Limit, verdict(t))
		case "idle host memory per sandbox":
			if r.Memory != nil {
				val = fmtMiB(r.Memory.PerSandbox)
			}
			p("| host memory per idle sandbox (%d running) | %s | | ≤ %g MiB | %s |\n", r.Params.IdleSandboxes, val, t.Limit, verdict(t))
		case "rpc overhead":
			if t.Measured {
				val = fmt.Sprintf("%.2fx", t.Value)
				if r.RPC.Embed.P95 > 0 {
					p95 = fmt.Sprintf("%.2fx", r.RPC.RPC.P95/r.RPC.Embed.P95)
				}
			}
			p("| `airlock rpc` overhead: `exec` of `true` through `airlock rpc` ÷ `Run(true)` through the embed API (%d runs each, alternated) | %s | %s | p50 ratio ≤ %gx | %s |\n", r.Params.RPCRuns, val, p95, t.Limit, verdict(t))
		case "rpc write_file throughput":
			if t.Measured {
				val = fmtMBps(t.Value)
			}
			p("| `write_file` of %d MiB of random bytes through `airlock rpc` (median of %d) | %s | | ≥ %g MB/s | %s |\n", rpcFileBytes/mib, rpcFileRounds, val, t.Limit, verdict(t))
		case "rpc read_file throughput":
			if t.Measured {
				val = fmtMBps(t.Value)
			}
			p("| `read_file` of the same %d MiB through `airlock rpc` (median of %d) | %s | | ≥ %g MB/s | %s |\n", rpcFileBytes/mib, rpcFileRounds, val, t.Limit, verdict(t))
		}
	}
	p("\n")

	if r.TTI != nil || r.Exec != nil || r.Memory != nil {
		p("### Breakdown\n\n| measurement | p50 | p95 |\n|---|--:|--:|\n")
		row := func(name string, s stats.Summary) {
			p("| %s | %s | %s |\n", name, fmtMs(s.P50), fmtMs(s.P95))
		}
		if t := r.TTI; t != nil {
			row("`airlock.Create`", t.Create)
			row("first `Run(true)` after Create", t.FirstRun)
			row("… of which in the agent (spawn → exit)", t.FirstRunAgent)
			row("`Close` (not part of TTI)", t.Close)
			p("| first Create + Run of the process (cold, not in the stats) | %s | |\n", fmtMs(t.ColdMs))
		}
		if e := r.Exec; e != nil {
			row("exec: in the agent (spawn → exit status)", e.Agent)
			row("exec: `Ping`, a no-op request round trip", e.Ping)
		}
		if m := r.Memory; m != nil {
			p("| memory: supervisor VmRSS growth per sandbox | %s | |\n", fmtMiB(m.SupervisorPerSandbox))
			p("| memory: in-sandbox agent + spawner (%s) per sandbox | %s | |\n", strings.ToUpper(m.Source), fmtMiB(m.InSandboxPerSandbox))
			p("| memory: agent PSS / RSS | %s / %s | |\n", fmtMiB(m.AgentPSS), fmtMiB(m.AgentRSS))
			p("| memory: spawner PSS / RSS | %s / %s | |\n", fmtMiB(m.SpawnerPSS), fmtMiB(m.SpawnerRSS))
			p("| memory: kernel objects per sandbox (system-wide delta, informational) | %s | |\n", fmtMiB(m.KernelPerSandbox))
		}
		p("\n")
	}

	if x := r.RPC; x != nil {
		p("### `airlock rpc` against the embed API (%d runs each, alternated one to one)\n\n", x.Runs)
		p("| measurement | p50 | p95 |\n|---|--:|--:|\n")
		row := func(name string, s stats.Summary) {
			p("| %s | %s | %s |\n", name, fmtMs(s.P50), fmtMs(s.P95))
		}
		row("embed API: `sb.Run(ctx, airlock.Command{Argv: []string{\"true\"}})`", x.Embed)
		row("… of which in the agent (spawn → exit)", x.EmbedAgent)
		row("`airlock rpc`: `rsb.Run(ctx, api.ExecParams{Argv: []string{\"true\"}})`", x.RPC)
		row("added by `airlock rpc`: each RPC run minus the embed run before it", x.Added)
		p("| `client.Start` (the `airlock rpc` process up to its first answer), once | %s | |\n", fmtMs(x.StartMs))
		p("| `create` through `airlock rpc`, once | %s | |\n", fmtMs(x.CreateMs))
		p("\n")
		p("| transfer of %d MiB of random bytes (%d rounds) | throughput (median round) | median round | slowest round |\n|---|--:|--:|--:|\n", x.FileBytes/mib, x.FileRounds)
		trow := func(name string, t throughput) {
			slowest := math.NaN()
			if len(t.RoundsMs) > 0 {
				slowest = slices.Max(t.RoundsMs)
			}
			p("| %s | %s | %s | %s |\n", name, fmtMBps(t.MBps), fmtMs(t.MedianMs), fmtMs(slowest))
		}
		trow("`write_file` through `airlock rpc` (`rsb.WriteFile`)", x.RPCWrite)
		trow("`read_file` through `airlock rpc` (`rsb.ReadFile`)", x.RPCRead)
		trow("`WriteFile` through the embed API (informational)", x.EmbedWrite)
		trow("`ReadFile` through the embed API (informational)", x.EmbedRead)
		p("\n")
		if len(x.Notes) > 0 {
			p("Degraded confinement of the sandbox made through `airlock rpc`:\n\n")
			for _, n := range x.Notes {
				p("- %s\n", n)
			}
			p("\n")
		}
	}

	if len(r.References) > 0 {
		p("### Reference points (same run; wall time from start to exit, %d runs each)\n\n", r.Params.RefRuns)
		p("| what | p50 | p95 | command |\n|---|--:|--:|---|\n")
		if r.TTI != nil {
			p("| **airlock** sandbox start + first command | %s | %s | `Create` + `Run(true)` |\n", fmtMs(r.TTI.TTI.P50), fmtMs(r.TTI.TTI.P95))
		}
		if r.Exec != nil {
			p("| **airlock** command in a running sandbox | %s | %s | `Run(true)` |\n", fmtMs(r.Exec.RTT.P50), fmtMs(r.Exec.RTT.P95))
		}
		for _, ref := range r.References {
			if ref.Skipped != "" {
				p("| %s | skipped | | %s |\n", ref.Name, ref.Skipped)
				continue
			}
			p("| %s | %s | %s | `%s` |\n", ref.Name, fmtMs(ref.Wall.P50), fmtMs(ref.Wall.P95), ref.Command)
		}
		p("\n")
	}

	if len(r.Phases) > 0 {
		p("### Phase probes (pieces of a sandbox start and of Run, each timed alone, %d runs each)\n\n", r.Params.RefRuns)
		p("| probe | p50 | p95 | what |\n|---|--:|--:|---|\n")
		for _, ref := range r.Phases {
			if ref.Skipped != "" {
				p("| %s | skipped | | %s |\n", ref.Name, ref.Skipped)
				continue
			}
			p("| %s | %s | %s | %s |\n", ref.Name, fmtMs(ref.Wall.P50), fmtMs(ref.Wall.P95), ref.Command)
		}
		p("\n")
	}

	if r.TTI != nil && len(r.TTI.Notes) > 0 {
		p("Degraded confinement on this machine (the sandboxes measured lacked this):\n\n")
		for _, n := range r.TTI.Notes {
			p("- %s\n", n)
		}
		p("\n")
	}
	if len(r.Errors) > 0 {
		p("Errors:\n\n")
		for _, e := range r.Errors {
			p("- %s\n", e)
		}
		p("\n")
	}
	p("Targets are reported, not enforced. Total run time %.1f s.\n", r.DurationSec)
}
