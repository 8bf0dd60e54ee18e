package airlock

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestStartBelowSpawnerNeeds starts sandboxes whose pids limit the agent's
// process spawner fills by itself (Validate refuses such limits; create
// does not check): the start fails, as reported by the sandbox and not by
// the start's deadline, and says which limit would do.
func TestStartBelowSpawnerNeeds(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the pids limit is a cgroup limit only for root here")
	}
	for n := int64(1); n <= 3; n++ {
		t.Run(strconv.FormatInt(n, 10), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*startTimeout)
			defer cancel()
			c := Config{PidsLimit: n}
			sb, err := create(ctx, NewID(), c.withDefaults())
			if err == nil {
				sb.Close()
				t.Fatalf("a sandbox started with pids limit %d", n)
			}
			t.Log(err)
			if errors.Is(err, errStartTimeout) || ctx.Err() != nil {
				t.Fatalf("the start waited for its deadline: %v", err)
			}
			if !strings.Contains(err.Error(), "at least "+strconv.Itoa(MinPidsLimit)) {
				t.Errorf("error %q does not name the smallest pids limit, %d", err, MinPidsLimit)
			}
		})
	}
}
