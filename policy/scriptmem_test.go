package policy

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// hostileScripts each try to make the supervisor hold far more than a
// call's bound, one way each: every operator, literal, built-in and
// method that makes a value whose size depends on data.
var hostileScripts = map[string]string{
	"string repeat":        `x = "x" * (1 << 30)`,
	"bytes repeat":         `x = b"x" * (1 << 30)`,
	"list repeat":          `x = [0] * (1 << 28)`,
	"tuple repeat":         `x = (0,) * (1 << 28)`,
	"repeat count first":   `x = (1 << 28) * [0]`,
	"string doubling":      "s = 'x'\nfor i in range(64):\n    s = s + s",
	"string += doubling":   "s = 'x'\nfor i in range(64):\n    s += s",
	"string += in a loop":  "s = 'x' * 100000\nkeep = []\nfor i in range(1 << 30):\n    keep.append(s)\n    s += 'y'",
	"list doubling":        "l = [0]\nfor i in range(64):\n    l = l + l",
	"list += doubling":     "l = [0]\nfor i in range(64):\n    l += l",
	"list *= doubling":     "l = [0]\nfor i in range(64):\n    l *= 2",
	"index += doubling":    "d = {'k': 'x'}\nfor i in range(64):\n    d['k'] += d['k']",
	"field += doubling":    "for i in range(64):\n    req.body += req.body",
	"append in a loop":     "l = []\nfor i in range(1 << 30):\n    l.append(i)",
	"append strings":       "l = []\nfor i in range(1 << 30):\n    l.append('x' * 100)",
	"insert in a loop":     "l = []\nfor i in range(1 << 30):\n    l.insert(len(l), i)",
	"dict literals":        "l = [{} for i in range(1 << 30)]",
	"list literals":        "l = []\nfor i in range(1 << 30):\n    l.append([i, i, i])",
	"tuple literals":       "l = []\nfor i in range(1 << 30):\n    l.append((i, i))",
	"comprehension":        "l = [i for i in range(1 << 30)]",
	"nested comprehension": "l = [[j for j in range(1000)] for i in range(1 << 20)]",
	"dict comprehension":   "d = {i: i for i in range(1 << 30)}",
	"dict set in a loop":   "d = {}\nfor i in range(1 << 30):\n    d[i] = i",
	"dict for target":      "d = {}\nfor i, d[i] in enumerate(range(1 << 30)):\n    pass",
	"dict comp target":     "d = {}\nx = [0 for i, d[i] in enumerate(range(1 << 30))]",
	"setdefault":           "d = {}\nfor i in range(1 << 30):\n    d.setdefault(i, i)",
	"dict update":          "d = {}\nfor i in range(1 << 30):\n    d.update([(i, i)])",
	"dict |=":              "d = {}\nfor i in range(1 << 30):\n    d |= {i: i}",
	"dict |":               "d = {}\nfor i in range(1 << 30):\n    d = d | {i: i}",
	"set add":              "s = set()\nfor i in range(1 << 30):\n    s.add(i)",
	"set union":            "s = set([1])\nfor i in range(1 << 30):\n    s = s.union(range(i * 1000, i * 1000 + 1000))",
	"list()":               "x = list(range(1 << 28))",
	"tuple()":              "x = tuple(range(1 << 28))",
	"set()":                "x = set(range(1 << 26))",
	"dict()":               "x = dict([(i, i) for i in range(1 << 26)])",
	"sorted()":             "x = sorted(range(1 << 28))",
	"reversed()":           "x = reversed(range(1 << 28))",
	"enumerate()":          "x = enumerate(range(1 << 28))",
	"zip()":                "x = zip(range(1 << 28), range(1 << 28))",
	"extend":               "l = []\nl.extend(range(1 << 28))",
	"bytes()":              "x = bytes('x' * (1 << 24))\ny = [bytes(x) for i in range(1 << 20)]",
	"codepoints":           "x = list(('x' * (1 << 24)).codepoints())",
	"join":                 `x = ",".join(["x" * 1000] * 100000)`,
	"join in a loop":       "s = 'x' * 1000\nl = []\nfor i in range(1 << 30):\n    l.append(''.join([s, s]))",
	"str of shared refs":   `x = str(["x" * 100000] * 10000)`,
	"repr of shared refs":  `x = repr(["x" * 100000] * 10000)`,
	"print shared refs":    `print(["x" * 100000] * 10000)`,
	"fail message":         `fail(["x" * 100000] * 10000)`,
	"percent format":       `x = "%s" % (["x" * 100000] * 10000,)`,
	"percent many fields":  `x = ("%s" * 10000) % tuple(["x" * 10000] * 10000)`,
	"format method":        `x = "{}{}{}{}".format(["x" * 100000] * 10000)`,
	"replace grows":        `x = ("x" * 1000000).replace("x", "y" * 1000)`,
	"replace empty":        `x = ("x" * 1000000).replace("", "y" * 1000)`,
	"split":                `x = ("x" * (1 << 24)).split("x")`,
	"split whitespace":     `x = (" x" * (1 << 23)).split()`,
	"splitlines":           `x = ("\n" * (1 << 24)).splitlines()`,
	"upper in a loop":      "s = 'x' * 100000\nl = []\nfor i in range(1 << 30):\n    l.append(s.upper())",
	"slices in a loop":     "big = list(range(100000))\nl = []\nfor i in range(1 << 30):\n    l.append(big[:])",
	"string slices":        "big = 'x' * 100000\nl = []\nfor i in range(1 << 30):\n    l.append(big[::-1])",
	"closures":             "l = []\nfor i in range(1 << 30):\n    l.append(lambda: i)",
	"nested defs":          "l = []\nfor i in range(1 << 30):\n    def f():\n        return i\n    l.append(f)",
	"star args":            "def f(*a):\n    return a\nbig = list(range(100000))\nl = []\nfor i in range(1 << 30):\n    l.append(f(*big))",
	"kwargs":               "def f(**kw):\n    return kw\nbig = {str(i): i for i in range(10000)}\nl = []\nfor i in range(1 << 30):\n    l.append(f(**big))",
	"dict items":           "d = {i: i for i in range(100000)}\nl = []\nfor i in range(1 << 30):\n    l.append(d.items())",
	"str in a loop":        "l = []\nfor i in range(1 << 30):\n    l.append(str(i))",
	"unary minus":          "x = 1 << 500\nfor i in range(1000):\n    x = x << 500\nl = []\nfor i in range(1 << 30):\n    l.append(-x)",
	"getattr method":       "j = getattr(',', 'join')\nx = j(['x' * 1000] * 100000)",
	"bound method alias":   "j = ','.join\nx = j(['x' * 1000] * 100000)",
	"default argument":     "def f(x = 'x' * (1 << 30)):\n    return x",
	"percent dict":         `x = "%(a)s%(a)s%(a)s" % {"a": ["x" * 100000] * 10000}`,
}

