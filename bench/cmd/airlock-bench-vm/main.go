//go:build linux

// Command airlock-bench-vm measures the vm and gvisor isolation levels
// next to the process level, in one run: time to interactive of a new
// sandbox (its create and its first command), from the host's root, from
// an image and from a warm pool; the exec round trip in a running
// sandbox, and under it, timed inside one, a shell's own fork, exec and
// wait of `/bin/true`; the wall time of `python3 -c 'print(1)'` in one;
// and the host memory an idle sandbox holds. With gvisor among the levels it times a
// bare `runsc do true` too. It names the accelerator (KVM or TCG) the VMs
// ran on, prints a Markdown table and writes the numbers as JSON.
//
//	sudo go run ./bench/cmd/airlock-bench-vm [-levels process,vm,gvisor] [-runs 20] [-exec-runs 200] [-idle 5] [-json FILE]
//
// The vm level needs the guest kernel (`airlock kernel build`, or
// AIRLOCK_KERNEL_CACHE naming a cache that holds it); the gvisor level
// needs airlock-runsc (`make runsc`, or AIRLOCK_RUNSC). See
// bench/README.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/bench/internal/stats"
	"github.com/airlock-sandbox/airlock/internal/boundary/gvisor"
	"github.com/airlock-sandbox/airlock/internal/boundary/vm"
)

// series is one measurement: samples in milliseconds (or MiB).
type series struct {
	Level   string    `json:"level"`
	What    string    `json:"what"`
	Unit    string    `json:"unit"`
	Samples []float64 `json:"samples"`
	P50     float64   `json:"p50"`
	P95     float64   `json:"p95"`
}

type result struct {
	Accelerator string    `json:"accelerator"`
	When        time.Time `json:"when"`
	Series      []*series `json:"series"`
}

func main() {
	var (
		runs     = flag.Int("runs", 20, "sandboxes created per level for time to interactive")
		execRuns = flag.Int("exec-runs", 200, "commands for the exec round trip, per level")
		idle     = flag.Int("idle", 5, "sandboxes kept idle per level for the memory measurement")
		image    = flag.String("image", "minimal", "the image of the restore and pool series, from the image cache ($AIRLOCK_CACHE_DIR)")
		jsonPath = flag.String("json", filepath.Join("bench", "results", "vm-latest.json"), "write the numbers as JSON to `FILE` (\"-\" for none)")
		timeout  = flag.Duration("timeout", 20*time.Minute, "give up after this long")
		levelsFl = flag.String("levels", "process,vm", "the isolation levels to measure, in order: process, vm, gvisor")
	)
	flag.Parse()
	var levels []airlock.Isolation
	for _, l := range strings.Split(*levelsFl, ",") {
		levels = append(levels, airlock.Isolation(strings.TrimSpace(l)))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	r := &result{Accelerator: "TCG (emulated CPU)", When: time.Now()}
	if vm.HardwareVirtualization() {
		r.Accelerator = "KVM"
	}
	if slices.Contains(levels, airlock.IsolationGVisor) {
		s, err := bareRunsc(ctx, *runs)
		if err != nil {
			fmt.Fprintf(os.Stderr, "airlock-bench-vm: runsc do: %v\n", err)
			os.Exit(1)
		}
		s.P50, s.P95 = stats.Percentile(s.Samples, 50), stats.Percentile(s.Samples, 95)
		r.Series = append(r.Series, s)
		fmt.Fprintf(os.Stderr, "%s: p50 %.2f %s\n", s.What, s.P50, s.Unit)
	}
	for _, lv := range levels {
		withImage := airlock.Config{Isolation: lv, Image: *image}
		for _, m := range []func(context.Context, airlock.Isolation) (*series, error){
			func(ctx context.Context, lv airlock.Isolation) (*series, error) {
				return tti(ctx, airlock.Config{Isolation: lv}, "cold: the host's root"+vmNote(lv, " (a VM boots)"), *runs)
			},
			func(ctx context.Context, lv airlock.Isolation) (*series, error) {
				return tti(ctx, withImage, "image "+*image+vmNote(lv, " (a VM restores its snapshot)"), *runs)
			},
			func(ctx context.Context, lv airlock.Isolation) (*series, error) { return pythonWall(ctx, lv, *runs) },
			func(ctx context.Context, lv airlock.Isolation) (*series, error) {
				return poolTTI(ctx, withImage, *runs)
			},
			func(ctx context.Context, lv airlock.Isolation) (*series, error) { return execRT(ctx, lv, *execRuns) },
			func(ctx context.Context, lv airlock.Isolation) (*series, error) { return spawnFloor(ctx, lv, *runs) },
			func(ctx context.Context, lv airlock.Isolation) (*series, error) { return idleMemory(ctx, lv, *idle) },
		} {
			s, err := m(ctx, lv)
			if err != nil {
				fmt.Fprintf(os.Stderr, "airlock-bench-vm: %s: %v\n", lv, err)
				os.Exit(1)
			}
			s.P50, s.P95 = stats.Percentile(s.Samples, 50), stats.Percentile(s.Samples, 95)
			r.Series = append(r.Series, s)
			fmt.Fprintf(os.Stderr, "%s %s: p50 %.2f %s\n", lv, s.What, s.P50, s.Unit)
		}
	}
	printTable(r)
	if *jsonPath != "-" {
		b, _ := json.MarshalIndent(r, "", "  ")
		if err := os.MkdirAll(filepath.Dir(*jsonPath), 0o755); err == nil {
			err = os.WriteFile(*jsonPath, append(b, '\n'), 0o644)
			if err != nil {
				fmt.Fprintf(os.Stderr, "airlock-bench-vm: %v\n", err)
			}
		}
	}
}

// vmNote is note at the vm level, and nothing at the others.
func vmNote(lv airlock.Isolation, note string) string {
	if lv == airlock.IsolationVM {
		return note
	}
	return ""
}

// tti times a new sandbox of cfg until its first command ended,
// closing each before the next.
func tti(ctx context.Context, cfg airlock.Config, what string, n int) (*series, error) {
	s := &series{Level: string(cfg.Isolation), What: "time to interactive, " + what, Unit: "ms"}
	// One untimed start: an image's first sandbox of a machine saves
	// its snapshot.
	if sb, err := airlock.Create(ctx, cfg); err == nil {
		sb.Close()
	}
	for range n {
		start := time.Now()
		sb, err := airlock.Create(ctx, cfg)
		if err != nil {
			return nil, err
		}
		_, err = sb.Run(ctx, airlock.Command{Argv: []string{"true"}})
		d := time.Since(start)
		sb.Close()
		if err != nil {
			return nil, err
		}
		s.Samples = append(s.Samples, ms(d))
	}
	return s, nil
}

// poolTTI times a sandbox taken from a warm pool until its first
// command ended; the pool refills while the command runs and the
// sandbox closes.
func poolTTI(ctx context.Context, cfg airlock.Config, n int) (*series, error) {
	s := &series{Level: string(cfg.Isolation), What: "time to interactive from a warm pool of 2", Unit: "ms"}
	p, err := airlock.NewPool(ctx, cfg, 2)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	for range n {
		// Measured with the pool full, as a pool serves a steady
		// trickle of requests.
		for p.Stats().Ready < 2 {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(5 * time.Millisecond):
			}
		}
		start := time.Now()
		sb, err := p.Get(ctx)
		if err != nil {
			return nil, err
		}
		_, err = sb.Run(ctx, airlock.Command{Argv: []string{"true"}})
		d := time.Since(start)
		sb.Close()
		if err != nil {
			return nil, err
		}
		s.Samples = append(s.Samples, ms(d))
	}
	return s, nil
}

