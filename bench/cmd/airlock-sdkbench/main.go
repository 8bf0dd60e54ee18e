// Command airlock-sdkbench measures, through the Go client, what the SDK
// benchmarks measure through theirs: the round trip of exec `true` and a
// 64 MiB read_file, against a fresh `airlock rpc`. It prints one JSON
// object, so that an SDK's benchmark can run it next to its own numbers
// (sdk/python/bench/bench.py does).
//
// With -serve it instead starts `airlock rpc`, creates a sandbox holding
// a file of -size bytes at /tmp/bench.bin, prints "ready", and answers
// commands on stdin, one JSON line each, so that an SDK's benchmark can
// alternate its own rounds with these in one run
// (sdk/typescript/bench/bench.mjs does):
//
//	exec N   N round trips of exec `true`: {"ms": [...]}
//	read N   N read_file of the whole file: {"mbps": [...]}
//
// End of stdin closes the sandbox and the client.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/client"
)

func main() {
	bin := flag.String("airlock", "", "the airlock executable (default $AIRLOCK_BIN, then PATH)")
	execs := flag.Int("exec", 300, "exec round trips to time")
	reads := flag.Int("reads", 5, "64 MiB reads to time")
	size := flag.Int("size", 64<<20, "bytes per read")
	serveMode := flag.Bool("serve", false, "answer exec and read commands on stdin (see the package's doc)")
	flag.Parse()
	run := func() error { return once(*bin, *execs, *reads, *size) }
	if *serveMode {
		run = func() error { return serve(*bin, *size) }
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "airlock-sdkbench:", err)
		os.Exit(1)
	}
}

// once measures execs round trips and reads reads, and prints their
// summary.
func once(bin string, execs, reads, size int) error {
	ctx := context.Background()
	c, sb, err := open(ctx, bin, size)
	if err != nil {
		return err
	}
	defer c.Close()
	defer sb.Close(ctx)
	if _, err := timeExecs(ctx, sb, 20); err != nil { // warm up
		return err
	}
	rt, err := timeExecs(ctx, sb, execs)
	if err != nil {
		return err
	}
	mbps, err := timeReads(ctx, sb, reads, size)
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"exec_true_ms_median": median(rt),
		"exec_true_ms_p90":    pct(rt, 0.9),
		"read_64mib_mbps":     median(mbps),
	})
}

// open starts `airlock rpc`, creates the sandbox both modes measure and
// puts a file of size bytes at /tmp/bench.bin in it.
func open(ctx context.Context, bin string, size int) (*client.Client, *client.Sandbox, error) {
	c, err := client.Start(ctx, client.Options{Binary: bin})
	if err != nil {
		return nil, nil, err
	}
	sb, err := c.Create(ctx, api.CreateParams{Resources: api.Resources{MemoryMB: 1024}, DiskMB: 256})
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i * 7)
	}
	if err := sb.WriteFile(ctx, "/tmp/bench.bin", data, 0o644); err != nil {
		c.Close()
		return nil, nil, err
	}
	return c, sb, nil
}

// timeExecs times n round trips of exec `true`, in milliseconds.
func timeExecs(ctx context.Context, sb *client.Sandbox, n int) ([]float64, error) {
	ms := make([]float64, 0, n)
	for range n {
		t := time.Now()
		if _, err := sb.Run(ctx, api.ExecParams{Argv: []string{"true"}}); err != nil {
			return nil, err
		}
		ms = append(ms, float64(time.Since(t).Nanoseconds())/1e6)
	}
	return ms, nil
}

// timeReads times n read_file of /tmp/bench.bin, in MB/s.
func timeReads(ctx context.Context, sb *client.Sandbox, n, size int) ([]float64, error) {
	mbps := make([]float64, 0, n)
	for range n {
		t := time.Now()
		b, err := sb.ReadFile(ctx, "/tmp/bench.bin")
		if err != nil {
			return nil, err
		}
		if len(b) != size {
			return nil, fmt.Errorf("read %d bytes, want %d", len(b), size)
		}
		mbps = append(mbps, float64(size)/time.Since(t).Seconds()/1e6)
	}
	return mbps, nil
}

func median(v []float64) float64 { return pct(v, 0.5) }

func pct(v []float64, p float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[int(float64(len(s)-1)*p)]
}
