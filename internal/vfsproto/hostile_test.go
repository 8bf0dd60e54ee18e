package vfsproto

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/vfs"
)

// rawClient speaks the protocol by hand, as a hostile guest would.
type rawClient struct {
	t     testing.TB
	conn  net.Conn
	br    *bufio.Reader
	codec codec
	// served gets Serve's result.
	served chan error
}

func newRaw(t testing.TB, p vfs.Provider, opts ServerOptions) *rawClient {
	t.Helper()
	a, b := net.Pipe()
	r := &rawClient{t: t, conn: b, br: bufio.NewReader(b), codec: newCodec(), served: make(chan error, 1)}
	go func() { r.served <- NewServer(p, opts).Serve(context.Background(), a) }()
	t.Cleanup(func() {
		b.Close()
		select {
		case <-r.served:
		case <-time.After(10 * time.Second):
			t.Error("server did not stop")
		}
	})
	return r
}

// requestFrame encodes req and payload as a frame.
func requestFrame(c codec, req request, payload []byte) []byte {
	hdr, err := c.enc.Marshal(&req)
	if err != nil {
		panic(err)
	}
	b := binary.BigEndian.AppendUint32(nil, uint32(len(hdr)+len(payload)))
	b = append(b, hdr...)
	return append(b, payload...)
}

// rawFrame is a frame of body as it is.
func rawFrame(body []byte) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
}

func (r *rawClient) write(b []byte) {
	r.t.Helper()
	r.conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := r.conn.Write(b); err != nil {
		r.t.Fatalf("write: %v", err)
	}
}

func (r *rawClient) send(req request, payload []byte) {
	r.t.Helper()
	r.write(requestFrame(r.codec, req, payload))
}

// recv returns the next response, skipping the greeting and
// invalidations.
func (r *rawClient) recv() (response, []byte) {
	r.t.Helper()
	r.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		n, err := readFrameLen(r.br)
		if err != nil {
			r.t.Fatalf("read: %v", err)
		}
		body := make([]byte, n)
		if err := readFull(r.br, body); err != nil {
			r.t.Fatalf("read: %v", err)
		}
		resp, payload, err := r.codec.decodeResponse(body)
		if err != nil {
			r.t.Fatalf("decode: %v", err)
		}
		if resp.Kind == kindResponse {
			return resp, payload
		}
	}
}

// call sends req and returns its response.
func (r *rawClient) call(req request, payload []byte) (response, []byte) {
	r.t.Helper()
	r.send(req, payload)
	resp, data := r.recv()
	if resp.ID != req.ID {
		r.t.Fatalf("response %d to request %d", resp.ID, req.ID)
	}
	return resp, data
}

// wantServeError waits for Serve to fail.
func (r *rawClient) wantServeError() {
	r.t.Helper()
	// Drain what the server writes so that it never blocks on us.
	go func() {
		buf := make([]byte, 4096)
		for {
			if _, err := r.conn.Read(buf); err != nil {
				return
			}
		}
	}()
	select {
	case err := <-r.served:
		if err == nil {
			r.t.Fatal("Serve returned nil")
		}
		r.served <- err
	case <-time.After(10 * time.Second):
		r.t.Fatal("Serve did not stop")
	}
}

func TestHostileFrames(t *testing.T) {
	c := newCodec()
	for name, b := range map[string][]byte{
		"oversized length":   {0xff, 0xff, 0xff, 0xff},
		"one byte too long":  binary.BigEndian.AppendUint32(nil, MaxFrame+1),
		"garbage":            rawFrame([]byte{0xff, 0xfe, 0x00}),
		"not a map":          rawFrame([]byte{0x01}),
		"empty body":         rawFrame(nil),
		"huge string claim":  rawFrame([]byte{0xa1, 0x06, 0x7b, 0x0f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 'a'}),
		"huge array claim":   rawFrame([]byte{0xa2, 0x01, 0x01, 0x11, 0x9b, 0x0f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}),
		"deep nesting":       rawFrame([]byte(strings.Repeat("\x81", 100) + "\x01")),
		"indefinite length":  rawFrame([]byte{0xbf, 0x01, 0x01, 0xff}),
		"duplicate keys":     rawFrame([]byte{0xa2, 0x01, 0x01, 0x01, 0x02}),
		"tag":                rawFrame([]byte{0xc1, 0xa1, 0x01, 0x01}),
		"wrong type":         rawFrame([]byte{0xa1, 0x01, 0x61, 'x'}),
		"negative id":        rawFrame([]byte{0xa1, 0x01, 0x20}),
		"no id":              requestFrame(c, request{Op: opStat, Path: "/"}, nil),
		"truncated body":     binary.BigEndian.AppendUint32(nil, 100),
		"op out of range":    rawFrame([]byte{0xa2, 0x01, 0x01, 0x02, 0x19, 0x01, 0x00}),
		"uid out of range":   rawFrame([]byte{0xa2, 0x01, 0x01, 0x03, 0x1b, 0x01, 0, 0, 0, 0, 0, 0, 0}),
		"truncated header":   {0, 0},
		"trailing half body": append(requestFrame(c, request{ID: 1, Op: opStatfs}, nil), 0, 0, 0, 9, 1),
	} {
		t.Run(name, func(t *testing.T) {
			r := newRaw(t, newTestFS(), ServerOptions{})
			r.write(b)
			if name == "truncated body" || name == "truncated header" || name == "trailing half body" {
				r.conn.Close()
			}
			r.wantServeError()
		})
	}
}

