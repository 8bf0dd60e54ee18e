//go:build linux

// Command airlock-bench-images measures the image variants: how long
// each takes to build from Debian's packages into an empty cache (cold)
// and to get again once it is there (cached), and how big it is, as a
// tree, as the erofs file the vm level attaches, and as an erofs file
// compressed with lz4hc, next to the sizes of seed 000's table. It
// prints a Markdown table and writes the numbers as JSON. It reports;
// it enforces nothing.
//
//	sudo go run ./bench/cmd/airlock-bench-images [-variants minimal,standard,full] [-json FILE] [-cache DIR]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/image/store"
	"github.com/airlock-sandbox/airlock/internal/image/variant"
)

// seedMB is the size seed 000's table gives a variant (an Alpine
// image, compressed), in MB.
func seedMB(name string) float64 {
	switch name {
	case "minimal":
		return 30
	case "standard":
		return 80
	case "full":
		return 200
	}
	return 0
}

// result is one variant's numbers; it is also the JSON.
type result struct {
	Name         string  `json:"name"`
	Key          string  `json:"key"`
	Cold         bool    `json:"cold"`
	BuildSeconds float64 `json:"build_seconds"`
	CachedMS     float64 `json:"cached_ms"`
	TreeBytes    int64   `json:"tree_bytes"`
	Files        int64   `json:"files"`
	EROFSBytes   int64   `json:"erofs_bytes"`
	LZ4HCBytes   int64   `json:"erofs_lz4hc_bytes"`
	SeedMB       float64 `json:"seed_mb"`
	Error        string  `json:"error,omitempty"`
}

type report struct {
	Timestamp string         `json:"timestamp"`
	Host      string         `json:"host"`
	Load      string         `json:"load"`
	Source    variant.Source `json:"source"`
	Variants  []result       `json:"variants"`
	TTI       []ttiResult    `json:"time_to_interactive,omitempty"`
}

func main() { os.Exit(run()) }