// hostileInts each try to make an int so large that one operation on it
// defeats the time bound.
var hostileInts = map[string]string{
	"squaring":     "x = 3\nfor i in range(64):\n    x = x * x",
	"shifts":       "x = 1\nfor i in range(1 << 30):\n    x = x << 511",
	"int() digits": `x = int("9" * 1000000)`,
}

func hookScript(body string) string {
	var b strings.Builder
	b.WriteString("def on_request(req):\n")
	for _, line := range strings.Split(body, "\n") {
		b.WriteString("    " + line + "\n")
	}
	b.WriteString("    return req\n")
	return b.String()
}

func TestScriptAllocBound(t *testing.T) {
	for name, body := range hostileScripts {
		t.Run(name, func(t *testing.T) {
			p := scriptPolicy(t, hookScript(body), Options{ScriptMaxAlloc: 8 << 20, ScriptTimeout: time.Minute})
			_, err := p.FilterRequest(context.Background(), testRequest())
			wantPolicyError(t, err, "would allocate more than 8 MiB", "in on_request")
		})
	}
	for name, body := range hostileInts {
		t.Run(name, func(t *testing.T) {
			p := scriptPolicy(t, hookScript(body), Options{ScriptTimeout: time.Minute})
			_, err := p.FilterRequest(context.Background(), testRequest())
			wantPolicyError(t, err, "in on_request")
			if !strings.Contains(err.Error(), "int") {
				t.Errorf("error %q does not say what was refused", err)
			}
		})
	}
}