func TestHostileRequests(t *testing.T) {
	tfs := newTestFS()
	tfs.nodes["/f"] = &testNode{mode: 0o644, data: []byte("data")}
	r := newRaw(t, tfs, ServerOptions{})
	id := uint64(0)
	errno := func(req request, payload []byte) uint32 {
		t.Helper()
		id++
		req.ID = id
		resp, _ := r.call(req, payload)
		return resp.Errno
	}
	const (
		eINVAL       = 22
		eNAMETOOLONG = 36
		eNOSYS       = 38
		eBADF        = 9
		eNOENT       = 2
		ePERM        = 1
	)
	for _, tc := range []struct {
		name string
		req  request
		data []byte
		want uint32
	}{
		{"op 0", request{}, nil, eNOSYS},
		{"unknown op", request{Op: 200}, nil, eNOSYS},
		{"op after the last", request{Op: opMax}, nil, eNOSYS},
		{"relative path", request{Op: opStat, Path: "f"}, nil, eINVAL},
		{"dot-dot", request{Op: opStat, Path: "/../etc/passwd"}, nil, eINVAL},
		{"empty path", request{Op: opMkdir}, nil, eINVAL},
		{"nul", request{Op: opStat, Path: "/f\x00"}, nil, eINVAL},
		{"long name", request{Op: opStat, Path: "/" + strings.Repeat("x", 256)}, nil, eNAMETOOLONG},
		{"long path", request{Op: opStat, Path: strings.Repeat("/x", MaxPath)}, nil, eNAMETOOLONG},
		{"rename to bad", request{Op: opRename, Path: "/f", Path2: "/a/./b"}, nil, eINVAL},
		{"link to bad", request{Op: opLink, Path: "/f", Path2: ""}, nil, eINVAL},
		{"long target", request{Op: opSymlink, Path: "/l", Target: strings.Repeat("t", MaxTarget+1)}, nil, eNAMETOOLONG},
		{"nul target", request{Op: opSymlink, Path: "/l", Target: "a\x00"}, nil, eINVAL},
		{"bad access mode", request{Op: opOpen, Path: "/f", Flags: 3}, nil, eINVAL},
		{"chown beyond uid_t", request{Op: opChown, Path: "/f", Owner: 1 << 40}, nil, eINVAL},
		{"chown -2", request{Op: opChown, Path: "/f", Group: -2}, nil, eINVAL},
		{"negative truncate", request{Op: opTruncate, Path: "/f", Size: -1}, nil, eINVAL},
		{"nanoseconds", request{Op: opUtimens, Path: "/f", MTime: &wireTime{Nsec: 1e9}}, nil, eINVAL},
		{"negative nanoseconds", request{Op: opUtimens, Path: "/f", ATime: &wireTime{Nsec: -1}}, nil, eINVAL},
		{"unknown handle", request{Op: opRead, Handle: 77, Len: 10}, nil, eBADF},
		{"handle 0", request{Op: opFstat}, nil, eBADF},
		{"close unknown", request{Op: opClose, Handle: 1 << 63}, nil, eBADF},
		{"readdir of nothing", request{Op: opReaddir, Path: "/nope", Count: 1 << 31, Bytes: 1 << 31}, nil, eNOENT},
		{"mknod of a character device", request{Op: opMknod, Path: "/null", Mode: sIFCHR | 0o666}, nil, ePERM},
		{"mknod of a block device", request{Op: opMknod, Path: "/sda", Mode: sIFBLK | 0o600}, nil, ePERM},
		{"mknod of a directory", request{Op: opMknod, Path: "/d", Mode: sIFDIR | 0o755}, nil, eINVAL},
		{"mknod of no type", request{Op: opMknod, Path: "/r", Mode: 0o644}, nil, eINVAL},
		{"mknod of a bad type", request{Op: opMknod, Path: "/r", Mode: 0o030000 | 0o644}, nil, eINVAL},
		{"mknod with bits beyond the mode", request{Op: opMknod, Path: "/p", Mode: 1<<20 | sIFIFO | 0o644}, nil, eINVAL},
		{"mknod of a bad path", request{Op: opMknod, Path: "/a/../p", Mode: sIFIFO | 0o644}, nil, eINVAL},
		{"mknod of a long path", request{Op: opMknod, Path: strings.Repeat("/x", MaxPath), Mode: sIFIFO | 0o644}, nil, eNAMETOOLONG},
	} {
		if got := errno(tc.req, tc.data); got != tc.want {
			t.Errorf("%s: errno %d, want %d", tc.name, got, tc.want)
		}
	}
	for _, p := range []string{"/null", "/sda", "/d", "/r", "/p"} {
		if _, err := tfs.Stat(context.Background(), p); err == nil {
			t.Errorf("a refused mknod made %s", p)
		}
	}

	id++
	resp, _ := r.call(request{ID: id, Op: opOpen, Path: "/f", Flags: lRDWR | 0o2000000 | 0o40000}, nil)
	if resp.Errno != 0 || resp.Handle == 0 {
		t.Fatalf("open: %+v", resp)
	}
	h := resp.Handle
	for _, tc := range []struct {
		name string
		req  request
		data []byte
		want uint32
	}{
		{"read too long", request{Op: opRead, Handle: h, Len: MaxData + 1}, nil, eINVAL},
		{"read of 4 GiB", request{Op: opRead, Handle: h, Len: 1<<32 - 1}, nil, eINVAL},
		{"negative offset", request{Op: opRead, Handle: h, Len: 1, Off: -1}, nil, eINVAL},
		{"offset overflow", request{Op: opRead, Handle: h, Len: 10, Off: 1<<63 - 5}, nil, eINVAL},
		{"write too long", request{Op: opWrite, Handle: h}, make([]byte, MaxData+1), eINVAL},
		{"write offset overflow", request{Op: opWrite, Handle: h, Off: 1<<63 - 1}, []byte("ab"), eINVAL},
		{"negative ftruncate", request{Op: opFtruncate, Handle: h, Size: -5}, nil, eINVAL},
	} {
		if got := errno(tc.req, tc.data); got != tc.want {
			t.Errorf("%s: errno %d, want %d", tc.name, got, tc.want)
		}
	}
	// A read of a small file for a large length allocates no more than
	// the bound, and returns what there is.
	id++
	resp, data := r.call(request{ID: id, Op: opRead, Handle: h, Len: MaxData}, nil)
	if resp.Errno != 0 || string(data) != "data" || !resp.EOF {
		t.Fatalf("read: %+v %q", resp, data)
	}
	// Handle ids are never reused within a connection.
	id++
	if resp, _ := r.call(request{ID: id, Op: opClose, Handle: h}, nil); resp.Errno != 0 {
		t.Fatalf("close: %+v", resp)
	}
	id++
	resp, _ = r.call(request{ID: id, Op: opOpen, Path: "/f"}, nil)
	if resp.Handle == h || resp.Handle == 0 {
		t.Fatalf("handle %d reused", h)
	}
	// An interrupt of nothing, or of a request that is over, is nothing.
	r.send(request{ID: 999, Op: opInterrupt, Interrupt: 12345}, nil)
	id++
	if resp, _ := r.call(request{ID: id, Op: opStat, Path: "/"}, nil); resp.Errno != 0 {
		t.Fatalf("stat after interrupt: %+v", resp)
	}
	// Duplicate ids in flight get a response each.
	r.send(request{ID: 5000, Op: opStat, Path: "/"}, nil)
	r.send(request{ID: 5000, Op: opStat, Path: "/f"}, nil)
	for range 2 {
		if resp, _ := r.recv(); resp.ID != 5000 || resp.Errno != 0 {
			t.Fatalf("duplicate id: %+v", resp)
		}
	}
}

