package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/unixsock"
)

// fakeServer is the server end of an in-process connection: the test
// reads the client's requests from reqs and writes replies itself.
type fakeServer struct {
	conn net.Conn
	reqs chan *fakeReq
	wmu  sync.Mutex
	bad  chan string // lines that were not JSON-RPC requests
}

type fakeReq struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

func (r *fakeReq) params(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Params, v); err != nil {
		t.Fatalf("params of %s: %v: %s", r.Method, err, r.Params)
	}
}

func newFake(t *testing.T, opts Options) (*Client, *fakeServer) {
	t.Helper()
	a, b := net.Pipe()
	c := NewClient(a, opts)
	f := &fakeServer{conn: b, reqs: make(chan *fakeReq, 10000), bad: make(chan string, 10)}
	go f.readLoop()
	t.Cleanup(func() {
		c.Close()
		b.Close()
		select {
		case line := <-f.bad:
			t.Errorf("the client sent a malformed line: %q", line)
		default:
		}
	})
	return c, f
}

func (f *fakeServer) readLoop() {
	sc := bufio.NewScanner(f.conn)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var r fakeReq
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil || r.Method == "" || len(r.ID) == 0 {
			select {
			case f.bad <- sc.Text():
			default:
			}
			continue
		}
		f.reqs <- &r
	}
	close(f.reqs)
}

// next returns the next request.
func (f *fakeServer) next(t *testing.T) *fakeReq {
	t.Helper()
	select {
	case r, ok := <-f.reqs:
		if !ok {
			t.Fatal("connection closed while waiting for a request")
		}
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no request from the client within 10s")
	}
	return nil
}

// expect returns the next request and checks its method.
func (f *fakeServer) expect(t *testing.T, method string) *fakeReq {
	t.Helper()
	r := f.next(t)
	if r.Method != method {
		t.Fatalf("request %s, want %s", r.Method, method)
	}
	return r
}

func (f *fakeServer) send(v any) {
	line, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	f.wmu.Lock()
	defer f.wmu.Unlock()
	f.conn.Write(append(line, '\n'))
}

func (f *fakeServer) reply(id json.RawMessage, result any) {
	raw, err := json.Marshal(result)
	if err != nil {
		panic(err)
	}
	f.send(api.Response{JSONRPC: "2.0", ID: id, Result: raw})
}

func (f *fakeServer) replyErr(id json.RawMessage, code int, msg string, data any) {
	f.send(api.Response{JSONRPC: "2.0", ID: id, Error: &api.Error{Code: code, Message: msg, Data: data}})
}

