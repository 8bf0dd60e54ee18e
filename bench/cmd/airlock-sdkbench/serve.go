package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/client"
)

// serve answers the commands on stdin (see the package's doc).
func serve(bin string, size int) error {
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
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i * 7)
	}
	if err := sb.WriteFile(ctx, "/tmp/bench.bin", data, 0o644); err != nil {
		return err
	}
	data = nil
	out := json.NewEncoder(os.Stdout)
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var op string
		var n int
		if _, err := fmt.Sscan(in.Text(), &op, &n); err != nil {
			return fmt.Errorf("command %q: %w", in.Text(), err)
		}
		switch op {
		case "exec":
			ms := make([]float64, 0, n)
			for i := 0; i < n; i++ {
				t := time.Now()
				if _, err := sb.Run(ctx, api.ExecParams{Argv: []string{"true"}}); err != nil {
					return err
				}
				ms = append(ms, float64(time.Since(t).Nanoseconds())/1e6)
			}
			err = out.Encode(map[string]any{"ms": ms})
		case "read":
			mbps := make([]float64, 0, n)
			for i := 0; i < n; i++ {
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
			err = out.Encode(map[string]any{"mbps": mbps})
		default:
			return fmt.Errorf("unknown command %q", op)
		}
		if err != nil {
			return err
		}
	}
	return in.Err()
}
