package egress_test

import (
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/testnet"
	"github.com/airlock-sandbox/airlock/policy"
)

// hostileHook allocates, in on_request, 1.5 GiB if nothing stops it,
// a MiB at a time, well within its steps and its time.
const hostileHook = `
def on_request(req):
    keep = []
    for i in range(1536):
        keep.append("x" * (1 << 20))
    return req
`

// TestPolicyScriptMemoryBounded proves that hostile policy scripts in
// several sandboxes, each sent many requests at once, cannot take the
// supervisor's memory: every call ends in policy_error (the request
// blocked with 403, nothing upstream), and the supervisor's heap grows
// by no more than the process's bound on script calls allows.
func TestPolicyScriptMemoryBounded(t *testing.T) {
	e := start(t)
	const sandboxes, perSandbox = 3, 8
	var sbs []*airlock.Sandbox
	for range sandboxes {
		n := e.network(testnet.API)
		n.PolicyScript = hostileHook
		sbs = append(sbs, e.box(t, n))
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	m := e.mark()
	var wg sync.WaitGroup
	for _, sb := range sbs {
		wg.Go(func() {
			out := ok(t, sb, "for i in $(seq "+strconv.Itoa(perSandbox)+"); do curl -sS -o /dev/null -w '%{http_code}\\n' --max-time 60 https://api.example.com/echo & done; wait")
			if got := strings.Count(out, "403"); got != perSandbox {
				t.Errorf("statuses:\n%s\nwant %d times 403", out, perSandbox)
			}
		})
	}
	wg.Wait()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)

	// HeapSys is the heap's high-water mark: no sampling misses a peak.
	grew := int64(after.HeapSys) - int64(before.HeapSys)
	const slack = 64 << 20 // the requests' own buffers and handshakes
	bound := int64(policy.DefaultScriptProcessConcurrency*policy.DefaultScriptMaxAlloc*2 + slack)
	t.Logf("heap grew by %d MiB for %d hostile calls (bound %d MiB)", grew>>20, sandboxes*perSandbox, bound>>20)
	if grew > bound {
		t.Errorf("the supervisor's heap grew by %d MiB, more than the %d MiB the bounds allow", grew>>20, bound>>20)
	}

	// Each call fails closed on a bound: mostly the allocation's; on a
	// slow machine a call may also wait too long for one of the
	// process's slots, or run out of time.
	blocked, byAlloc := 0, 0
	for _, ev := range e.events()[m:] {
		if ev.Kind != api.NetHTTP {
			continue
		}
		wantBlocked(t, ev, api.NetHTTP, policy.ReasonPolicyError)
		switch {
		case strings.Contains(ev.Reason, "would allocate more than 16 MiB"):
			byAlloc++
		case strings.Contains(ev.Reason, "not run:"), strings.Contains(ev.Reason, "ran for longer than"):
		default:
			t.Errorf("reason %q is not one of the script's bounds", ev.Reason)
		}
		blocked++
	}
	if byAlloc == 0 {
		t.Error("no call ended on the allocation bound")
	}
	if blocked != sandboxes*perSandbox {
		t.Errorf("%d blocked http events, want %d", blocked, sandboxes*perSandbox)
	}
	for _, r := range e.w.Requests(testnet.API) {
		if r.Path == "/echo" {
			t.Errorf("api.example.com got %s", r.URI)
		}
	}
}