func (f *fakeServer) notify(method string, params any) {
	f.send(api.Notification{JSONRPC: "2.0", Method: method, Params: params})
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestOutOfOrderResponses(t *testing.T) {
	c, f := newFake(t, Options{})
	ctx := testCtx(t)
	const n = 5
	errs := make(chan error, n)
	for i := range n {
		go func() {
			var got map[string]int
			err := c.Call(ctx, "echo", map[string]int{"n": i}, &got)
			if err == nil && got["n"] != i {
				err = fmt.Errorf("call %d got %v", i, got)
			}
			errs <- err
		}()
	}
	var reqs []*fakeReq
	for range n {
		reqs = append(reqs, f.next(t))
	}
	for i := n - 1; i >= 0; i-- {
		f.reply(reqs[i].ID, reqs[i].Params)
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

func TestConcurrentCalls(t *testing.T) {
	c, f := newFake(t, Options{})
	ctx := testCtx(t)
	go func() {
		for r := range f.reqs {
			go func() {
				time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
				f.reply(r.ID, r.Params)
			}()
		}
	}()
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Lines of very different sizes, so that interleaving would
			// show as malformed lines.
			want := strings.Repeat(fmt.Sprint(i%10), i*1000)
			var got string
			if err := c.Call(ctx, "echo", want, &got); err != nil {
				t.Errorf("call %d: %v", i, err)
			} else if got != want {
				t.Errorf("call %d: got %d bytes, want %d", i, len(got), len(want))
			}
		}()
	}
	wg.Wait()
}

func TestExecResult(t *testing.T) {
	c, f := newFake(t, Options{})
	ctx := testCtx(t)
	sb := c.Sandbox("sb-1")
	go func() {
		r := f.expect(t, api.MethodExec)
		var p api.ExecParams
		r.params(t, &p)
		if p.SandboxID != "sb-1" || p.Command != "echo hello" {
			t.Errorf("exec params %+v", p)
		}
		timeout := "timeout"
		f.reply(r.ID, api.ExecResult{ExitCode: 137, Stdout: b64("hello\n"), Stderr: b64("bye"), DurationMs: 1500,
			KilledBy: &timeout, Signal: 9, LimitsHit: []string{"pids"}, StdoutTruncated: true})
		r = f.expect(t, api.MethodExec)
		f.reply(r.ID, api.ExecResult{ExitCode: 0})
	}()
	res, err := sb.Exec(ctx, "echo hello")
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Stdout) != "hello\n" || string(res.Stderr) != "bye" || res.ExitCode != 137 || res.KilledBy != "timeout" ||
		res.Signal != 9 || res.Duration != 1500*time.Millisecond || !res.StdoutTruncated || len(res.LimitsHit) != 1 {
		t.Errorf("result %+v", res)
	}
	res, err = sb.Run(ctx, api.ExecParams{Argv: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.KilledBy != "" || len(res.Stdout) != 0 {
		t.Errorf("result %+v", res)
	}
}

func TestStreaming(t *testing.T) {
	c, f := newFake(t, Options{})
	ctx := testCtx(t)
	p, err := c.Sandbox("sb-1").Start(ctx, api.ExecParams{Command: "x", Mode: api.ModeNotifications})
	if err != nil {
		t.Fatal(err)
	}
	r := f.expect(t, api.MethodExecStream)
	var params api.ExecParams
	r.params(t, &params)
	if params.Mode != api.ModeResponses || params.SandboxID != "sb-1" {
		t.Errorf("exec_stream params %+v", params)
	}
	if p.Stdin() != nil {
		t.Error("Stdin() without OpenStdin is not nil")
	}
	f.reply(r.ID, api.ExecChunk{Stdout: b64("hel")})
	f.reply(r.ID, api.ExecChunk{Stderr: b64("warn")})
	f.reply(r.ID, api.ExecChunk{Stdout: b64("lo\n")})
	f.reply(r.ID, api.ExecResult{ExitCode: 3, Done: true, DurationMs: 7})
	out, err := io.ReadAll(p.Stdout())
	if err != nil || string(out) != "hello\n" {
		t.Errorf("stdout %q, %v", out, err)
	}
	errOut, err := io.ReadAll(p.Stderr())
	if err != nil || string(errOut) != "warn" {
		t.Errorf("stderr %q, %v", errOut, err)
	}
	<-p.Done()
	res, err := p.Wait()
	if err != nil || res.ExitCode != 3 || res.Duration != 7*time.Millisecond {
		t.Errorf("Wait: %+v, %v", res, err)
	}
	// Responses for the finished id are ignored; the client still works.
	f.reply(r.ID, api.ExecChunk{Stdout: b64("late")})
	go func() { r := f.next(t); f.reply(r.ID, "ok") }()
	if err := c.Call(ctx, "ping", nil, nil); err != nil {
		t.Fatal(err)
	}
}

func TestStreamingErrorResponse(t *testing.T) {
	c, f := newFake(t, Options{})
	ctx := testCtx(t)
	p, err := c.Sandbox("").Start(ctx, api.ExecParams{Argv: []string{"nosuch"}})
	if err != nil {
		t.Fatal(err)
	}
	r := f.expect(t, api.MethodExecStream)
	f.replyErr(r.ID, api.CodeCommandFailed, "nosuch: command not found", api.CommandFailedData{ExitCode: 127})
	if _, err := p.Wait(); !IsCommandNotFound(err) {
		t.Errorf("Wait: %v, want command not found", err)
	}
	if b, err := io.ReadAll(p.Stdout()); err != nil || len(b) != 0 {
		t.Errorf("stdout %q, %v; want EOF", b, err)
	}
}

func TestOutputOverflow(t *testing.T) {
	c, f := newFake(t, Options{MaxBufferedOutput: 1024})
	ctx := testCtx(t)
	p, err := c.Sandbox("sb-1").Start(ctx, api.ExecParams{Command: "yes"})
	if err != nil {
		t.Fatal(err)
	}
	r := f.expect(t, api.MethodExecStream)
	chunk := b64(strings.Repeat("y", 600))
	f.reply(r.ID, api.ExecChunk{Stdout: chunk})
	f.reply(r.ID, api.ExecChunk{Stderr: chunk}) // 1200 bytes: over the bound
	cr := f.expect(t, api.MethodCancel)
	var ref api.ExecRefParams
	cr.params(t, &ref)
	if string(ref.ID) != string(r.ID) || ref.SandboxID != "sb-1" {
		t.Errorf("cancel params %+v, want id %s", ref, r.ID)
	}
	f.reply(cr.ID, struct{}{})
	f.reply(r.ID, api.ExecChunk{Stdout: chunk}) // after the cancel: ignored
	f.reply(r.ID, api.ExecResult{ExitCode: 137, Done: true})

	_, err = io.ReadAll(p.Stdout())
	if !errors.Is(err, ErrOutputOverflow) || !strings.Contains(err.Error(), "more than 1 KiB buffered") {
		t.Errorf("read: %v, want ErrOutputOverflow", err)
	}
	if _, err := p.Wait(); !errors.Is(err, ErrOutputOverflow) {
		t.Errorf("Wait: %v, want ErrOutputOverflow", err)
	}
	t.Log(err)
}

func TestStartWith(t *testing.T) {
	c, f := newFake(t, Options{})
	ctx := testCtx(t)
	var stdout, stderr bytes.Buffer
	input := strings.Repeat("i", 2*maxStdinChunk+10)
	p, err := c.Sandbox("").StartWith(ctx, api.ExecParams{Argv: []string{"cat"}}, strings.NewReader(input), &stdout, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if p.Stdout() != nil || p.Stderr() != nil || p.Stdin() != nil {
		t.Error("StartWith process exposes its streams")
	}
	r := f.expect(t, api.MethodExecStream)
	var params api.ExecParams
	r.params(t, &params)
	if !params.OpenStdin {
		t.Error("open_stdin not set")
	}
	var got []byte
	for {
		sr := f.expect(t, api.MethodStdin)
		var sp api.StdinParams
		sr.params(t, &sp)
		if string(sp.ID) != string(r.ID) {
			t.Fatalf("stdin for id %s, want %s", sp.ID, r.ID)
		}
		data, _ := base64.StdEncoding.DecodeString(sp.Data)
		if len(data) > maxStdinChunk {
			t.Errorf("stdin chunk of %d bytes", len(data))
		}
		got = append(got, data...)
		f.reply(sr.ID, struct{}{})
		if sp.Close {
			break
		}
	}
	if string(got) != input {
		t.Errorf("stdin: got %d bytes, want %d", len(got), len(input))
	}
	for range 100 {
		f.reply(r.ID, api.ExecChunk{Stdout: b64(strings.Repeat("o", 500))})
	}
	f.reply(r.ID, api.ExecChunk{Stderr: b64("e")})
	f.reply(r.ID, api.ExecResult{Done: true})
	res, err := p.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 || stdout.Len() != 50000 || stderr.String() != "e" {
		t.Errorf("exit %d, stdout %d bytes, stderr %q", res.ExitCode, stdout.Len(), stderr.String())
	}
}

func TestStdinChunksAndSignals(t *testing.T) {
	c, f := newFake(t, Options{})
	ctx := testCtx(t)
	p, err := c.Sandbox("sb-2").Start(ctx, api.ExecParams{Argv: []string{"cat"}, TTY: true})
	if err != nil {
		t.Fatal(err)
	}
	r := f.expect(t, api.MethodExecStream)
	go func() {
		for range 5 {
			req := f.next(t)
			switch req.Method {
			case api.MethodSignal:
				var sp api.SignalParams
				req.params(t, &sp)
				if string(sp.Signal) != `"TERM"` && string(sp.Signal) != `9` {
					t.Errorf("signal %s", sp.Signal)
				}
			case api.MethodResize:
				var rp api.ResizeParams
				req.params(t, &rp)
				if rp.Rows != 40 || rp.Cols != 120 || rp.SandboxID != "sb-2" || string(rp.ID) != string(r.ID) {
					t.Errorf("resize %+v", rp)
				}
			}
			f.reply(req.ID, struct{}{})
		}
	}()
	n, err := p.Stdin().Write(make([]byte, maxStdinChunk+1))
	if err != nil || n != maxStdinChunk+1 {
		t.Errorf("stdin write: %d, %v", n, err)
	}
	if err := p.Signal(ctx, "TERM"); err != nil {
		t.Error(err)
	}
	if err := p.Signal(ctx, "9"); err != nil {
		t.Error(err)
	}
	if err := p.Resize(ctx, 40, 120); err != nil {
		t.Error(err)
	}
	f.reply(r.ID, api.ExecResult{Done: true})
	if _, err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Stdin().Write([]byte("x")); !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("write after exit: %v, want os.ErrProcessDone", err)
	}
}

func TestDroppedEvents(t *testing.T) {
	c, f := newFake(t, Options{EventBuffer: 4})
	ctx := testCtx(t)
	go func() {
		r := f.expect(t, api.MethodSubscribe)
		f.reply(r.ID, api.SubscribeResult{Types: []string{"exec"}})
		r = f.next(t)
		for i := range 100 {
			f.notify(api.NotifyEvent, map[string]any{
				"type": "exec", "timestamp": 1700000000 + i, "sandbox_id": "sb-1",
				"exec": map[string]any{"command": []string{"echo", "hi"}, "exit_code": i, "duration_ms": 3},
			})
		}
		f.notify(api.NotifyEvent, map[string]any{"type": "file", "file": map[string]any{"op": "write", "path": "/x", "size": 5}})
		f.reply(r.ID, "ok")
	}()
	if err := c.Subscribe(ctx, EventExec); err != nil {
		t.Fatal(err)
	}
	// Nobody reads Events: the call's response still arrives.
	if err := c.Call(ctx, "ping", nil, nil); err != nil {
		t.Fatal(err)
	}
	if got := c.DroppedEvents(); got != 97 {
		t.Errorf("DroppedEvents = %d, want 97", got)
	}
	for i := range 4 {
		ev := <-c.Events()
		if ev.Type != EventExec || ev.Exec == nil || ev.Exec.ExitCode != i || ev.SandboxID != "sb-1" ||
			ev.Exec.Command[0] != "echo" || ev.Time().Unix() != int64(1700000000+i) || len(ev.Raw.Exec) == 0 {
			t.Errorf("event %d: %+v", i, ev)
		}
	}
	select {
	case ev := <-c.Events():
		t.Errorf("unexpected event %+v", ev)
	default:
	}
}

func TestServerGoneMidCall(t *testing.T) {
	c, f := newFake(t, Options{})
	ctx := testCtx(t)
	p, err := c.Sandbox("").Start(ctx, api.ExecParams{Command: "sleep 100"})
	if err != nil {
		t.Fatal(err)
	}
	f.expect(t, api.MethodExecStream)
	errc := make(chan error, 1)
	go func() { errc <- c.Call(ctx, "ping", nil, nil) }()
	f.expect(t, "ping")
	f.conn.Close()

	if err := <-errc; !errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), "server closed the connection") {
		t.Errorf("pending call: %v, want ErrClosed", err)
	}
	if _, err := p.Wait(); !errors.Is(err, ErrClosed) {
		t.Errorf("Wait: %v, want ErrClosed", err)
	}
	if _, err := io.ReadAll(p.Stdout()); !errors.Is(err, ErrClosed) {
		t.Errorf("read: %v, want ErrClosed", err)
	}
	<-c.Done()
	if _, ok := <-c.Events(); ok {
		t.Error("Events is not closed")
	}
	if err := c.Call(ctx, "ping", nil, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("call after: %v, want ErrClosed", err)
	}
	if !errors.Is(c.Err(), ErrClosed) {
		t.Errorf("Err() = %v", c.Err())
	}
}