func TestScriptAllocTopLevel(t *testing.T) {
	_, err := New(Config{AllowedHosts: []string{"*"}, PolicyScript: "x = 'x' * (1 << 30)\ndef on_request(req):\n    return req\n"}, Options{})
	if err == nil || !strings.Contains(err.Error(), "would allocate more than 16 MiB") || !strings.Contains(err.Error(), "policy_script:1:") {
		t.Fatalf("New: %v, want the top level refused for what it allocates, at its line", err)
	}
}

// TestScriptAllocBenign runs what policy scripts do on a body as large
// as hooks get one: it stays within the bound.
func TestScriptAllocBenign(t *testing.T) {
	p := scriptPolicy(t, `
def on_request(req):
    body = req.body
    lines = body.splitlines()
    words = body.split()
    seen = {}
    for w in words[:10000]:
        seen[w] = seen.get(w, 0) + 1
    out = []
    for name, values in req.headers.items():
        out.append("%s=%s" % (name.lower(), ",".join(values)))
    req.headers["X-Summary"] = ";".join(sorted(out))
    req.headers["X-Lines"] = str(len(lines))
    req.body = body.lower().replace("secret", "******")
    s = ""
    for i in range(200):
        s += "ab"
    req.headers["X-Built"] = s[:10]
    return req
`, Options{ScriptTimeout: time.Minute})
	r := testRequest()
	r.Body = []byte(strings.Repeat("Some text with a secret in it\n", DefaultMaxHookBody/30))
	out, err := p.FilterRequest(context.Background(), r)
	if err != nil {
		t.Fatalf("a script within the bound failed: %v", err)
	}
	if got := out.Header.Get("X-Lines"); got != fmt.Sprint(DefaultMaxHookBody/30) {
		t.Errorf("X-Lines = %q", got)
	}
	if !strings.Contains(string(out.Body), "******") {
		t.Error("the body was not rewritten")
	}
}

// TestScriptRewriteKeepsSemantics checks what the rewrite touches
// behaves as Starlark says: in-place list += and dict |=, augmented
// targets evaluated once, slices, spreads, closures.
func TestScriptRewriteKeepsSemantics(t *testing.T) {
	p := scriptPolicy(t, `
def key(calls):
    calls.append(1)
    return "k"

def f(*a, **kw):
    return (a, kw)

def on_request(req):
    a = [1]
    b = a
    a += [2]
    d = {"x": 1}
    e = d
    d |= {"y": 2}
    counts = {"k": 1}
    calls = []
    counts[key(calls)] += 5
    s = "abc"
    s *= 2
    t = (1, 2) + (3,)
    fns = [lambda: i for i in range(3)]
    got = [
        b == [1, 2],
        e == {"x": 1, "y": 2},
        counts["k"] == 6,
        len(calls) == 1,
        s == "abcabc",
        t[::-1] == (3, 2, 1),
        f(*[1, 2], **{"z": 3}) == ((1, 2), {"z": 3}),
        -(1 << 70) < 0,
        [x for x in "abc".elems()] == ["a", "b", "c"],
        {k: v for k, v in [("a", 1)]} == {"a": 1},
        "%d-%s" % (1, "x") == "1-x",
        "{}{}".format("a", 1) == "a1",
        ",".join(["a", "b"]) == "a,b",
        getattr("a,b", "split")(",") == ["a", "b"],
        fns[0]() == 2,
    ]
    req.headers["X-Got"] = ",".join([str(g) for g in got])
    req.headers.update({"X-Method": req.method})
    return req
`, Options{})
	out, err := p.FilterRequest(context.Background(), testRequest())
	if err != nil {
		t.Fatal(err)
	}
	got := out.Header.Get("X-Got")
	for i, v := range strings.Split(got, ",") {
		if v != "True" {
			t.Errorf("check %d: %s (all: %s)", i, v, got)
		}
	}
	if out.Header.Get("X-Method") != "GET" {
		t.Errorf("X-Method = %q", out.Header.Get("X-Method"))
	}
}

