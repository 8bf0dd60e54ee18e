//go:build linux

package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/bench/internal/stats"
	"github.com/airlock-sandbox/airlock/client"
)

const (
	// rpcFileBytes is the file written and read back through RPC.
	rpcFileBytes = 64 << 20
	// rpcFileRounds is how many times each transfer is timed; the median
	// round is reported.
	rpcFileRounds = 3
	// rpcFilePath is where the file goes inside the sandboxes.
	rpcFilePath = "/workspace/blob"
)

// rpcResult compares a sandbox driven through `airlock rpc` (package
// client) with one driven through the embed API in this process.
type rpcResult struct {
	Warmup int `json:"warmup"`
	Runs   int `json:"runs"`
	// StartMs is client.Start (the `airlock rpc` subprocess up to its
	// first answer) and CreateMs the "create" call that follows.
	StartMs  float64 `json:"client_start_ms"`
	CreateMs float64 `json:"rpc_create_ms"`
	// Embed is sb.Run of `true` through the embed API and RPC
	// client.Sandbox.Run of the same command through `airlock rpc`,
	// alternated one to one, call to result, in milliseconds.
	Embed stats.Summary `json:"embed_exec_ms"`
	RPC   stats.Summary `json:"rpc_exec_ms"`
	// EmbedAgent is the agent's own time for the embed runs (spawn
	// request to exit status). The RPC result carries that time in whole
	// milliseconds only, too coarse for a command this short.
	EmbedAgent stats.Summary `json:"embed_exec_agent_ms"`
	// Added is, pair by pair, the RPC run minus the embed run next to it.
	Added stats.Summary `json:"rpc_added_ms"`
	// Ratio is RPC.P50 / Embed.P50: the target.
	Ratio float64 `json:"p50_ratio"`
	// File transfers of FileBytes random bytes, FileRounds times each.
	FileBytes  int64      `json:"file_bytes"`
	FileRounds int        `json:"file_rounds"`
	RPCWrite   throughput `json:"rpc_write_file"`
	RPCRead    throughput `json:"rpc_read_file"`
	EmbedWrite throughput `json:"embed_write_file"`
	EmbedRead  throughput `json:"embed_read_file"`
	// Isolation and Notes are what the server reported for its sandbox.
	Isolation string   `json:"rpc_isolation,omitempty"`
	Notes     []string `json:"rpc_notes,omitempty"`
	CloseMs   float64  `json:"close_ms"`
}

// throughput is one file transfer timed over several rounds.
type throughput struct {
	RoundsMs []float64 `json:"rounds_ms"`
	MedianMs float64   `json:"median_ms"`
	// MBps is bytes / median round, in 10^6 bytes per second.
	MBps float64 `json:"mb_per_s"`
}

func newThroughput(size int64, rounds []time.Duration) throughput {
	t := throughput{RoundsMs: stats.Millis(rounds)}
	t.MedianMs = stats.Percentile(t.RoundsMs, 50)
	if t.MedianMs > 0 {
		t.MBps = float64(size) / 1e6 / (t.MedianMs / 1e3)
	}
	return t
}

// rpcTrue runs `true` through `airlock rpc` in sb.
func rpcTrue(ctx context.Context, sb *client.Sandbox) error {
	res, err := sb.Run(ctx, api.ExecParams{Argv: []string{"true"}})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("true exited with %d (stderr %q)", res.ExitCode, res.Stderr)
	}
	return nil
}

