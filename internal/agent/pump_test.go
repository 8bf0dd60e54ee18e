//go:build linux

package agent

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
)

// TestPumpSendsWhatTheCommandLeft has a command exit with output still in
// its pipe while the host takes its output slowly (sends block): all of it
// is sent, however long after the exit, and the pump then stops although
// a process left behind still holds the pipe open.
func TestPumpSendsWhatTheCommandLeft(t *testing.T) {
	r, w, err := outputPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// The write end stays open, as a process the command left behind
	// would hold it; the 48 KiB the command wrote fit in the pipe.
	defer w.Close()
	written := bytes.Repeat([]byte("0123456789abcdef"), 3<<10)
	if _, err := w.Write(written); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var sent []byte
	release := make(chan struct{})
	send := func(m agentproto.Msg) error {
		<-release // the host reads slowly
		mu.Lock()
		sent = append(sent, m.Data...)
		mu.Unlock()
		return nil
	}
	exited := &exitClock{done: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		pump(r, agentproto.KStdout, send, exited)
	}()

	// The command exits; its output waits for the host for longer than
	// the drain grace.
	exited.at = time.Now()
	close(exited.done)
	_ = r.SetReadDeadline(time.Now())
	time.Sleep(4 * drainGrace)
	close(release)

	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the pump did not stop after the drain grace")
	}
	mu.Lock()
	defer mu.Unlock()
	if !bytes.Equal(sent, written) {
		t.Fatalf("sent %d bytes of the %d the command wrote", len(sent), len(written))
	}
}
