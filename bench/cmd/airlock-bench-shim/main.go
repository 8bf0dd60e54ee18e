//go:build linux

// Command airlock-bench-shim measures airlock's containerd shim next to
// Debian's runc under the same containerd, and next to `airlock run`
// directly, in one run: the time from starting `ctr run` (or `airlock
// run`) to the command's first output, on the same busybox image. It
// starts a containerd of its own on a private socket, prints a Markdown
// table and writes the numbers as JSON.
//
//	sudo go run ./bench/cmd/airlock-bench-shim [-runs 20] [-bin bin] [-json FILE]
//
// -bin is a folder holding containerd-shim-airlock-v2 (make shim),
// airlock and airlock-guest (make build). See bench/README.md.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/airlock-sandbox/airlock/bench/internal/stats"
	"github.com/airlock-sandbox/airlock/internal/testbin"
)

const image = "airlock.bench/busybox:latest"

type series struct {
	What    string    `json:"what"`
	Samples []float64 `json:"samples_ms"`
	P50     float64   `json:"p50_ms"`
	P95     float64   `json:"p95_ms"`
}

type result struct {
	When   time.Time `json:"when"`
	Series []*series `json:"series"`
	// ShimOverRunc is the shim's p50 over runc's.
	ShimOverRunc float64 `json:"shim_over_runc_p50"`
}

func main() {
	var (
		runs     = flag.Int("runs", 20, "runs of each way to start the command")
		binDir   = flag.String("bin", "bin", "the `folder` holding containerd-shim-airlock-v2, airlock and airlock-guest")
		jsonPath = flag.String("json", filepath.Join("bench", "results", "shim-latest.json"), "write the numbers as JSON to `FILE` (\"-\" for none)")
		timeout  = flag.Duration("timeout", 20*time.Minute, "give up after this long")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if err := run(ctx, *runs, *binDir, *jsonPath); err != nil {
		fmt.Fprintln(os.Stderr, "airlock-bench-shim:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, runs int, binDir, jsonPath string) error {
	if os.Geteuid() != 0 {
		return errors.New("containerd runs as root: run it with sudo")
	}
	bin, err := filepath.Abs(binDir)
	if err != nil {
		return err
	}
	for _, f := range []string{"containerd-shim-airlock-v2", "airlock", "airlock-guest"} {
		if _, err := os.Stat(filepath.Join(bin, f)); err != nil {
			return fmt.Errorf("%s: run make build shim first, or give -bin: %w", f, err)
		}
	}
	dir, err := os.MkdirTemp("", "airlock-bench-shim-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	home := filepath.Join(dir, "airlock")
	env := []string{"PATH=" + bin + ":" + os.Getenv("PATH"), "AIRLOCK_AGENT=" + filepath.Join(bin, "airlock-guest"), "AIRLOCK_HOME=" + home,
		"AIRLOCK_SHIM_CONFIG=" + filepath.Join(dir, "shim.json")}
	if err := os.WriteFile(filepath.Join(dir, "shim.json"), []byte("{}"), 0o644); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "starting containerd and importing the image")
	c, err := testbin.StartContainerd(dir, env...)
	if err != nil {
		return err
	}
	defer c.Stop()
	if err := c.ImportBusybox(dir, image, v1.Config{Cmd: []string{"sh"}}); err != nil {
		return err
	}
	layout, err := testbin.BusyboxLayout(filepath.Join(dir, "layout"), "latest", v1.Config{Cmd: []string{"sh"}})
	if err != nil {
		return err
	}
	cache := filepath.Join(dir, "cache")
	ways := []struct {
		what string
		argv func(i int) []string
	}{
		{"ctr run, runc", func(i int) []string {
			return []string{"ctr", "--address", c.Address, "run", "--rm", image, "runc" + strconv.Itoa(i), "echo", "first"}
		}},
		{"ctr run, airlock shim (process)", func(i int) []string {
			return []string{"ctr", "--address", c.Address, "run", "--rm", "--runtime", "io.containerd.airlock.v2", image, "airlock" + strconv.Itoa(i), "echo", "first"}
		}},
		{"airlock run (process)", func(int) []string {
			return []string{filepath.Join(bin, "airlock"), "run", "--image", layout, "--", "echo", "first"}
		}},
	}
	cmdEnv := append(c.Env, "AIRLOCK_CACHE_DIR="+cache)
	r := &result{When: time.Now()}
	for _, w := range ways {
		s := &series{What: w.what}
		// One run first, not counted: the image reaches airlock's cache,
		// and every binary the page cache.
		for i := -1; i < runs; i++ {
			d, err := firstOutput(ctx, cmdEnv, w.argv(i+1))
			if err != nil {
				return fmt.Errorf("%s: %w", w.what, err)
			}
			if i >= 0 {
				s.Samples = append(s.Samples, float64(d)/float64(time.Millisecond))
			}
		}
		sum := stats.Summarize(s.Samples)
		s.P50, s.P95 = sum.P50, sum.P95
		r.Series = append(r.Series, s)
		fmt.Fprintf(os.Stderr, "%s: p50 %.1f ms\n", w.what, s.P50)
	}
	r.ShimOverRunc = r.Series[1].P50 / r.Series[0].P50
	fmt.Println("| from | to first output, p50 | p95 | runs |")
	fmt.Println("|---|--:|--:|--:|")
	for _, s := range r.Series {
		fmt.Printf("| %s | %.1f ms | %.1f ms | %d |\n", s.What, s.P50, s.P95, len(s.Samples))
	}
	fmt.Printf("\nthe shim's p50 is %.2fx runc's (target: at most 1.5x)\n", r.ShimOverRunc)
	if jsonPath == "-" {
		return nil
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(jsonPath), 0o755); err != nil {
		return err
	}
	return os.WriteFile(jsonPath, append(b, '\n'), 0o644)
}

// firstOutput runs argv and returns the time from its start to its first
// line of output; the command must print "first" and exit 0.
func firstOutput(ctx context.Context, env, argv []string) (time.Duration, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = env
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	var stderr limited
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	line, rerr := bufio.NewReader(out).ReadString('\n')
	took := time.Since(start)
	if err := cmd.Wait(); err != nil {
		return 0, fmt.Errorf("%v: %w: %s", argv, err, stderr.b)
	}
	if rerr != nil || line != "first\n" {
		return 0, fmt.Errorf("%v printed %q (%v): %s", argv, line, rerr, stderr.b)
	}
	return took, nil
}

// limited keeps the first 4 KiB written to it.
type limited struct{ b []byte }

func (l *limited) Write(p []byte) (int, error) {
	if room := 4096 - len(l.b); room > 0 {
		l.b = append(l.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}