// measureRPC runs the "rpc" section: the cost `airlock rpc` adds to a
// command, and how fast whole files go through it.
func measureRPC(ctx context.Context, cfg airlock.Config, airlockBin, home string, warmup, runs int) (_ *rpcResult, err error) {
	r := &rpcResult{Warmup: warmup, Runs: runs, FileBytes: rpcFileBytes, FileRounds: rpcFileRounds}

	t0 := time.Now()
	c, err := client.Start(ctx, client.Options{
		Binary: airlockBin,
		Env:    append(os.Environ(), "AIRLOCK_AGENT="+cfg.AgentPath, "AIRLOCK_HOME="+home),
	})
	if err != nil {
		return nil, fmt.Errorf("start airlock rpc: %w", err)
	}
	r.StartMs = ms(time.Since(t0))
	defer func() {
		if cerr := c.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close airlock rpc: %w", cerr)
		}
	}()
	t0 = time.Now()
	rsb, err := c.Create(ctx, api.CreateParams{})
	if err != nil {
		return nil, fmt.Errorf("create sandbox through RPC: %w", err)
	}
	r.CreateMs = ms(time.Since(t0))
	// On an early return, closing the client tears this sandbox down.
	r.Isolation, r.Notes = rsb.Isolation(), rsb.Notes()

	sb, err := airlock.Create(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	sbOpen := true
	defer func() {
		if sbOpen {
			sb.Close()
		}
	}()

	for i := 0; i < warmup; i++ {
		if _, err := runTrue(ctx, sb); err != nil {
			return nil, fmt.Errorf("warm-up command (embed): %w", err)
		}
		if err := rpcTrue(ctx, rsb); err != nil {
			return nil, fmt.Errorf("warm-up command (rpc): %w", err)
		}
	}

	// One embed run, then one RPC run, and again: whatever else the
	// machine does drifts over both alike, so it mostly cancels out of
	// the ratio.
	embed := make([]time.Duration, 0, runs)
	embedAgent := make([]time.Duration, 0, runs)
	viaRPC := make([]time.Duration, 0, runs)
	added := make([]float64, 0, runs)
	for i := 0; i < runs; i++ {
		t0 := time.Now()
		res, err := runTrue(ctx, sb)
		de := time.Since(t0)
		if err != nil {
			return nil, fmt.Errorf("command %d (embed): %w", i+1, err)
		}
		t0 = time.Now()
		err = rpcTrue(ctx, rsb)
		dr := time.Since(t0)
		if err != nil {
			return nil, fmt.Errorf("command %d (rpc): %w", i+1, err)
		}
		embed, embedAgent = append(embed, de), append(embedAgent, res.Duration)
		viaRPC = append(viaRPC, dr)
		added = append(added, ms(dr-de))
	}
	r.Embed = stats.Summarize(stats.Millis(embed))
	r.EmbedAgent = stats.Summarize(stats.Millis(embedAgent))
	r.RPC = stats.Summarize(stats.Millis(viaRPC))
	r.Added = stats.Summarize(added)
	if r.Embed.P50 > 0 {
		r.Ratio = r.RPC.P50 / r.Embed.P50
	}

	// Random bytes, so that nothing on the way can compress them; a
	// fixed seed makes every run move the same file.
	data := make([]byte, rpcFileBytes)
	rand.NewChaCha8([32]byte{'a', 'i', 'r', 'l', 'o', 'c', 'k'}).Read(data)
	var rw, rr, ew, er []time.Duration
	timed := func(ds *[]time.Duration, f func() error) error {
		t0 := time.Now()
		if err := f(); err != nil {
			return err
		}
		*ds = append(*ds, time.Since(t0))
		return nil
	}
	check := func(what string, got []byte) error {
		if !bytes.Equal(got, data) {
			return fmt.Errorf("%s returned %d bytes that differ from the %d written", what, len(got), len(data))
		}
		return nil
	}
	for i := 0; i < rpcFileRounds; i++ {
		var got []byte
		if err := timed(&rw, func() error { return rsb.WriteFile(ctx, rpcFilePath, data, 0o644) }); err != nil {
			return nil, fmt.Errorf("write_file through RPC: %w", err)
		}
		if err := timed(&rr, func() (err error) { got, err = rsb.ReadFile(ctx, rpcFilePath); return err }); err != nil {
			return nil, fmt.Errorf("read_file through RPC: %w", err)
		}
		if err := check("read_file through RPC", got); err != nil {
			return nil, err
		}
		got = nil
		if err := timed(&ew, func() error { return sb.WriteFile(ctx, rpcFilePath, data, 0o644) }); err != nil {
			return nil, fmt.Errorf("WriteFile: %w", err)
		}
		if err := timed(&er, func() (err error) { got, err = sb.ReadFile(ctx, rpcFilePath); return err }); err != nil {
			return nil, fmt.Errorf("ReadFile: %w", err)
		}
		if err := check("ReadFile", got); err != nil {
			return nil, err
		}
	}
	r.RPCWrite = newThroughput(rpcFileBytes, rw)
	r.RPCRead = newThroughput(rpcFileBytes, rr)
	r.EmbedWrite = newThroughput(rpcFileBytes, ew)
	r.EmbedRead = newThroughput(rpcFileBytes, er)

	t0 = time.Now()
	if err := rsb.Close(ctx); err != nil {
		return nil, fmt.Errorf("close sandbox through RPC: %w", err)
	}
	sbOpen = false
	if err := sb.Close(); err != nil {
		return nil, fmt.Errorf("close sandbox: %w", err)
	}
	r.CloseMs = ms(time.Since(t0))
	return r, nil
}