func run() int {
	var (
		names    = flag.String("variants", strings.Join(variant.Names(), ","), "comma-separated variants to measure")
		jsonPath = flag.String("json", filepath.Join("bench", "results", "images.json"), "write the results as JSON to `FILE` (\"-\" for none)")
		cacheDir = flag.String("cache", "", "measure against the image cache in `DIR`: a variant it holds is timed cached only, one it lacks is built there (default: a new, empty cache, so every build is cold, removed at the end)")
		timeout  = flag.Duration("timeout", 90*time.Minute, "give up after this long")
		ttiRuns  = flag.Int("tti", 100, "sandboxes started on each image (and on host) for the time to interactive; 0 leaves it out")
	)
	flag.Parse()
	if flag.NArg() > 0 {
		flag.Usage()
		return 2
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "airlock-bench-images: building variants needs root")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()

	dir := *cacheDir
	if dir == "" {
		// Under /var/tmp, on a disk: an image is too big for a tmpfs /tmp.
		d, err := os.MkdirTemp("/var/tmp", "airlock-bench-images-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer store.RemoveTree(d)
		dir = d
	}
	c, err := store.Open(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	src, err := variant.SourceFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	rep := report{Timestamp: time.Now().UTC().Format(time.RFC3339), Source: src}
	rep.Host, _ = os.Hostname()
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		rep.Load = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	for _, name := range strings.Split(*names, ",") {
		r := measure(ctx, c, src, strings.TrimSpace(name))
		if r.Error != "" {
			fmt.Fprintf(os.Stderr, "%s: %s\n", r.Name, r.Error)
		}
		rep.Variants = append(rep.Variants, r)
	}
	if *ttiRuns > 0 {
		var built []string
		for _, r := range rep.Variants {
			if r.Key != "" {
				built = append(built, r.Name)
			}
		}
		agentDir, err := os.MkdirTemp("", "airlock-bench-images-agent-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(agentDir)
		agent, err := buildAgent(ctx, agentDir)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "time to interactive: %d sandboxes on each of host, %s\n", *ttiRuns, strings.Join(built, ", "))
		rep.TTI = measureTTI(ctx, dir, agent, built, *ttiRuns, 5)
	}
	writeTable(os.Stdout, rep)
	if len(rep.TTI) > 0 {
		writeTTITable(os.Stdout, rep.TTI)
	}
	if *jsonPath != "-" {
		if err := os.MkdirAll(filepath.Dir(*jsonPath), 0o755); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(*jsonPath, append(b, '\n'), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "wrote %s\n", *jsonPath)
	}
	return 0
}

// measure builds name (cold when the cache lacks it), gets it again
// (cached) and measures its sizes.
func measure(ctx context.Context, c *store.Cache, src variant.Source, name string) result {
	r := result{Name: name, SeedMB: seedMB(name)}
	b := variant.Builder{Cache: c, Source: src, Progress: func(p store.Progress) {
		if p.Total > 0 && p.Done < p.Total {
			return
		}
		fmt.Fprintf(os.Stderr, "%s: %s %s\n", p.Image, p.Step, p.Item)
	}}
	_, cached, err := b.Cached(name)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	r.Cold = !cached
	start := time.Now()
	img, err := b.Build(ctx, name)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	if r.Cold {
		r.BuildSeconds = time.Since(start).Seconds()
	}
	b.Progress = nil
	start = time.Now()
	if _, err := b.Build(ctx, name); err != nil {
		r.Error = err.Error()
		return r
	}
	r.CachedMS = float64(time.Since(start).Microseconds()) / 1000
	r.Key, r.TreeBytes, r.Files = img.Key, img.Size, img.Files
	if p, err := c.EROFS(ctx, img); err == nil {
		if fi, err := os.Stat(p); err == nil {
			r.EROFSBytes = fi.Size()
		}
	}
	r.LZ4HCBytes, err = lz4hcSize(ctx, img.RootFS)
	if err != nil {
		r.Error = err.Error()
	}
	return r
}

// lz4hcSize is the size of root packed as an lz4hc-compressed erofs
// file: the nearest to the seed's compressed sizes.
func lz4hcSize(ctx context.Context, root string) (int64, error) {
	f, err := os.CreateTemp("/var/tmp", "airlock-bench-lz4hc-*.erofs")
	if err != nil {
		return 0, err
	}
	f.Close()
	defer os.Remove(f.Name())
	if out, err := exec.CommandContext(ctx, "mkfs.erofs", "--quiet", "-zlz4hc", f.Name(), root).CombinedOutput(); err != nil {
		return 0, fmt.Errorf("mkfs.erofs -zlz4hc: %v: %s", err, out)
	}
	fi, err := os.Stat(f.Name())
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

func mb(n int64) string { return fmt.Sprintf("%.0f MB", float64(n)/1e6) }

func writeTable(w io.Writer, rep report) {
	fmt.Fprintf(w, "Debian %s/%s from %s, load %s:\n\n", rep.Source.Suite, rep.Source.Arch, rep.Source.Mirror, rep.Load)
	fmt.Fprintln(w, "| variant | cold build | cached | tree | erofs | erofs lz4hc | seed (Alpine, compressed) |")
	fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|--:|")
	for _, r := range rep.Variants {
		if r.Error != "" && r.Key == "" {
			fmt.Fprintf(w, "| `%s` | failed: %s | | | | | |\n", r.Name, r.Error)
			continue
		}
		cold := "(was cached)"
		if r.Cold {
			cold = (time.Duration(r.BuildSeconds * float64(time.Second))).Round(time.Second).String()
		}
		fmt.Fprintf(w, "| `%s` | %s | %.1f ms | %s (%d files) | %s | %s | ~%.0f MB |\n",
			r.Name, cold, r.CachedMS, mb(r.TreeBytes), r.Files, mb(r.EROFSBytes), mb(r.LZ4HCBytes), r.SeedMB)
	}
}
