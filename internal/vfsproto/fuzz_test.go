package vfsproto

import (
	"bytes"
	"context"
	"io"
	"reflect"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/vfs"
)

// seedRequests are well-formed requests of every op, for the fuzzers'
// seeds.
func seedRequests() []struct {
	req     request
	payload []byte
} {
	at := &wireTime{Sec: 1, Nsec: 2}
	return []struct {
		req     request
		payload []byte
	}{
		{request{ID: 1, Op: opStat, Path: "/", UID: 1000, GID: 1000, PID: 7}, nil},
		{request{ID: 2, Op: opMkdir, Path: "/d", Mode: 0o755}, nil},
		{request{ID: 3, Op: opCreate, Path: "/d/f", Mode: 0o644}, nil},
		{request{ID: 4, Op: opWrite, Handle: 1, Off: 3}, []byte("hello")},
		{request{ID: 5, Op: opRead, Handle: 1, Len: 16}, nil},
		{request{ID: 6, Op: opFstat, Handle: 1}, nil},
		{request{ID: 7, Op: opFtruncate, Handle: 1, Size: 2}, nil},
		{request{ID: 8, Op: opFsync, Handle: 1}, nil},
		{request{ID: 9, Op: opReaddir, Path: "/d", Count: 1, Bytes: 100}, nil},
		{request{ID: 10, Op: opReaddir, Path: "/d", Cursor: 1}, nil},
		{request{ID: 11, Op: opSymlink, Path: "/d/l", Target: "f"}, nil},
		{request{ID: 12, Op: opReadlink, Path: "/d/l"}, nil},
		{request{ID: 13, Op: opLink, Path: "/d/f", Path2: "/g"}, nil},
		{request{ID: 14, Op: opRename, Path: "/g", Path2: "/h"}, nil},
		{request{ID: 15, Op: opChmod, Path: "/h", Mode: 0o4755}, nil},
		{request{ID: 16, Op: opChown, Path: "/h", Owner: -1, Group: 5}, nil},
		{request{ID: 17, Op: opTruncate, Path: "/h", Size: 10}, nil},
		{request{ID: 18, Op: opUtimens, Path: "/h", ATime: at, MTime: at}, nil},
		{request{ID: 19, Op: opStatfs}, nil},
		{request{ID: 20, Op: opOpen, Path: "/h", Flags: lRDWR | lAPPEND | lCREAT}, nil},
		{request{ID: 21, Op: opInterrupt, Interrupt: 5}, nil},
		{request{ID: 22, Op: opClose, Handle: 1}, nil},
		{request{ID: 23, Op: opRemove, Path: "/h"}, nil},
		{request{ID: 24, Op: opMknod, Path: "/d/p", Mode: sIFIFO | 0o644}, nil},
		{request{ID: 25, Op: opMknod, Path: "/d/s", Mode: sIFSOCK | 0o755}, nil},
		{request{ID: 26, Op: opMknod, Path: "/d/c", Mode: sIFCHR | 0o666}, nil},
	}
}

func FuzzDecodeRequest(f *testing.F) {
	c := newCodec()
	for _, s := range seedRequests() {
		f.Add(requestFrame(c, s.req, s.payload)[4:])
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, payload, err := c.decodeRequest(body)
		if err != nil {
			return
		}
		if len(payload) > len(body) {
			t.Fatal("payload longer than the body")
		}
		// Checks never panic, whatever was decoded.
		_ = checkPath(req.Path)
		_ = checkPath(req.Path2)
		_ = checkTarget(req.Target)
		_, _ = osFlags(req.Flags)
		_, _ = fromWireTime(req.ATime)
		_, _ = ownerID(req.Owner)
		_ = fileMode(req.Mode)
		_, _ = mknodMode(req.Mode)
		// What decoded encodes to what decodes the same.
		again, payload2, err := c.decodeRequest(requestFrame(c, req, payload)[4:])
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if !reflect.DeepEqual(req, again) || !bytes.Equal(payload, payload2) {
			t.Fatalf("round trip: %+v != %+v", req, again)
		}
	})
}

// fuzzConn is a connection whose client sends b and then hangs up, and
// reads nothing of what it is sent.
type fuzzConn struct {
	r io.Reader
}

func (c *fuzzConn) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c *fuzzConn) Write(p []byte) (int, error) { return len(p), nil }
func (c *fuzzConn) Close() error                { return nil }

func FuzzServe(f *testing.F) {
	c := newCodec()
	var all []byte
	for _, s := range seedRequests() {
		fr := requestFrame(c, s.req, s.payload)
		f.Add(fr)
		all = append(all, fr...)
	}
	f.Add(all)
	f.Fuzz(func(t *testing.T, b []byte) {
		srv := NewServer(vfs.NewMemory(vfs.MemoryOptions{MaxBytes: 64 << 20}), ServerOptions{Timeout: 5 * time.Second})
		done := make(chan struct{})
		go func() {
			defer close(done)
			srv.Serve(context.Background(), &fuzzConn{r: bytes.NewReader(b)})
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("Serve hung")
		}
	})
}