// countFS counts the requests executing at once, each taking a moment.
type countFS struct {
	*testFS
	now, most, total atomic.Int64
}

func (c *countFS) enter() func() {
	n := c.now.Add(1)
	c.total.Add(1)
	for {
		m := c.most.Load()
		if n <= m || c.most.CompareAndSwap(m, n) {
			break
		}
	}
	return func() { c.now.Add(-1) }
}

func (c *countFS) Stat(ctx context.Context, p string) (vfs.FileInfo, error) {
	defer c.enter()()
	time.Sleep(time.Millisecond)
	return vfs.FileInfo{Name: strings.Repeat("n", 200), Mode: 0o644}, nil
}

// A client that sends without ever reading responses neither grows the
// server's goroutines beyond MaxInflight nor keeps it forever.
func TestUnreadResponses(t *testing.T) {
	cfs := &countFS{testFS: newTestFS()}
	r := newRaw(t, cfs, ServerOptions{WriteTimeout: 300 * time.Millisecond})
	go func() {
		var batch []byte
		for i := range 10000 {
			batch = append(batch, requestFrame(r.codec, request{ID: uint64(i + 1), Op: opStat, Path: "/x"}, nil)...)
			if len(batch) > 32<<10 {
				if _, err := r.conn.Write(batch); err != nil {
					return
				}
				batch = batch[:0]
			}
		}
		r.conn.Write(batch)
	}()
	select {
	case err := <-r.served:
		if err == nil {
			t.Fatal("Serve returned nil")
		}
		r.served <- err
	case <-time.After(20 * time.Second):
		t.Fatal("Serve did not give up on a client that never reads")
	}
	if most := cfs.most.Load(); most > MaxInflight {
		t.Fatalf("%d requests executed at once", most)
	}
	if total := cfs.total.Load(); total >= 10000 {
		t.Fatalf("all %d requests executed: no backpressure", total)
	}
	t.Logf("%d requests executed, at most %d at once", cfs.total.Load(), cfs.most.Load())
}

