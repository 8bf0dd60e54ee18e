package rpc

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
)

// TestHostileLines sends lines that are not valid requests: each gets
// the right error (or none, for a notification), and the session goes on.
func TestHostileLines(t *testing.T) {
	c := newClient(t, Options{}, ServeOptions{})
	deep := strings.Repeat("[", 100000) + strings.Repeat("]", 100000)
	cases := []struct {
		line string
		id   string // the id the answer carries
		code int
	}{
		{"not json", "null", api.CodeParseError},
		{`{"jsonrpc":"2.0","method":"info","id":1`, "null", api.CodeParseError},
		{"\xff\xfe garbage \x00", "null", api.CodeParseError},
		{deep, "null", api.CodeParseError},
		{`[{"jsonrpc":"2.0","method":"info","id":1}]`, "null", api.CodeInvalidRequest},
		{`[]`, "null", api.CodeInvalidRequest},
		{`42`, "null", api.CodeInvalidRequest},
		{`"info"`, "null", api.CodeInvalidRequest},
		{`null`, "null", api.CodeInvalidRequest},
		{`{}`, "null", api.CodeInvalidRequest},
		{`{"jsonrpc":"1.0","method":"info","id":"v1"}`, `"v1"`, api.CodeInvalidRequest},
		{`{"jsonrpc":"2.0","method":5,"id":"m5"}`, `"m5"`, api.CodeInvalidRequest},
		{`{"jsonrpc":"2.0","method":"info","id":{"a":1}}`, "null", api.CodeInvalidRequest},
		{`{"jsonrpc":"2.0","method":"info","id":[1]}`, "null", api.CodeInvalidRequest},
		{`{"jsonrpc":"2.0","method":"info","id":true}`, "null", api.CodeInvalidRequest},
		{`{"jsonrpc":"2.0","method":"info","id":"` + strings.Repeat("x", 2000) + `"}`, "null", api.CodeInvalidRequest},
		{`{"jsonrpc":"2.0","method":"no_such_method","id":"nm"}`, `"nm"`, api.CodeMethodNotFound},
		{`{"jsonrpc":"2.0","method":"exec","params":[1,2],"id":"pa"}`, `"pa"`, api.CodeInvalidParams},
		{`{"jsonrpc":"2.0","method":"exec","params":"ls","id":"ps"}`, `"ps"`, api.CodeInvalidParams},
		{`{"jsonrpc":"2.0","method":"exec","params":{"command":5},"id":"pt"}`, `"pt"`, api.CodeInvalidParams},
		{`{"jsonrpc":"2.0","method":"write_file","params":{"path":"/x","mode":"rw"},"id":"wm"}`, `"wm"`, api.CodeInvalidParams},
		{`{"jsonrpc":"2.0","method":"events.subscribe","params":{"types":["bogus"]},"id":"eb"}`, `"eb"`, api.CodeInvalidParams},
		{`{"jsonrpc":"2.0","method":"create","id":"cr"}`, `"cr"`, api.CodePermissionError},
		{`{"jsonrpc":"2.0","method":"attach","id":"at"}`, `"at"`, api.CodeUnsupported},
		{`{"jsonrpc":"2.0","method":"exec","params":{"command":"ls"},"id":"ns"}`, `"ns"`, api.CodeNotFound},
		{`{"jsonrpc":"2.0","method":"cancel","params":{"id":99},"id":"cn"}`, `"cn"`, api.CodeNotFound},
		// Ids of every JSON type a request may have, echoed as sent.
		{`{"jsonrpc":"2.0","method":"nope","id":1e400}`, "1e400", api.CodeMethodNotFound},
		{`{"jsonrpc":"2.0","method":"nope","id":-0.5}`, "-0.5", api.CodeMethodNotFound},
		{`{"jsonrpc":"2.0","method":"nope","id":123456789012345678901234567890}`, "123456789012345678901234567890", api.CodeMethodNotFound},
		{`{"jsonrpc":"2.0","method":"nope","id":"\u00e9\ud83d\ude00"}`, `"\u00e9\ud83d\ude00"`, api.CodeMethodNotFound},
		{`{"jsonrpc":"2.0","method":"nope","id":null}`, "null", api.CodeMethodNotFound},
	}
	for _, tc := range cases {
		c.send(tc.line)
	}
	// Notifications get no answer, even when they fail.
	c.send(`{"jsonrpc":"2.0","method":"exec","params":{"command":"ls"}}`)
	c.send(`{"jsonrpc":"2.0","method":"no_such_method"}`)
	c.send(`{"jsonrpc":"2.0","method":"info"}`)
	c.send("")
	c.send("   \r")
	var info api.InfoResult
	c.result("last", api.MethodInfo, nil, &info)
	// Answers come out of order: wait for all of them, then a little
	// longer for any answer to a notification, which must not come.
	c.mu.Lock()
	c.waitCond(30*time.Second, func() bool { return c.lines >= len(cases)+1 })
	c.mu.Unlock()
	time.Sleep(200 * time.Millisecond)
	c.mu.Lock()
	got := map[string][]msg{}
	for k, v := range c.byID {
		got[k] = v
	}
	lines := c.lines
	c.mu.Unlock()
	if lines != len(cases)+1 {
		t.Errorf("%d lines from the server, want %d (one per request, none for notifications)", lines, len(cases)+1)
	}
	for _, tc := range cases {
		k := idKey(json.RawMessage(tc.id))
		if len(got[k]) == 0 {
			t.Errorf("%.60q: no answer with id %s", tc.line, tc.id)
			continue
		}
		var m msg
		// Answers with id null come in order; take the one with our code.
		for i, cand := range got[k] {
			var e api.Error
			if json.Unmarshal(cand["error"], &e) == nil && e.Code == tc.code {
				m = cand
				got[k] = append(got[k][:i:i], got[k][i+1:]...)
				break
			}
		}
		if m == nil {
			t.Errorf("%.60q: answers %v, none with code %d", tc.line, got[k], tc.code)
			continue
		}
		if string(m["id"]) != tc.id {
			t.Errorf("%.60q: id %s, want %s exactly", tc.line, m["id"], tc.id)
		}
		e := errorOf(t, m)
		if len(e.Message) < 30 {
			t.Errorf("%.60q: message %q does not say what to do", tc.line, e.Message)
		}
	}
}

