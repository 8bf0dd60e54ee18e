package egress_test

import (
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/testnet"
	"github.com/airlock-sandbox/airlock/policy"
)

// hostileHooks each allocate, in on_request, far more than a call may,
// well within their steps: at once (512 MiB, under the interpreter's own
// bound of 1 GiB for one repetition), by doubling (the interpreter
// bounds no concatenation), and a MiB at a time (1.5 GiB in all).
var hostileHooks = []string{
	`
def on_request(req):
    big = "x" * (1 << 29)
    return req
`, `
def on_request(req):
    s = "x"
    for i in range(40):
        s = s + s
    return req
`, `
def on_request(req):
    keep = []
    for i in range(1536):
        keep.append("x" * (1 << 20))
    return req
`,
}

// TestPolicyScriptMemoryBounded proves that hostile policy scripts in
// several sandboxes, each sent many requests at once, cannot take the
// supervisor's memory: every call fails closed with policy_error (the
// request blocked with 403, nothing sent upstream), and the
// supervisor's heap grows by no more than the process's bound on script
// calls allows.
func TestPolicyScriptMemoryBounded(t *testing.T) {
	e := start(t)
	// Three sandboxes at once: at the vm level, three emulated CPUs
	// doing TLS handshakes at once; fewer requests each there.
	perSandbox := 8
	if level() == airlock.IsolationVM {
		perSandbox = 4
	}
	var sbs []*airlock.Sandbox
	for _, hook := range hostileHooks {
		n := e.network(testnet.API)
		n.PolicyScript = hook
		sbs = append(sbs, e.box(t, n))
	}
	requests := func(sb *airlock.Sandbox) {
		out := ok(t, sb, "for i in $(seq "+strconv.Itoa(perSandbox)+"); do curl -sS -o /dev/null -w '%{http_code}\\n' --max-time "+strconv.Itoa(int(patience())*50)+" https://api.example.com/echo 2>&1 & done; wait")
		if got := strings.Count(out, "403"); got != perSandbox {
			t.Errorf("statuses:\n%s\nwant %d times 403", out, perSandbox)
		}
	}

	// Alone, the first sandbox's calls all end on the allocation bound,
	// before they allocate.
	m := e.mark()
	requests(sbs[0])
	for _, ev := range hookHTTPEvents(t, e, m, perSandbox) {
		wantBlocked(t, ev, api.NetHTTP, policy.ReasonPolicyError)
		if !strings.Contains(ev.Reason, "would allocate more than 16 MiB") {
			t.Errorf("reason %q does not say the allocation bound", ev.Reason)
		}
	}

	// All at once.
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	m = e.mark()
	var wg sync.WaitGroup
	for _, sb := range sbs {
		wg.Go(func() { requests(sb) })
	}
	wg.Wait()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)

	// HeapSys is the heap's high-water mark: no sampling misses a peak.
	grew := int64(after.HeapSys) - int64(before.HeapSys)
	const slack = 64 << 20 // the requests' own buffers and handshakes
	bound := int64(policy.DefaultScriptProcessConcurrency*policy.DefaultScriptMaxAlloc*2 + slack)
	t.Logf("heap grew by %d MiB for %d hostile calls (bound %d MiB)", grew>>20, len(sbs)*perSandbox, bound>>20)
	if grew > bound {
		t.Errorf("the supervisor's heap grew by %d MiB, more than the %d MiB the bounds allow", grew>>20, bound>>20)
	}
	// Each call fails closed on a bound: the allocation's, or, on a
	// slow machine, the wait for one of the process's slots or the time.
	// On a loaded machine a call has also been cut short by its
	// request's context ending while it ran (once in CI, the client
	// still getting its 403): still closed, and logged here.
	for _, ev := range hookHTTPEvents(t, e, m, len(sbs)*perSandbox) {
		wantBlocked(t, ev, api.NetHTTP, policy.ReasonPolicyError)
		switch {
		case strings.Contains(ev.Reason, "would allocate more than 16 MiB"), strings.Contains(ev.Reason, "not run:"), strings.Contains(ev.Reason, "ran for longer than"):
		case strings.HasSuffix(ev.Reason, "Starlark computation cancelled: context canceled"):
			t.Logf("a call ended with its request's context: %q", ev.Reason)
		default:
			t.Errorf("reason %q is not one of the script's bounds", ev.Reason)
		}
	}
	for _, r := range e.w.Requests(testnet.API) {
		if r.Path == "/echo" {
			t.Errorf("api.example.com got %s", r.URI)
		}
	}
}

// hookHTTPEvents waits for n http events from position from on, and
// returns them.
func hookHTTPEvents(t *testing.T, e *env, from, n int) []api.NetworkEvent {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var out []api.NetworkEvent
		for _, ev := range e.events()[from:] {
			if ev.Kind == api.NetHTTP {
				out = append(out, ev)
			}
		}
		if len(out) >= n || time.Now().After(deadline) {
			if len(out) != n {
				t.Errorf("%d http events, want %d:\n%s", len(out), n, eventList(out))
			}
			return out
		}
		time.Sleep(20 * time.Millisecond)
	}
}
