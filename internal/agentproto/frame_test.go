package agentproto

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	c := NewConn(&buf)
	in := Request{Op: OpExec, Exec: &ExecRequest{Argv: []string{"sh", "-c", "echo hi"}, Env: []string{"A=1"}, TTY: true, Rows: 24, Cols: 80, Timeout: time.Second}}
	if err := c.Write(in); err != nil {
		t.Fatal(err)
	}
	msg := Msg{K: KExit, Exit: &Exit{Code: 3, Signal: 9, TimedOut: true, CPUTime: time.Millisecond, PeakRSS: 1 << 20}}
	if err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	var out Request
	if err := c.Read(&out); err != nil {
		t.Fatal(err)
	}
	if out.Op != OpExec || out.Exec == nil || strings.Join(out.Exec.Argv, " ") != "sh -c echo hi" || out.Exec.Timeout != time.Second || !out.Exec.TTY {
		t.Fatalf("request mismatch: %+v %+v", out, out.Exec)
	}
	var m Msg
	if err := c.Read(&m); err != nil {
		t.Fatal(err)
	}
	if m.K != KExit || m.Exit == nil || *m.Exit != *msg.Exit {
		t.Fatalf("msg mismatch: %+v", m)
	}
	if err := c.Read(&m); err != io.EOF {
		t.Fatalf("want io.EOF at a clean boundary, got %v", err)
	}
}

func TestOversizedFrameRejected(t *testing.T) {
	var b bytes.Buffer
	binary.Write(&b, binary.BigEndian, uint32(MaxFrame+1))
	c := NewConn(&b)
	var m Msg
	err := c.Read(&m)
	if err == nil || !strings.Contains(err.Error(), "exceeds") {
		t.Fatalf("want size error, got %v", err)
	}
	var w bytes.Buffer
	if err := NewConn(&w).Write(Msg{K: KData, Data: make([]byte, MaxFrame)}); err == nil {
		t.Fatal("writing an oversized frame must fail")
	}
}

func TestTruncatedFrame(t *testing.T) {
	var b bytes.Buffer
	binary.Write(&b, binary.BigEndian, uint32(10))
	b.WriteString("abc")
	var m Msg
	if err := NewConn(&b).Read(&m); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("want unexpected EOF, got %v", err)
	}
}

func TestErrorMapping(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code Code
		is   error
	}{
		{fs.ErrNotExist, CodeNotFound, fs.ErrNotExist},
		{&fs.PathError{Op: "open", Path: "/x", Err: syscall.ENOENT}, CodeNotFound, fs.ErrNotExist},
		{&fs.PathError{Op: "open", Path: "/x", Err: syscall.EACCES}, CodePermission, fs.ErrPermission},
		{&fs.PathError{Op: "open", Path: "/x", Err: syscall.EISDIR}, CodeIsDir, nil},
		{&fs.PathError{Op: "write", Path: "/x", Err: syscall.ENOSPC}, CodeNoSpace, nil},
		// Go files ENOTEMPTY under fs.ErrExist; the errno is more precise.
		{&fs.PathError{Op: "remove", Path: "/x", Err: syscall.ENOTEMPTY}, CodeNotEmpty, nil},
		{&os.LinkError{Op: "rename", Old: "/a", New: "/x", Err: syscall.EEXIST}, CodeExists, fs.ErrExist},
		{&fs.PathError{Op: "open", Path: "/usr/x", Err: syscall.EROFS}, CodePermission, fs.ErrPermission},
		{fmt.Errorf("write file: %w", &fs.PathError{Op: "mkdir", Path: "/x", Err: syscall.ENOTDIR}), CodeNotDir, nil},
		{errors.New("boom"), CodeInternal, nil},
	} {
		e := ToError(tc.err)
		if e.Code != tc.code {
			t.Errorf("%v: code %s, want %s", tc.err, e.Code, tc.code)
		}
		if tc.is != nil && !errors.Is(e, tc.is) {
			t.Errorf("%v: errors.Is(%v) false", tc.err, tc.is)
		}
	}
}

// FuzzFrame feeds arbitrary bytes to the decoder that the host uses on
// frames from the agent: it must never panic or allocate past MaxFrame.
func FuzzFrame(f *testing.F) {
	var b bytes.Buffer
	c := NewConn(&b)
	_ = c.Write(Msg{K: KStdout, Data: []byte("hello")})
	_ = c.Write(Msg{K: KList, Files: []FileInfo{{Name: "a", Size: 1}}})
	_ = c.Write(Ready{Version: Version, Notes: []string{"x"}})
	_ = c.Write(Boot{Version: Version, ID: "sb-1", Root: RootSpec{Etc: map[string][]byte{"hosts": []byte("x")}}})
	f.Add(b.Bytes())
	f.Add([]byte{0, 0, 0, 1, 0xa0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, mk := range []func() any{
			func() any { return new(Msg) },
			func() any { return new(Request) },
			func() any { return new(Ready) },
			func() any { return new(Boot) },
		} {
			c := NewSplitConn(bytes.NewReader(data), io.Discard)
			for i := 0; i < 8; i++ {
				if err := c.Read(mk()); err != nil {
					break
				}
			}
		}
	})
}