func TestTypedErrors(t *testing.T) {
	c, f := newFake(t, Options{})
	ctx := testCtx(t)
	sb := c.Sandbox("sb-1")
	go func() {
		r := f.expect(t, api.MethodReadFile)
		f.replyErr(r.ID, api.CodeFileError, "/nope: no such file", api.FileErrorData{Kind: FileNotFound, Path: "/nope"})
		r = f.expect(t, api.MethodMkdir)
		f.replyErr(r.ID, api.CodeFileError, "/a: exists", api.FileErrorData{Kind: FileExists, Path: "/a"})
		r = f.expect(t, api.MethodExec)
		f.replyErr(r.ID, api.CodeCommandFailed, "nosuch: not found", api.CommandFailedData{ExitCode: 127})
		r = f.expect(t, api.MethodStat)
		f.replyErr(r.ID, api.CodeNotRunning, "sandbox sb-1 has stopped", nil)
		r = f.expect(t, api.MethodCreate)
		f.replyErr(r.ID, api.CodeUnsupported, "isolation vm is not available", nil)
	}()
	_, err := sb.ReadFile(ctx, "/nope")
	var e *Error
	if !errors.Is(err, fs.ErrNotExist) || !errors.As(err, &e) || e.Method != api.MethodReadFile || errors.Is(err, ErrNotFound) {
		t.Errorf("ReadFile: %v, want fs.ErrNotExist", err)
	}
	if d, ok := e.FileError(); !ok || d.Path != "/nope" {
		t.Errorf("FileError() = %+v, %v", d, ok)
	}
	if err := sb.Mkdir(ctx, "/a", 0, false); !errors.Is(err, fs.ErrExist) || errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Mkdir: %v, want fs.ErrExist", err)
	}
	_, err = sb.Run(ctx, api.ExecParams{Argv: []string{"nosuch"}})
	if !IsCommandNotFound(err) || !errors.Is(err, ErrCommandFailed) || !errors.As(err, &e) || e.ExitCode() != 127 {
		t.Errorf("Run: %v, want command not found", err)
	}
	if _, err := sb.Stat(ctx, "/"); !errors.Is(err, ErrNotRunning) || e.Message == "" {
		t.Errorf("Stat: %v, want ErrNotRunning", err)
	}
	_, err = c.Create(ctx, api.CreateParams{Isolation: "vm"})
	if !errors.Is(err, ErrUnsupported) || !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Create: %v, want ErrUnsupported", err)
	}
	if !strings.Contains(err.Error(), "isolation vm is not available") || !strings.Contains(err.Error(), "create") {
		t.Errorf("message %q", err)
	}
}

