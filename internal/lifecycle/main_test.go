package lifecycle

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/outlog"
)

func TestMainCommandLogAndAttach(t *testing.T) {
	m := NewMainCommand()
	log := filepath.Join(t.TempDir(), "main.log")
	if err := m.SetLog(log); err != nil {
		t.Fatal(err)
	}
	// Output before anyone attaches is only logged.
	m.Stdout().Write([]byte("early\n"))
	out, stop := m.Attach()
	m.Stdout().Write([]byte("out\n"))
	m.Stderr().Write([]byte("err\n"))
	c := <-out
	if b, _ := base64.StdEncoding.DecodeString(c.Stdout); string(b) != "out\n" || c.Stderr != "" {
		t.Errorf("first chunk = %+v", c)
	}
	c = <-out
	if b, _ := base64.StdEncoding.DecodeString(c.Stderr); string(b) != "err\n" {
		t.Errorf("second chunk = %+v", c)
	}
	stop()
	if _, ok := <-out; ok {
		t.Error("channel still open after stop")
	}
	stop() // twice is fine

	// A client that does not read misses chunks instead of holding memory.
	slow, stopSlow := m.Attach()
	defer stopSlow()
	for range attachBuffer + 100 {
		m.Stdout().Write([]byte("x"))
	}
	if n := len(slow); n != attachBuffer {
		t.Errorf("slow client holds %d chunks, want at most %d", n, attachBuffer)
	}

	code := 3
	m.finish(&airlock.ExecResult{ExitCode: code}, nil)
	res, err := m.Wait()
	if err != nil || res.ExitCode != 3 {
		t.Errorf("Wait = %+v, %v", res, err)
	}
	select {
	case <-m.Done():
	case <-time.After(time.Second):
		t.Fatal("Done not closed")
	}
	// Attaching after the end gets a closed channel at once.
	late, _ := m.Attach()
	if _, ok := <-late; ok {
		t.Error("attach after the end got output")
	}
	if err := m.WriteStdin([]byte("x")); err == nil {
		t.Error("WriteStdin without a started process succeeded")
	}
	b, err := os.ReadFile(log)
	if err != nil || !strings.HasPrefix(string(b), "early\nout\nerr\nxxx") {
		t.Errorf("log = %q, %v", b, err)
	}
}

func TestMainCommandLogBound(t *testing.T) {
	m := NewMainCommand()
	log := filepath.Join(t.TempDir(), "main.log")
	if err := m.SetLog(log); err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	for range outlog.MaxLogBytes>>20 + 3 {
		m.Stdout().Write(chunk)
	}
	m.finish(nil, nil)
	fi, err := os.Stat(log)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() < outlog.MaxLogBytes || fi.Size() > outlog.MaxLogBytes+200 {
		t.Errorf("log is %d bytes, want the %d byte bound plus a note", fi.Size(), outlog.MaxLogBytes)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("log mode %v", fi.Mode().Perm())
	}
	b, _ := os.ReadFile(log)
	if !strings.Contains(string(b[outlog.MaxLogBytes:]), "log truncated") {
		t.Error("no truncation note at the end of the log")
	}
}
