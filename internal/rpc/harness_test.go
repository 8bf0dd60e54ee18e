package rpc

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/api"
)

// msg is one line from the server, decoded one level deep.
type msg map[string]json.RawMessage

// client drives one session of a Server through pipes, as a client
// process would through stdin and stdout.
type client struct {
	t       testing.TB
	in      *io.PipeWriter
	wmu     sync.Mutex
	served  chan error
	created *created
	// end ends the session's context, as a supervisor that stops does.
	end context.CancelFunc

	mu   sync.Mutex
	cond *sync.Cond
	// sandbox is the last sandbox create made, which readyStream names
	// so that its streams run at once.
	sandbox string
	byID    map[string][]msg
	notes   []msg
	order   []string // ids of responses, in arrival order
	lines   int
	outDone bool
}

// newClient starts a session with opts (AllowCreate and a recording
// Create unless set) and so.
func newClient(t testing.TB, opts Options, so ServeOptions) *client {
	t.Helper()
	c := &client{t: t, served: make(chan error, 1), byID: map[string][]msg{}, created: &created{}}
	c.cond = sync.NewCond(&c.mu)
	if opts.Create == nil {
		opts.Create = c.created.create
	}
	srv := NewServer(opts)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	c.in = inW
	ctx, cancel := context.WithCancel(context.Background())
	c.end = cancel
	go func() {
		err := srv.ServeWith(ctx, inR, outW, so)
		outW.Close()
		c.served <- err
	}()
	go c.readLoop(outR)
	t.Cleanup(func() {
		c.in.Close()
		select {
		case <-c.served:
		case <-time.After(60 * time.Second):
			t.Errorf("Serve did not return within 60 s of the end of its input")
		}
		cancel()
		for _, sb := range c.created.list() {
			sb.Close()
		}
	})
	return c
}

func (c *client) readLoop(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 512<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var m msg
		if err := json.Unmarshal(line, &m); err != nil {
			c.t.Errorf("server wrote a line that is not a JSON object: %v: %.200q", err, line)
			continue
		}
		if string(m["jsonrpc"]) != `"2.0"` {
			c.t.Errorf(`server line without "jsonrpc":"2.0": %.200s`, line)
		}
		c.mu.Lock()
		c.lines++
		if id, ok := m["id"]; ok {
			k := idKey(id)
			c.byID[k] = append(c.byID[k], m)
			c.order = append(c.order, k)
		} else {
			c.notes = append(c.notes, m)
		}
		c.cond.Broadcast()
		c.mu.Unlock()
	}
	if err := sc.Err(); err != nil {
		c.t.Errorf("read server output: %v", err)
	}
	c.mu.Lock()
	c.outDone = true
	c.cond.Broadcast()
	c.mu.Unlock()
}

// send writes one line to the server.
func (c *client) send(line string) {
	c.t.Helper()
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if _, err := io.WriteString(c.in, line+"\n"); err != nil {
		c.t.Fatalf("send %.100q: %v", line, err)
	}
}

// request sends a request with a numeric or string id.
func (c *client) request(id any, method string, params any) {
	c.t.Helper()
	req := map[string]any{"jsonrpc": "2.0", "method": method, "id": id}
	if params != nil {
		req["params"] = params
	}
	b, err := json.Marshal(req)
	if err != nil {
		c.t.Fatal(err)
	}
	c.send(string(b))
}

// waitCond waits, with the lock held, until cond holds or d passes.
func (c *client) waitCond(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	timer := time.AfterFunc(d, func() {
		c.mu.Lock()
		c.cond.Broadcast()
		c.mu.Unlock()
	})
	defer timer.Stop()
	for !cond() {
		if time.Now().After(deadline) || c.outDone {
			return cond()
		}
		c.cond.Wait()
	}
	return true
}

// next returns the next message with this id.
func (c *client) next(id any, d time.Duration) msg {
	c.t.Helper()
	k := idKey(mustJSON(c.t, id))
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.waitCond(d, func() bool { return len(c.byID[k]) > 0 }) {
		c.t.Fatalf("no response with id %s within %s", k, d)
	}
	m := c.byID[k][0]
	c.byID[k] = c.byID[k][1:]
	return m
}

