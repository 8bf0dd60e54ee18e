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
	TTIRuns       int   `json:"tti_runs"`
	ExecRuns      int   `json:"exec_runs"`
	ExecWarmup    int   `json:"exec_warmup"`
	IdleSandboxes int   `json:"idle_sandboxes"`
	IdleWaitMs    int64 `json:"idle_wait_ms"`
	RefRuns       int   `json:"ref_runs"`
	RefWarmup     int   `json:"ref_warmup"`
	RPCRuns       int   `json:"rpc_runs"`
	RPCWarmup     int   `json:"rpc_warmup"`
	// The egress section's: keep-alive requests per protocol and way,
	// new connections per way, names never seen before, download size.
	EgressRequests  int   `json:"egress_requests"`
	EgressConns     int   `json:"egress_conns"`
	EgressNames     int   `json:"egress_names"`
	EgressBulkBytes int64 `json:"egress_bulk_bytes"`
	// The baseline section's: sandboxes and commands per build, and the
	// untimed pairs before each series.
	BaselineTTIRuns  int     `json:"baseline_tti_runs"`
	BaselineExecRuns int     `json:"baseline_exec_runs"`
	BaselineWarmup   int     `json:"baseline_warmup"`
	Scale            float64 `json:"scale"`
}

// target is one goal with its verdict. Targets are reported, never
// enforced through the exit code. A target passes when its value is at
// most Limit, or, with HigherIsBetter, at least Limit, or, with Equal,
// exactly Limit.
type target struct {
	Name           string  `json:"name"`
	Metric         string  `json:"metric"`
	Unit           string  `json:"unit"`
	Limit          float64 `json:"limit"`
	HigherIsBetter bool    `json:"higher_is_better,omitempty"`
	Equal          bool    `json:"equal,omitempty"`
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
	// Airlock is the airlock binary the rpc section drove, and the
	// baseline section's build under test.
	Airlock        string  `json:"airlock,omitempty"`
	AirlockBuilt   bool    `json:"airlock_built,omitempty"`
	AirlockBuildMs float64 `json:"airlock_build_ms,omitempty"`
	// HTTPClient is the client binary the egress section ran.
	HTTPClient      string          `json:"httpclient,omitempty"`
	HTTPClientBuilt bool            `json:"httpclient_built,omitempty"`
	Params          params          `json:"params"`
	Targets         []target        `json:"targets"`
	TTI             *ttiResult      `json:"time_to_interactive,omitempty"`
	Exec            *execResult     `json:"exec,omitempty"`
	Memory          *memResult      `json:"memory,omitempty"`
	RPC             *rpcResult      `json:"rpc,omitempty"`
	Baseline        *baselineResult `json:"baseline,omitempty"`
	Egress          *egressResult   `json:"egress,omitempty"`
	References      []refResult     `json:"references,omitempty"`
	Phases          []refResult     `json:"phase_probes,omitempty"`
	Errors          []string        `json:"errors,omitempty"`
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
	egHTTPS := target{Name: "egress bulk https", Metric: "airlock ÷ direct, median", Unit: "%", Limit: 70, HigherIsBetter: true}
	egHTTP := target{Name: "egress bulk http", Metric: "airlock ÷ direct, median", Unit: "%", Limit: 70, HigherIsBetter: true}
	egKAS := target{Name: "egress keep-alive https", Metric: "added p50", Unit: "ms", Limit: 1}
	egKA := target{Name: "egress keep-alive http", Metric: "added p50", Unit: "ms", Limit: 1}
	egMint := target{Name: "egress leaf mints", Metric: "mints", Unit: "leaves", Equal: true}
	if e := r.Egress; e != nil && e.Skipped == "" {
		if b := e.BulkHTTPS; b != nil {
			egHTTPS.Value, egHTTPS.Measured = b.Ratio, b.Ratio > 0
		}
		if b := e.BulkHTTP; b != nil {
			egHTTP.Value, egHTTP.Measured = b.Ratio, b.Ratio > 0
		}
		if l := e.HTTPSKeepAlive; l != nil {
			egKAS.Value, egKAS.Measured = l.AddedP50, l.Airlock.Latency.N > 0
		}
		if l := e.HTTPKeepAlive; l != nil {
			egKA.Value, egKA.Measured = l.AddedP50, l.Airlock.Latency.N > 0
		}
		// The limit is the number of distinct names: one leaf each.
		egMint.Limit = float64(e.Leaves.Names)
		egMint.Value, egMint.Measured = float64(e.Leaves.Mints()), e.Leaves.MintsMeasured && e.Leaves.Names > 0
	}
	r.Targets = nil
	for _, t := range []target{tti, rtt, mem, over, wr, rd, egHTTPS, egHTTP, egKAS, egKA, egMint} {
		switch {
		case t.Equal:
			t.Pass = t.Measured && t.Value == t.Limit
		case t.HigherIsBetter:
			t.Pass = t.Measured && t.Value >= t.Limit
		default:
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

// fmtAdded is a difference of times, with its sign.
func fmtAdded(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	if v < 0 {
		return "−" + fmtMs(-v)
	}
	return "+" + fmtMs(v)
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

// treeName says which code the build under test is: the module's commit
// with git describe, "-dirty" included, or the -airlock binary's path
// when the benchmark did not build it.
func (r *report) treeName() string {
	switch {
	case r.Airlock != "" && !r.AirlockBuilt:
		return "-airlock " + r.Airlock
	case r.Host.Describe != "":
		return r.Host.Describe
	case r.Host.Commit != "":
		return r.Host.Commit
	}
	return "this tree"
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
		case "egress bulk https", "egress bulk http":
			scheme := strings.TrimPrefix(t.Name, "egress bulk ")
			if t.Measured {
				val = fmt.Sprintf("%.0f %%", t.Value)
			}
			p("| egress: %s download of %d MiB, MB/s through airlock ÷ direct (median of %d each, alternated) | %s | | ≥ %g %% | %s |\n", strings.ToUpper(scheme), r.Params.EgressBulkBytes/mib, egressBulkRounds, val, t.Limit, verdict(t))
		case "egress keep-alive https", "egress keep-alive http":
			scheme := strings.TrimPrefix(t.Name, "egress keep-alive ")
			if t.Measured {
				l := r.Egress.HTTPKeepAlive
				if scheme == "https" {
					l = r.Egress.HTTPSKeepAlive
				}
				val, p95 = fmtAdded(t.Value), fmtAdded(l.Airlock.Latency.P95-l.Direct.Latency.P95)
			}
			n := r.Params.EgressRequests
			if r.Egress != nil && r.Egress.Requests > 0 {
				n = r.Egress.Requests
			}
			p("| egress: latency added by airlock to a %s request on a kept-alive connection (%d each way, alternated) | %s | %s | p50 ≤ %g ms | %s |\n", strings.ToUpper(scheme), n, val, p95, t.Limit, verdict(t))
		case "egress leaf mints":
			goal := "one per name"
			if t.Measured {
				val = fmt.Sprintf("%.0f", t.Value)
				goal = fmt.Sprintf("= %.0f, one per name", t.Limit)
			}
			conns := 0
			if r.Egress != nil {
				conns = r.Egress.Leaves.TLSConnections
			}
			p("| egress: TLS leaves the interception CA minted, over %d TLS connections from the sandbox | %s | | %s | %s |\n", conns, val, goal, verdict(t))
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
		writeList(w, "Degraded confinement of the sandbox made through `airlock rpc`", x.Notes)
	}

	if b := r.Baseline; b != nil {
		writeBaseline(w, b)
	}

	if e := r.Egress; e != nil {
		r.writeEgress(w, e)
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

	if r.TTI != nil {
		writeList(w, "Degraded confinement on this machine (the sandboxes measured lacked this)", r.TTI.Notes)
	}
	writeList(w, "Errors", r.Errors)
	p("Targets are reported, not enforced. Total run time %.1f s.\n", r.DurationSec)
}

// writeEgress prints the egress section's table.
func (r *report) writeEgress(w io.Writer, e *egressResult) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("### Egress: the same HTTP client directly and through airlock\n\n")
	if e.Skipped != "" {
		p("Skipped: %s\n\n", e.Skipped)
		return
	}
	p("Local servers in a network namespace of the benchmark's own; HTTP/1.1; %d rounds, alternated, of each series. ", e.Rounds)
	p("The sandbox took %s to create, network included.\n\n", fmtMs(e.CreateMs))
	p("| measurement | direct | through airlock | airlock − direct |\n|---|--:|--:|--:|\n")
	three := func(s stats.Summary) string {
		return fmtMs(s.P50) + " / " + fmtMs(s.P90) + " / " + fmtMs(s.P99)
	}
	two := func(s stats.Summary) string { return fmtMs(s.P50) + " / " + fmtMs(s.P90) }
	ka := func(scheme string, l *egressLatency) {
		if l == nil {
			return
		}
		ratio := "–"
		if l.Direct.RPS > 0 {
			ratio = fmt.Sprintf("%.0f %% of direct", 100*l.Airlock.RPS/l.Direct.RPS)
		}
		p("| %s keep-alive, one connection, %d requests of `/` one after another: requests/s | %.0f | %.0f | %s |\n", scheme, e.Requests, l.Direct.RPS, l.Airlock.RPS, ratio)
		p("| … latency p50 / p90 / p99 | %s | %s | %s p50, %s p99 |\n", three(l.Direct.Latency), three(l.Airlock.Latency), fmtAdded(l.AddedP50), fmtAdded(l.Airlock.Latency.P99-l.Direct.Latency.P99))
	}
	ka("HTTP", e.HTTPKeepAlive)
	ka("HTTPS", e.HTTPSKeepAlive)
	phases := func(dns, connect, handshake *egressLatency) {
		for _, ph := range []struct {
			name string
			l    *egressLatency
		}{{"name lookup", dns}, {"TCP connect", connect}, {"TLS handshake", handshake}} {
			if ph.l != nil {
				p("| … of which %s: p50 / p90 | %s | %s | %s p50 |\n", ph.name, two(ph.l.Direct.Latency), two(ph.l.Airlock.Latency), fmtAdded(ph.l.AddedP50))
			}
		}
	}
	if l := e.NewConn; l != nil {
		p("| HTTPS on a new connection each time (lookup + TCP + TLS + request), %d: p50 / p90 | %s | %s | %s p50 |\n", e.Conns, two(l.Direct.Latency), two(l.Airlock.Latency), fmtAdded(l.AddedP50))
		phases(e.NewConnDNS, e.NewConnConnect, e.NewConnTLS)
	}
	if l := e.NewName; l != nil {
		p("| HTTPS first connection to a name never seen before, %d names: p50 / p90 | %s | %s | %s p50 |\n", e.Names, two(l.Direct.Latency), two(l.Airlock.Latency), fmtAdded(l.AddedP50))
		phases(e.NewNameDNS, e.NewNameConnect, e.NewNameTLS)
	}
	bulk := func(scheme string, b *egressBulk) {
		if b == nil {
			return
		}
		p("| %s download of %d MiB (`/bytes`), median of %d | %s | %s | %.0f %% of direct |\n", scheme, e.BulkBytes/mib, e.BulkRounds, fmtMBps(b.Direct.MBps), fmtMBps(b.Airlock.MBps), b.Ratio)
		if b.Slirp != nil {
			p("| … the same through slirp4netns instead, which forwards without inspecting (MTU 65520) | %s | %s | %.0f %% of direct |\n", fmtMBps(b.Direct.MBps), fmtMBps(b.Slirp.MBps), b.SlirpRatio)
		}
	}
	bulk("HTTPS", e.BulkHTTPS)
	bulk("HTTP", e.BulkHTTP)
	p("\n")
	if e.SlirpSkipped != "" && (e.BulkHTTPS != nil || e.BulkHTTP != nil) {
		p("The downloads were not also measured through slirp4netns: %s.\n\n", e.SlirpSkipped)
	}

	l := e.Leaves
	mints := "not measured (the sandbox's CA was not found)"
	if l.MintsMeasured {
		mints = fmt.Sprintf("%d (%d before the first request, %d after the last)", l.Mints(), l.MintsBefore, l.MintsAfter)
	}
	p("Leaf certificates: the interception CA minted %s for %d distinct names over %d TLS connections from the sandbox; the client there got %d distinct leaves.\n\n", mints, l.Names, l.TLSConnections, l.LeavesSeen)

	var spread []string
	add := func(name string, xs []float64, f func(float64) string) {
		if len(xs) == 0 {
			return
		}
		var parts []string
		for _, x := range xs {
			parts = append(parts, f(x))
		}
		spread = append(spread, name+": "+strings.Join(parts, ", "))
	}
	pct := func(v float64) string { return fmt.Sprintf("%.0f %%", v) }
	if x := e.HTTPKeepAlive; x != nil {
		add("HTTP keep-alive added p50", x.RoundAddedP50, fmtAdded)
	}
	if x := e.HTTPSKeepAlive; x != nil {
		add("HTTPS keep-alive added p50", x.RoundAddedP50, fmtAdded)
	}
	if x := e.NewConn; x != nil {
		add("new connection added p50", x.RoundAddedP50, fmtAdded)
	}
	if x := e.BulkHTTPS; x != nil {
		add("HTTPS download airlock ÷ direct", x.RoundRatio, pct)
	}
	if x := e.BulkHTTP; x != nil {
		add("HTTP download airlock ÷ direct", x.RoundRatio, pct)
	}
	writeList(w, "Round by round", spread)
	writeList(w, "Degraded confinement of the egress sandbox", e.Notes)
}

// writeList writes a titled bullet list of items, or nothing when there
// are none.
func writeList(w io.Writer, title string, items []string) {
	if len(items) == 0 {
		return
	}
	fmt.Fprintf(w, "%s:\n\n", title)
	for _, it := range items {
		fmt.Fprintf(w, "- %s\n", it)
	}
	fmt.Fprint(w, "\n")
}