// execRT times `true` in one running sandbox, after a few untimed runs.
func execRT(ctx context.Context, lv airlock.Isolation, n int) (*series, error) {
	s := &series{Level: string(lv), What: "exec round trip (`true`)", Unit: "ms"}
	sb, err := airlock.Create(ctx, airlock.Config{Isolation: lv})
	if err != nil {
		return nil, err
	}
	defer sb.Close()
	for i := range n + 10 {
		start := time.Now()
		if _, err := sb.Run(ctx, airlock.Command{Argv: []string{"true"}}); err != nil {
			return nil, err
		}
		if i >= 10 {
			s.Samples = append(s.Samples, ms(time.Since(start)))
		}
	}
	return s, nil
}

// spawnFloor times, inside one running sandbox, a shell starting
// `/bin/true` and waiting for it (fork, exec, exit, wait), per start,
// over loops of 20: the boundary's own cost of running a program, under
// any exec round trip (the agent's spawner forks, execs and waits too).
// A sample is one loop's mean, timed inside the sandbox.
func spawnFloor(ctx context.Context, lv airlock.Isolation, n int) (*series, error) {
	s := &series{Level: string(lv), What: "inside the sandbox: a shell's fork, exec and wait of `/bin/true`", Unit: "ms"}
	sb, err := airlock.Create(ctx, airlock.Config{Isolation: lv})
	if err != nil {
		return nil, err
	}
	defer sb.Close()
	const loop = `s=$(date +%s%N); i=0; while [ $i -lt 20 ]; do /bin/true; i=$((i+1)); done; e=$(date +%s%N); echo $(( (e - s) / 20 ))`
	for i := range n + 1 {
		res, err := sb.Run(ctx, airlock.Command{Argv: []string{"sh", "-c", loop}})
		if err != nil {
			return nil, err
		}
		ns, err := strconv.ParseInt(strings.TrimSpace(string(res.Stdout)), 10, 64)
		if err != nil || res.ExitCode != 0 {
			return nil, fmt.Errorf("the spawn loop printed %q (exit %d): %s", res.Stdout, res.ExitCode, res.Stderr)
		}
		if i > 0 {
			s.Samples = append(s.Samples, ms(time.Duration(ns)))
		}
	}
	return s, nil
}