// hugeLine is a reader of one request line of n bytes, made up as it is
// read.
type hugeLine struct {
	prefix, suffix, fill []byte
	n, off               int64
}

func newHugeLine(n int64) *hugeLine {
	return &hugeLine{
		prefix: []byte(`{"jsonrpc":"2.0","method":"exec","id":"huge","params":{"command":"`),
		suffix: []byte("\"}}\n"),
		fill:   bytes.Repeat([]byte("x"), 64<<10),
		n:      n,
	}
}

func (h *hugeLine) Read(p []byte) (int, error) {
	body := h.n - int64(len(h.suffix))
	switch {
	case h.off >= h.n:
		return 0, io.EOF
	case h.off < int64(len(h.prefix)):
		k := copy(p, h.prefix[h.off:])
		h.off += int64(k)
		return k, nil
	case h.off >= body:
		k := copy(p, h.suffix[h.off-body:])
		h.off += int64(k)
		return k, nil
	}
	k := copy(p[:min(int64(len(p)), body-h.off)], h.fill)
	h.off += int64(k)
	return k, nil
}

// rss returns this process's resident memory in bytes.
func rss(t testing.TB) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Skip("no VmRSS")
	return 0
}

// peakRSS samples rss until stop is called and returns the highest.
func peakRSS(t testing.TB) (stop func() int64) {
	var peak atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			if r := rss(t); r > peak.Load() {
				peak.Store(r)
			}
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return func() int64 { close(done); wg.Wait(); return peak.Load() }
}

// TestHugeLine streams a 1 GiB request line: it is answered with
// CodeLimitExceeded, without the server holding it, while an exec sent
// before it completes.
func TestHugeLine(t *testing.T) {
	needAgent(t)
	const limit = 4 << 20
	c := newClient(t, Options{AllowCreate: true, MaxMessage: limit}, ServeOptions{})
	c.create(1, nil)
	before := rss(t)
	stop := peakRSS(t)
	c.request("slow", api.MethodExec, map[string]any{"command": "sleep 1; echo survived"})
	c.wmu.Lock()
	n, err := io.Copy(c.in, newHugeLine(1<<30))
	c.wmu.Unlock()
	if err != nil || n != 1<<30 {
		t.Fatalf("stream the huge line: %d bytes, %v", n, err)
	}
	m := c.next(nil, time.Minute)
	e := wantError(t, m, api.CodeLimitExceeded)
	if !strings.Contains(e.Message, strconv.Itoa(limit)) {
		t.Errorf("message %q should give the limit", e.Message)
	}
	r := c.next("slow", time.Minute)
	var res api.ExecResult
	if err := json.Unmarshal(r["result"], &res); err != nil || unb64(t, res.Stdout) != "survived\n" {
		t.Errorf("exec sent before the huge line: %v %v", r, err)
	}
	if growth := stop() - before; growth > 200<<20 {
		t.Errorf("memory grew by %d MiB while reading a 1 GiB line", growth>>20)
	} else {
		t.Logf("peak memory growth: %d MiB", growth>>20)
	}
	// A line just under the limit still goes through (padded outside
	// the params, which take no member of their own).
	c.send(`{"jsonrpc":"2.0","id":2,"method":"info","params":{},"padding":"` + strings.Repeat("p", limit-100) + `"}`)
	if m := c.next(2, time.Minute); m["error"] != nil {
		t.Errorf("info in a line under the limit: %s", m["error"])
	}
}

// TestFlood sends 10000 requests without waiting: every one is answered,
// and memory stays bounded.
func TestFlood(t *testing.T) {
	c := newClient(t, Options{MaxInFlight: 64}, ServeOptions{})
	before := rss(t)
	stop := peakRSS(t)
	const n = 10000
	go func() {
		var b strings.Builder
		for i := range n {
			b.Reset()
			switch i % 4 {
			case 0:
				fmt.Fprintf(&b, `{"jsonrpc":"2.0","method":"info","id":%d}`, i)
			case 1:
				fmt.Fprintf(&b, `{"jsonrpc":"2.0","method":"bogus","id":%d}`, i)
			case 2:
				fmt.Fprintf(&b, `{"jsonrpc":"2.0","method":"exec","params":{"command":"x"},"id":%d}`, i)
			case 3:
				fmt.Fprintf(&b, `{"jsonrpc":"2.0","method":"stat","params":{"path":5},"id":%d}`, i)
			}
			c.send(b.String())
		}
	}()
	c.mu.Lock()
	ok := c.waitCond(2*time.Minute, func() bool { return c.lines >= n })
	got := c.lines
	c.mu.Unlock()
	if !ok {
		t.Fatalf("%d of %d requests answered", got, n)
	}
	for i := range n {
		m := c.next(i, time.Second)
		_, isResult := m["result"]
		if (i%4 == 0) != isResult {
			t.Fatalf("request %d: %v", i, m)
		}
	}
	if growth := stop() - before; growth > 200<<20 {
		t.Errorf("memory grew by %d MiB during the flood", growth>>20)
	}
}