func TestFiles(t *testing.T) {
	c, f := newFake(t, Options{})
	ctx := testCtx(t)
	sb := c.Sandbox("sb-1")
	data := bytes.Repeat([]byte{0, 1, 2, 255}, 1000)
	go func() {
		r := f.expect(t, api.MethodWriteFile)
		var wp api.WriteFileParams
		r.params(t, &wp)
		if wp.Mode != 0o4755 || wp.Path != "/w/f" || wp.SandboxID != "sb-1" || wp.Content != base64.StdEncoding.EncodeToString(data) {
			t.Errorf("write_file params %+v", wp)
		}
		f.reply(r.ID, api.WriteFileResult{Size: int64(len(data))})
		r = f.expect(t, api.MethodReadFile)
		f.reply(r.ID, api.ReadFileResult{Content: base64.StdEncoding.EncodeToString(data), Size: int64(len(data))})
		r = f.expect(t, api.MethodReadFile)
		f.reply(r.ID, api.ReadFileResult{})
		r = f.expect(t, api.MethodListFiles)
		f.reply(r.ID, api.ListFilesResult{Files: []api.FileInfo{{Name: "f", Size: 4000, Mode: 0o644}}})
		r = f.expect(t, api.MethodStat)
		f.reply(r.ID, api.FileInfo{Name: "w", IsDir: true, Mode: uint32(fs.ModeDir | 0o755)})
		r = f.expect(t, api.MethodRemove)
		var rp api.RemoveParams
		r.params(t, &rp)
		if !rp.Recursive || rp.Path != "/w" {
			t.Errorf("remove params %+v", rp)
		}
		f.reply(r.ID, struct{}{})
		r = f.expect(t, api.MethodClose)
		f.reply(r.ID, struct{}{})
	}()
	if err := sb.WriteFile(ctx, "/w/f", data, 0o755|fs.ModeSetuid); err != nil {
		t.Fatal(err)
	}
	got, err := sb.ReadFile(ctx, "/w/f")
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("ReadFile: %d bytes, %v", len(got), err)
	}
	if got, err := sb.ReadFile(ctx, "/empty"); err != nil || got == nil || len(got) != 0 {
		t.Errorf("ReadFile of an empty file: %v, %v", got, err)
	}
	files, err := sb.ListFiles(ctx, "/w")
	if err != nil || len(files) != 1 || files[0].Name != "f" {
		t.Errorf("ListFiles: %+v, %v", files, err)
	}
	info, err := sb.Stat(ctx, "/w")
	if err != nil || !fs.FileMode(info.Mode).IsDir() {
		t.Errorf("Stat: %+v, %v", info, err)
	}
	if err := sb.Remove(ctx, "/w", true); err != nil {
		t.Error(err)
	}
	if err := sb.Close(ctx); err != nil {
		t.Error(err)
	}
}

