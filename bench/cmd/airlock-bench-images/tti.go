//go:build linux

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	"github.com/airlock-sandbox/airlock"
)

// ttiResult is the time to interactive of sandboxes on one image.
type ttiResult struct {
	Image string  `json:"image"`
	Runs  int     `json:"runs"`
	P50MS float64 `json:"p50_ms"`
	P90MS float64 `json:"p90_ms"`
	// Ratio is this image's p50 over host's, in the same run.
	Ratio float64 `json:"ratio_to_host"`
	Error string  `json:"error,omitempty"`
}

// ttiGoal is the largest ratio of an image's time to interactive to
// host's that target allows.
const ttiGoal = 1.25

// buildAgent builds ./cmd/airlock-guest into dir, unless $AIRLOCK_AGENT
// names one.
func buildAgent(ctx context.Context, dir string) (string, error) {
	if p := os.Getenv("AIRLOCK_AGENT"); p != "" {
		return p, nil
	}
	out := filepath.Join(dir, "airlock-guest")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/airlock-guest")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the agent (run from the repository, or set AIRLOCK_AGENT): %v\n%s", err, b)
	}
	return out, nil
}

// measureTTI times runs starts of a sandbox on each image (host first)
// to the result of its first `true`, the images taken in turn so that
// the machine's drift falls on all alike, after warm untimed rounds.
func measureTTI(ctx context.Context, cacheDir, agent string, images []string, runs, warm int) []ttiResult {
	images = append([]string{"host"}, images...)
	times := make([][]time.Duration, len(images))
	errs := make([]error, len(images))
	one := func(i int) (time.Duration, error) {
		start := time.Now()
		sb, err := airlock.Create(ctx, airlock.Config{Image: images[i], ImageCacheDir: cacheDir, AgentPath: agent})
		if err != nil {
			return 0, err
		}
		defer sb.Close()
		res, err := sb.Run(ctx, airlock.Command{Argv: []string{"true"}, Dir: "/"})
		if err != nil {
			return 0, err
		}
		if res.ExitCode != 0 {
			return 0, fmt.Errorf("true exited %d: %s", res.ExitCode, res.Stderr)
		}
		return time.Since(start), nil
	}
	for r := -warm; r < runs; r++ {
		for k := range images {
			// Alternate the order each round.
			i := k
			if r%2 != 0 {
				i = len(images) - 1 - k
			}
			if errs[i] != nil {
				continue
			}
			d, err := one(i)
			if err != nil {
				errs[i] = err
				continue
			}
			if r >= 0 {
				times[i] = append(times[i], d)
			}
		}
	}
	out := make([]ttiResult, len(images))
	for i, name := range images {
		out[i] = ttiResult{Image: name, Runs: len(times[i])}
		if errs[i] != nil {
			out[i].Error = errs[i].Error()
		}
		if len(times[i]) == 0 {
			continue
		}
		slices.Sort(times[i])
		out[i].P50MS = ms(times[i][len(times[i])/2])
		out[i].P90MS = ms(times[i][len(times[i])*9/10])
	}
	for i := range out {
		if out[0].P50MS > 0 && out[i].P50MS > 0 {
			out[i].Ratio = out[i].P50MS / out[0].P50MS
		}
	}
	return out
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func writeTTITable(w io.Writer, rs []ttiResult) {
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| time to interactive (`Create` → result of `true`) | runs | p50 | p90 | ÷ host, p50 | goal | verdict |")
	fmt.Fprintln(w, "|---|--:|--:|--:|--:|---|---|")
	for _, r := range rs {
		if r.Runs == 0 {
			fmt.Fprintf(w, "| `%s` | 0 | | | | | failed: %s |\n", r.Image, r.Error)
			continue
		}
		goal, verdict := "", ""
		if r.Image != "host" {
			goal = fmt.Sprintf("≤ %.2fx", ttiGoal)
			verdict = "met"
			if r.Ratio > ttiGoal {
				verdict = "**not met**"
			}
		}
		fmt.Fprintf(w, "| `%s` | %d | %.1f ms | %.1f ms | %.2fx | %s | %s |\n", r.Image, r.Runs, r.P50MS, r.P90MS, r.Ratio, goal, verdict)
	}
}
