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
	c, err := client.Start(ctx, client.Options{Binary: bin})
	if err != nil {
		return err
	}
	defer c.Close()
	sb, err := c.Create(ctx, api.CreateParams{Resources: api.Resources{MemoryMB: 1024}, DiskMB: 256})
	if err != nil {
		return err
	}
	defer sb.Close(ctx)
	for i := 0; i < 20; i++ { // warm up
		if _, err := sb.Run(ctx, api.ExecParams{Argv: []string{"true"}}); err != nil {
			return err
		}
	}
	rt := make([]float64, 0, execs)
	for i := 0; i < execs; i++ {
		t := time.Now()
		if _, err := sb.Run(ctx, api.ExecParams{Argv: []string{"true"}}); err != nil {
			return err
		}
		rt = append(rt, float64(time.Since(t).Microseconds())/1000)
	}
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i * 7)
	}
	if err := sb.WriteFile(ctx, "/tmp/bench.bin", data, 0o644); err != nil {
		return err
	}
	data = nil
	var mbps []float64
	for i := 0; i < reads; i++ {
		t := time.Now()
		b, err := sb.ReadFile(ctx, "/tmp/bench.bin")
		if err != nil {
			return err
		}
		if len(b) != size {
			return fmt.Errorf("read %d bytes, want %d", len(b), size)
		}
		mbps = append(mbps, float64(size)/time.Since(t).Seconds()/1e6)
	}
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"exec_true_ms_median": median(rt),
		"exec_true_ms_p90":    pct(rt, 0.9),
		"read_64mib_mbps":     median(mbps),
	})
}

func median(v []float64) float64 { return pct(v, 0.5) }

func pct(v []float64, p float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[int(float64(len(s)-1)*p)]
}