func TestContextCancelSendsCancel(t *testing.T) {
	c, f := newFake(t, Options{})
	sb := c.Sandbox("sb-1")

	ctx, cancel := context.WithCancel(testCtx(t))
	errc := make(chan error, 1)
	go func() {
		_, err := sb.Exec(ctx, "sleep 100")
		errc <- err
	}()
	r := f.expect(t, api.MethodExec)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("Exec: %v, want context.Canceled", err)
	}
	cr := f.expect(t, api.MethodCancel)
	var ref api.ExecRefParams
	cr.params(t, &ref)
	if string(ref.ID) != string(r.ID) || ref.SandboxID != "sb-1" {
		t.Errorf("cancel %+v, want id %s", ref, r.ID)
	}
	f.reply(cr.ID, struct{}{})
	// The command's own answer comes late and is ignored.
	f.replyErr(r.ID, api.CodeCancelled, "cancelled", nil)

	ctx, cancel = context.WithCancel(testCtx(t))
	p, err := sb.Start(ctx, api.ExecParams{Command: "sleep 100"})
	if err != nil {
		t.Fatal(err)
	}
	r = f.expect(t, api.MethodExecStream)
	f.reply(r.ID, api.ExecChunk{Stdout: b64("partialmore")})
	buf := make([]byte, 7)
	if _, err := io.ReadFull(p.Stdout(), buf); err != nil || string(buf) != "partial" {
		t.Fatalf("read %q, %v", buf, err)
	}
	cancel()
	cr = f.expect(t, api.MethodCancel)
	cr.params(t, &ref)
	if string(ref.ID) != string(r.ID) {
		t.Errorf("cancel %+v, want id %s", ref, r.ID)
	}
	if _, err := p.Wait(); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait: %v, want context.Canceled", err)
	}
	// What arrived before the cancel can still be read.
	if out, err := io.ReadAll(p.Stdout()); string(out) != "more" || !errors.Is(err, context.Canceled) {
		t.Errorf("read: %q, %v", out, err)
	}

	// Other calls are abandoned without a cancel.
	ctx, cancel = context.WithCancel(testCtx(t))
	go func() { errc <- sb.Mkdir(ctx, "/x", 0, true) }()
	f.expect(t, api.MethodMkdir)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("Mkdir: %v, want context.Canceled", err)
	}
	go func() { r := f.next(t); f.reply(r.ID, r.Method) }()
	var m string
	if err := c.Call(testCtx(t), "ping", nil, &m); err != nil || m != "ping" {
		t.Errorf("next request was %q (%v), want ping", m, err)
	}
}

