package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
)

// serve answers the commands on stdin (see the package's doc).
func serve(bin string, size int) error {
	ctx := context.Background()
	c, sb, err := open(ctx, bin, size)
	if err != nil {
		return err
	}
	defer c.Close()
	defer sb.Close(ctx)
	out := json.NewEncoder(os.Stdout)
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var op string
		var n int
		if _, err := fmt.Sscan(in.Text(), &op, &n); err != nil {
			return fmt.Errorf("command %q: %w", in.Text(), err)
		}
		var v []float64
		switch op {
		case "exec":
			if v, err = timeExecs(ctx, sb, n); err == nil {
				err = out.Encode(map[string]any{"ms": v})
			}
		case "read":
			if v, err = timeReads(ctx, sb, n, size); err == nil {
				err = out.Encode(map[string]any{"mbps": v})
			}
		default:
			return fmt.Errorf("unknown command %q", op)
		}
		if err != nil {
			return err
		}
	}
	return in.Err()
}
