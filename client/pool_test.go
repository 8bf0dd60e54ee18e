package client

import (
	"errors"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
)

// TestRealServerPool takes sandboxes from a pool of a real server.
func TestRealServerPool(t *testing.T) {
	c := startReal(t, Options{})
	ctx := testCtx(t)
	id, err := c.PoolCreate(ctx, api.PoolCreateParams{CreateParams: api.CreateParams{Hostname: "pooled"}, Size: 2})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		pools, err := c.PoolList(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(pools) == 1 && pools[0].PoolID == id && pools[0].Ready == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool.list: %+v, want %s with 2 ready", pools, id)
		}
		time.Sleep(20 * time.Millisecond)
	}
	sb, err := c.Create(ctx, api.CreateParams{Pool: id})
	if err != nil {
		t.Fatal(err)
	}
	res, err := sb.Exec(ctx, "hostname")
	if err != nil || string(res.Stdout) != "pooled\n" {
		t.Errorf("hostname in a sandbox taken from the pool: %q, %v", res.Stdout, err)
	}
	if err := c.PoolClose(ctx, id); err != nil {
		t.Fatal(err)
	}
	var ae *Error
	if _, err := c.Create(ctx, api.CreateParams{Pool: id}); !errors.As(err, &ae) || ae.Code != api.CodeNotRunning {
		t.Errorf("create from a closed pool: %v, want CodeNotRunning", err)
	}
	if err := sb.Close(ctx); err != nil {
		t.Errorf("close: %v", err)
	}
}