func TestLineTooLong(t *testing.T) {
	c, f := newFake(t, Options{MaxLineBytes: 1024})
	errc := make(chan error, 1)
	go func() { errc <- c.Call(testCtx(t), "ping", nil, nil) }()
	r := f.next(t)
	go f.reply(r.ID, strings.Repeat("x", 2000))
	err := <-errc
	if !errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), "longer than 1024 bytes") {
		t.Errorf("call: %v, want a protocol error", err)
	}
}

func TestNotJSON(t *testing.T) {
	c, f := newFake(t, Options{})
	errc := make(chan error, 1)
	go func() { errc <- c.Call(testCtx(t), "ping", nil, nil) }()
	f.next(t)
	go f.conn.Write([]byte("\nhello from a stray print\n"))
	if err := <-errc; !errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), "stray print") {
		t.Errorf("call: %v, want a protocol error", err)
	}
}

func TestCallRefusesStreams(t *testing.T) {
	c, _ := newFake(t, Options{})
	if err := c.Call(testCtx(t), api.MethodExecStream, api.ExecParams{}, nil); err == nil {
		t.Error("Call(exec_stream) succeeded")
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestStartWithFailingWriter(t *testing.T) {
	c, f := newFake(t, Options{})
	ctx := testCtx(t)
	var stderr bytes.Buffer
	p, err := c.Sandbox("sb-1").StartWith(ctx, api.ExecParams{Command: "x"}, nil, failingWriter{}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	r := f.expect(t, api.MethodExecStream)
	f.reply(r.ID, api.ExecChunk{Stdout: b64("out"), Stderr: b64("err")})
	cr := f.expect(t, api.MethodCancel)
	f.reply(cr.ID, struct{}{})
	f.reply(r.ID, api.ExecChunk{Stdout: b64("more")})
	f.reply(r.ID, api.ExecResult{ExitCode: 143, Done: true})
	if _, err := p.Wait(); err == nil || !strings.Contains(err.Error(), "copying stdout: disk full") {
		t.Errorf("Wait: %v, want the writer's error", err)
	}
	if stderr.String() != "err" {
		t.Errorf("stderr %q", stderr.String())
	}
}

func TestAttach(t *testing.T) {
	c, f := newFake(t, Options{})
	ctx, cancel := context.WithCancel(testCtx(t))
	p, err := c.Sandbox("").Attach(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := f.expect(t, api.MethodAttach)
	errc := make(chan error, 1)
	go func() {
		_, err := io.WriteString(p.Stdin(), "in")
		errc <- err
	}()
	sr := f.expect(t, api.MethodStdin)
	var sp api.StdinParams
	sr.params(t, &sp)
	if string(sp.ID) != string(r.ID) || sp.Data != b64("in") {
		t.Errorf("stdin %+v, want id %s", sp, r.ID)
	}
	f.reply(sr.ID, struct{}{})
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	f.reply(r.ID, api.ExecChunk{Stdout: b64("out")})
	buf := make([]byte, 3)
	if _, err := io.ReadFull(p.Stdout(), buf); err != nil || string(buf) != "out" {
		t.Fatalf("read %q, %v", buf, err)
	}
	var ap api.AttachParams
	r.params(t, &ap)
	if ap.Mode != api.ModeResponses || ap.SandboxID != "" {
		t.Errorf("attach params %+v", ap)
	}
	// Leaving detaches.
	cancel()
	if _, err := p.Wait(); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait: %v, want context.Canceled", err)
	}
	cr := f.expect(t, api.MethodCancel)
	var ref api.ExecRefParams
	cr.params(t, &ref)
	if string(ref.ID) != string(r.ID) {
		t.Errorf("cancel %+v, want id %s", ref, r.ID)
	}
}

func TestDial(t *testing.T) {
	// Longer than a socket address holds: reached through the directory.
	dir := t.TempDir() + "/" + strings.Repeat("d", 100)
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := dir + "/ctl.sock"
	ln, err := unixsock.Listen(path)
	if err != nil {
		t.Skipf("socket path %s: %v", path, err)
	}
	defer ln.Close()
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		sc := bufio.NewScanner(conn)
		for sc.Scan() {
			var r fakeReq
			json.Unmarshal(sc.Bytes(), &r)
			var line []byte
			if r.Method == api.MethodInfo {
				line, _ = json.Marshal(api.Response{JSONRPC: "2.0", ID: r.ID, Result: json.RawMessage(`{"protocol":1,"max_message_bytes":100}`)})
			} else {
				line, _ = json.Marshal(api.Response{JSONRPC: "2.0", ID: r.ID, Result: r.Params})
			}
			conn.Write(append(line, '\n'))
		}
	}()
	c, err := Dial(testCtx(t), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var got string
	if err := c.Call(testCtx(t), "echo", "hi", &got); err != nil || got != "hi" {
		t.Errorf("Call: %q, %v", got, err)
	}
	// Dial learnt the server's message limit.
	if err := c.Call(testCtx(t), "echo", strings.Repeat("x", 200), nil); !errors.Is(err, ErrLimitExceeded) {
		t.Errorf("Call of 200 bytes: %v, want ErrLimitExceeded", err)
	}
	if _, err := Dial(testCtx(t), dir+"/nothing.sock", Options{}); err == nil || !strings.Contains(err.Error(), "is the sandbox still running") {
		t.Errorf("Dial of a missing socket: %v", err)
	}
}

func TestSocketPath(t *testing.T) {
	t.Setenv("AIRLOCK_HOME", "/h")
	if p, err := SocketPath("sb-1"); err != nil || p != "/h/sandboxes/sb-1/ctl.sock" {
		t.Errorf("SocketPath = %q, %v", p, err)
	}
	for _, id := range []string{"", "..", "a/b"} {
		if _, err := SocketPath(id); err == nil {
			t.Errorf("SocketPath(%q) succeeded", id)
		}
	}
}
