package rpc

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/api"
)

// lifecycles returns, by sandbox id, the lifecycle states the session's
// events reported so far.
func (c *client) lifecycles() map[string][]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lifecyclesLocked()
}

// lifecyclesLocked is lifecycles with c.mu held (in waitCond).
func (c *client) lifecyclesLocked() map[string][]string {
	out := map[string][]string{}
	for _, m := range c.notes {
		ev, ok := eventOf(m)
		if !ok || string(ev["type"]) != `"lifecycle"` {
			continue
		}
		var id string
		var lc airlock.LifecycleEvent
		if json.Unmarshal(ev["sandbox_id"], &id) != nil || json.Unmarshal(ev["lifecycle"], &lc) != nil {
			continue
		}
		out[id] = append(out[id], lc.State)
	}
	return out
}

// poolReady waits until pool id reports n sandboxes ready.
func (c *client) poolReady(id string, n int, d time.Duration) api.PoolInfo {
	c.t.Helper()
	deadline := time.Now().Add(d)
	for i := 0; ; i++ {
		var res api.PoolListResult
		c.result(fmt.Sprintf("list-%s-%d", id, i), api.MethodPoolList, nil, &res)
		for _, p := range res.Pools {
			if p.PoolID == id && p.Ready >= n {
				return p
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("pool %s: no %d sandboxes ready within %s: %+v", id, n, d, res.Pools)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPoolMethods: pool.create keeps sandboxes ready; create with
// "pool" takes them, each fresh and configured as the pool says;
// pool.close and the session's end close those still waiting.
func TestPoolMethods(t *testing.T) {
	needAgent(t)
	c := newClient(t, Options{AllowCreate: true}, ServeOptions{})
	var pr api.PoolCreateResult
	c.result("pc", api.MethodPoolCreate, map[string]any{"size": 2, "hostname": "pooled", "env": map[string]string{"FROM": "pool"}}, &pr)
	if !strings.HasPrefix(pr.PoolID, "pool-") {
		t.Fatalf("pool.create: pool_id %q", pr.PoolID)
	}
	if p := c.poolReady(pr.PoolID, 2, time.Minute); p.Size != 2 || p.Isolation != "process" {
		t.Errorf("pool.list: %+v, want size 2 at the process level", p)
	}

	seen := map[string]bool{}
	for i := range 4 {
		id := c.create(fmt.Sprintf("take-%d", i), map[string]any{"pool": pr.PoolID})
		if seen[id] {
			t.Fatalf("take %d: sandbox %s handed out twice", i, id)
		}
		seen[id] = true
		r := c.exec(fmt.Sprintf("x-%d", i), map[string]any{"sandbox_id": id, "command": "hostname; echo $FROM; test -e /workspace/used && echo used; touch /workspace/used"})
		if got := unb64(t, r.Stdout); got != "pooled\npool\n" {
			t.Errorf("take %d: %q, want the pool's hostname and env, and no file of another sandbox", i, got)
		}
		c.result(fmt.Sprintf("close-%d", i), api.MethodClose, map[string]any{"sandbox_id": id}, nil)
	}

	// "pool" alone, and a pool of this session.
	e := wantError(t, c.call("both", api.MethodCreate, map[string]any{"pool": pr.PoolID, "hostname": "other"}), api.CodeInvalidParams)
	if !strings.Contains(e.Message, `give "pool" alone`) {
		t.Errorf("create with pool and hostname: %q", e.Message)
	}
	wantError(t, c.call("nopool", api.MethodCreate, map[string]any{"pool": "pool-000000000000"}), api.CodeNotFound)
	wantError(t, c.call("size0", api.MethodPoolCreate, map[string]any{"size": 0}), api.CodeInvalidParams)
	wantError(t, c.call("sizebig", api.MethodPoolCreate, map[string]any{"size": airlock.MaxPoolSize + 1}), api.CodeInvalidParams)
	wantError(t, c.call("badcfg", api.MethodPoolCreate, map[string]any{"size": 1, "isolation": "nope"}), api.CodeInvalidParams)

	// pool.close closes the sandboxes waiting in it; one taken before
	// keeps running.
	c.poolReady(pr.PoolID, 2, time.Minute)
	kept := c.create("kept", map[string]any{"pool": pr.PoolID})
	c.result("pclose", api.MethodPoolClose, map[string]any{"pool_id": pr.PoolID}, nil)
	wantError(t, c.call("closed", api.MethodCreate, map[string]any{"pool": pr.PoolID}), api.CodeNotRunning)
	wantError(t, c.call("pclose2", api.MethodPoolClose, map[string]any{"pool_id": pr.PoolID}), api.CodeNotRunning)
	if r := c.exec("kept-x", map[string]any{"sandbox_id": kept, "command": "hostname"}); unb64(t, r.Stdout) != "pooled\n" {
		t.Errorf("a sandbox taken before pool.close: %q", unb64(t, r.Stdout))
	}
	c.mu.Lock()
	stoppedAll := c.waitCond(30*time.Second, func() bool { return allStopped(c.lifecyclesLocked(), kept) })
	c.mu.Unlock()
	if !stoppedAll {
		t.Errorf("after pool.close, sandboxes of the pool still run: %v", c.lifecycles())
	}

	// The session's end closes its pools' waiting sandboxes.
	var pr2 api.PoolCreateResult
	c.result("pc2", api.MethodPoolCreate, map[string]any{"size": 2}, &pr2)
	c.poolReady(pr2.PoolID, 2, time.Minute)
	var list api.PoolListResult
	c.result("list", api.MethodPoolList, nil, &list)
	if len(list.Pools) != 1 || list.Pools[0].PoolID != pr2.PoolID {
		t.Errorf("pool.list after pool.close: %+v, want only %s", list.Pools, pr2.PoolID)
	}
	if err := c.closeInput(60 * time.Second); err != nil {
		t.Fatalf("serve: %v", err)
	}
	// The output is read after Serve returns: until its end.
	c.mu.Lock()
	stoppedAll = c.waitCond(30*time.Second, func() bool { return allStopped(c.lifecyclesLocked(), "") })
	c.mu.Unlock()
	if lc := c.lifecycles(); !stoppedAll {
		t.Errorf("after the session ended, sandboxes still run: %v", lc)
	}
}

// allStopped reports whether every sandbox that started, but except,
// has stopped.
func allStopped(lc map[string][]string, except string) bool {
	for id, states := range lc {
		if id == except {
			continue
		}
		if len(states) == 0 || states[len(states)-1] == "started" {
			return false
		}
	}
	return len(lc) > 0
}