// note returns the first notification for which match holds, removing
// it.
func (c *client) note(d time.Duration, match func(msg) bool) (msg, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var found msg
	ok := c.waitCond(d, func() bool {
		for i, n := range c.notes {
			if match(n) {
				found = n
				c.notes = append(c.notes[:i:i], c.notes[i+1:]...)
				return true
			}
		}
		return false
	})
	return found, ok
}

// call sends a request and returns its (first) response.
func (c *client) call(id any, method string, params any) msg {
	c.t.Helper()
	c.request(id, method, params)
	return c.next(id, 60*time.Second)
}

// result calls and decodes a successful result into v.
func (c *client) result(id any, method string, params any, v any) {
	c.t.Helper()
	m := c.call(id, method, params)
	if e, ok := m["error"]; ok {
		c.t.Fatalf("%s: error %s", method, e)
	}
	if v != nil {
		if err := json.Unmarshal(m["result"], v); err != nil {
			c.t.Fatalf("%s: decode result %s: %v", method, m["result"], err)
		}
	}
}

// create makes a sandbox and returns its id.
// lastSandbox is the last sandbox create made.
func (c *client) lastSandbox() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sandbox
}

func (c *client) create(id any, params map[string]any) string {
	c.t.Helper()
	if params == nil {
		params = map[string]any{}
	}
	var res api.CreateResult
	c.result(id, api.MethodCreate, params, &res)
	if !strings.HasPrefix(res.SandboxID, "sb-") {
		c.t.Fatalf("create: sandbox_id %q", res.SandboxID)
	}
	c.mu.Lock()
	c.sandbox = res.SandboxID
	c.mu.Unlock()
	return res.SandboxID
}

// errorOf decodes the error of m, failing when m has none.
func errorOf(t testing.TB, m msg) api.Error {
	t.Helper()
	raw, ok := m["error"]
	if !ok {
		t.Fatalf("want an error, got %v", m)
	}
	if _, both := m["result"]; both {
		t.Errorf("response has both result and error: %v", m)
	}
	var e struct {
		Code    *int            `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(raw, &e); err != nil || e.Code == nil || e.Message == "" {
		t.Fatalf("malformed error object %s: %v", raw, err)
	}
	var data any
	if len(e.Data) > 0 {
		_ = json.Unmarshal(e.Data, &data)
	}
	return api.Error{Code: *e.Code, Message: e.Message, Data: data}
}

// wantError checks that m is an error with this code.
func wantError(t testing.TB, m msg, code int) api.Error {
	t.Helper()
	e := errorOf(t, m)
	if e.Code != code {
		t.Errorf("error code %d (%s), want %d", e.Code, e.Message, code)
	}
	return e
}

func mustJSON(t testing.TB, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func unb64(t testing.TB, s string) string {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatalf("bad base64 %q: %v", s, err)
	}
	return string(b)
}

// execResult runs an exec and decodes its result.
func (c *client) exec(id any, params map[string]any) api.ExecResult {
	c.t.Helper()
	var res api.ExecResult
	c.result(id, api.MethodExec, params, &res)
	return res
}

// sandboxFor returns the sandbox with this id among those created.
func (c *client) sandboxFor(id string) *airlock.Sandbox {
	c.t.Helper()
	for _, sb := range c.created.list() {
		if sb.ID() == id {
			return sb
		}
	}
	c.t.Fatalf("no sandbox %s was created", id)
	return nil
}

// closeInput ends the session's input and waits for Serve to return.
func (c *client) closeInput(d time.Duration) error {
	c.t.Helper()
	c.in.Close()
	select {
	case err := <-c.served:
		c.served <- err // for the cleanup
		return err
	case <-time.After(d):
		c.t.Fatalf("Serve did not return within %s of the end of input", d)
		return nil
	}
}