// pythonWall times `python3 -c 'print(1)'` in one running sandbox, after
// an untimed run.
func pythonWall(ctx context.Context, lv airlock.Isolation, n int) (*series, error) {
	s := &series{Level: string(lv), What: "`python3 -c 'print(1)'` wall time", Unit: "ms"}
	sb, err := airlock.Create(ctx, airlock.Config{Isolation: lv})
	if err != nil {
		return nil, err
	}
	defer sb.Close()
	cmd := airlock.Command{Argv: []string{"python3", "-c", "print(1)"}}
	for i := range n + 1 {
		start := time.Now()
		res, err := sb.Run(ctx, cmd)
		if err != nil {
			return nil, err
		}
		if string(res.Stdout) != "1\n" {
			return nil, fmt.Errorf("python3 printed %q", res.Stdout)
		}
		if i > 0 {
			s.Samples = append(s.Samples, ms(time.Since(start)))
		}
	}
	return s, nil
}

// bareRunsc times runsc alone (`runsc do true`, with no network, on
// systrap), the floor a gvisor sandbox's start stands on.
func bareRunsc(ctx context.Context, n int) (*series, error) {
	s := &series{Level: "runsc", What: "bare `runsc --network=none do true`", Unit: "ms"}
	runsc, err := gvisor.Find(exec.LookPath)
	if err != nil {
		return nil, err
	}
	root, err := os.MkdirTemp("", "airlock-bench-runsc-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(root)
	args := []string{"--root", root, "--network", "none", "--platform", "systrap", "--ignore-cgroups"}
	if os.Geteuid() != 0 {
		args = append(args, "--rootless")
	}
	args = append(args, "do", "true")
	for i := range n + 1 {
		start := time.Now()
		if out, err := exec.CommandContext(ctx, runsc, args...).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("%s %s: %v: %s", runsc, strings.Join(args, " "), err, out)
		}
		if i > 0 {
			s.Samples = append(s.Samples, ms(time.Since(start)))
		}
	}
	return s, nil
}

// idleMemory starts n sandboxes, lets them idle, and reads the
// proportional set size (PSS) of each one's host process tree: its agent
// (process), QEMU (vm) or runsc, its Sentry and gofer (gvisor), with what
// they share divided among them.
func idleMemory(ctx context.Context, lv airlock.Isolation, n int) (*series, error) {
	s := &series{Level: string(lv), What: "host memory per idle sandbox (PSS)", Unit: "MiB"}
	var sbs []*airlock.Sandbox
	defer func() {
		for _, sb := range sbs {
			sb.Close()
		}
	}()
	for range n {
		sb, err := airlock.Create(ctx, airlock.Config{Isolation: lv})
		if err != nil {
			return nil, err
		}
		sbs = append(sbs, sb)
		if _, err := sb.Run(ctx, airlock.Command{Argv: []string{"true"}}); err != nil {
			return nil, err
		}
	}
	select {
	case <-time.After(2 * time.Second):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	for _, sb := range sbs {
		kib, err := treePSS(sb.PID())
		if err != nil {
			return nil, err
		}
		s.Samples = append(s.Samples, float64(kib)/1024)
	}
	return s, nil
}

// treePSS sums the PSS, in KiB, of pid and its descendants.
func treePSS(pid int) (int64, error) {
	children := map[int][]int{}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// The parent is the second field after the command's ")".
		i := strings.LastIndexByte(string(b), ')')
		f := strings.Fields(string(b)[i+1:])
		if len(f) > 1 {
			if pp, err := strconv.Atoi(f[1]); err == nil {
				children[pp] = append(children[pp], p)
			}
		}
	}
	var sum int64
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = append(queue[1:], children[p]...)
		b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/smaps_rollup")
		if err != nil {
			if p == pid {
				return 0, fmt.Errorf("read the memory of pid %d: %w", p, err)
			}
			continue
		}
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, "Pss:"); ok {
				n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				if err != nil {
					return 0, errors.New("unreadable smaps_rollup")
				}
				sum += n
			}
		}
	}
	return sum, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func printTable(r *result) {
	fmt.Printf("isolation levels next to each other in one run; VMs on %s (%s)\n\n", r.Accelerator, r.When.Format(time.RFC3339))
	fmt.Println("| level | measurement | p50 | p95 | runs |")
	fmt.Println("|---|---|---|---|---|")
	for _, s := range r.Series {
		fmt.Printf("| %s | %s | %.2f %s | %.2f %s | %d |\n", s.Level, s.What, s.P50, s.Unit, s.P95, s.Unit, len(s.Samples))
	}
}