// Reads of 1 MiB that the client never takes hold no more memory than
// the server's budget.
func TestUnreadReadsBounded(t *testing.T) {
	tfs := newTestFS()
	tfs.nodes["/big"] = &testNode{mode: 0o644, data: make([]byte, MaxData)}
	r := newRaw(t, tfs, ServerOptions{WriteTimeout: time.Minute})
	id := uint64(1)
	resp, _ := r.call(request{ID: id, Op: opOpen, Path: "/big"}, nil)
	if resp.Errno != 0 {
		t.Fatalf("open: %+v", resp)
	}
	h := resp.Handle

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	var sent atomic.Int64
	go func() {
		for i := range 10000 {
			if _, err := r.conn.Write(requestFrame(r.codec, request{ID: uint64(i + 10), Op: opRead, Handle: h, Len: MaxData}, nil)); err != nil {
				return
			}
			sent.Add(1)
		}
	}()
	// Wait until the server stops taking requests.
	for last := int64(-1); ; {
		time.Sleep(300 * time.Millisecond)
		n := sent.Load()
		if n == last {
			break
		}
		last = n
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("%d reads of 1 MiB sent, heap grew by %d MiB", sent.Load(), grew>>20)
	if sent.Load() >= 10000 {
		t.Fatal("the server took every request")
	}
	if grew > DefaultInflightBytes+16<<20 {
		t.Fatalf("heap grew by %d MiB", grew>>20)
	}
	r.conn.Close()
}

// A client that disconnects with requests executing leaves no handle
// open, and Serve returns.
func TestDisconnectMidRequest(t *testing.T) {
	b := &blockFS{testFS: newTestFS(), release: make(chan struct{})}
	r := newRaw(t, b, ServerOptions{Timeout: time.Second})
	r.call(request{ID: 1, Op: opCreate, Path: "/f"}, nil)
	r.send(request{ID: 2, Op: opStat, Path: "/honest"}, nil)
	waitFor(t, func() bool { return b.now.Load() == 1 })
	r.conn.Close()
	select {
	case err := <-r.served:
		if err != nil && !errors.Is(err, syscall.ECONNRESET) {
			t.Logf("serve: %v", err)
		}
		r.served <- err
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return")
	}
	if n := b.open.Load(); n != 0 {
		t.Fatalf("%d handles open", n)
	}
	if b.ctxDone.Load() != 1 {
		t.Fatal("the executing request's context was not cancelled")
	}
	close(b.release)
}