func TestScriptReservedNames(t *testing.T) {
	_, err := New(Config{AllowedHosts: []string{"*"}, PolicyScript: "def on_request(req):\n    _airlock_charge = 1\n    return req\n"}, Options{})
	if err == nil || !strings.Contains(err.Error(), "policy_script:2:5") || !strings.Contains(err.Error(), "reserved") {
		t.Fatalf("New: %v, want the reserved name refused at its place", err)
	}
}

// holdScript prints, and the test's print hook holds the call there
// (the interpreter checks its limits only between steps) until
// released.
const holdScript = "def on_request(req):\n    print('in')\n    return req\n"

type holder struct {
	in      chan struct{}
	release chan struct{}
}

func newHolder() *holder {
	return &holder{in: make(chan struct{}, 64), release: make(chan struct{})}
}

func (h *holder) print(string) {
	h.in <- struct{}{}
	<-h.release
}

func TestScriptConcurrencyBound(t *testing.T) {
	h := newHolder()
	p := scriptPolicy(t, holdScript, Options{ScriptConcurrency: 2, ScriptTimeout: 200 * time.Millisecond, ScriptPrint: h.print, ScriptGate: NewScriptGate(100)})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { _, _ = p.FilterRequest(context.Background(), testRequest()) })
	}
	<-h.in
	<-h.in
	_, err := p.FilterRequest(context.Background(), testRequest())
	wantPolicyError(t, err, "not run: 2 calls into the policy script were already running for this policy")

	// A caller that gives up waits no longer.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = p.FilterRequest(ctx, testRequest())
	wantPolicyError(t, err, "not run", "context canceled")

	close(h.release)
	wg.Wait()
	if _, err := p.FilterRequest(context.Background(), testRequest()); err != nil {
		t.Errorf("after the held calls ended: %v", err)
	}
}

func TestScriptSharedGate(t *testing.T) {
	h := newHolder()
	gate := NewScriptGate(3)
	opts := Options{ScriptConcurrency: 2, ScriptTimeout: 200 * time.Millisecond, ScriptPrint: h.print, ScriptGate: gate}
	a, b := scriptPolicy(t, holdScript, opts), scriptPolicy(t, holdScript, opts)
	var wg sync.WaitGroup
	for _, p := range []*Policy{a, a, b} {
		wg.Go(func() { _, _ = p.FilterRequest(context.Background(), testRequest()) })
	}
	for range 3 {
		<-h.in
	}
	// b has a slot of its own left, but the shared gate has none.
	_, err := b.FilterRequest(context.Background(), testRequest())
	wantPolicyError(t, err, "not run: 3 calls into the policy script were already running sharing this bound")
	close(h.release)
	wg.Wait()
}

// TestScriptHostileHeapBounded runs what many sandboxes, each with a
// hostile script and many requests at once, would run in one
// supervisor: each call fails closed, and the heap stays within what
// the bounds allow (the process's gate times each call's bound), where
// each call alone would otherwise take gigabytes.
func TestScriptHostileHeapBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates a few hundred MB")
	}
	bodies := []string{
		hostileScripts["dict literals"],
		hostileScripts["append strings"],
		hostileScripts["string doubling"],
		hostileScripts["list += doubling"],
		hostileScripts["star args"],
		hostileScripts["str of shared refs"],
	}
	const sandboxes, perSandbox = 6, 8
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	var wg sync.WaitGroup
	errs := make(chan error, sandboxes*perSandbox)
	for i := range sandboxes {
		p := scriptPolicy(t, hookScript(bodies[i%len(bodies)]), Options{ScriptTimeout: time.Minute})
		for range perSandbox {
			wg.Go(func() {
				_, err := p.FilterRequest(context.Background(), testRequest())
				errs <- err
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		wantPolicyError(t, err, "would allocate more than 16 MiB")
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	// HeapSys only grows while the process runs: it is the heap's high
	// water mark, with no sampling to miss a peak.
	grew := int64(after.HeapSys) - int64(before.HeapSys)
	bound := int64(DefaultScriptProcessConcurrency * DefaultScriptMaxAlloc * 2) // live bytes, and as much again before the collector runs
	t.Logf("heap grew by %d MiB (bound %d MiB) for %d hostile calls", grew>>20, bound>>20, sandboxes*perSandbox)
	if grew > bound {
		t.Errorf("the heap grew by %d MiB, more than the %d MiB the bounds allow", grew>>20, bound>>20)
	}
}
