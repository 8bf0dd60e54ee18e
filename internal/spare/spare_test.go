package spare

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
)

// muxPair returns a client session and counts the streams its server
// accepts.
func muxPair(t *testing.T) (*yamux.Session, func() int) {
	t.Helper()
	a, b := net.Pipe()
	client, err := yamux.Client(a, agentproto.HostMuxConfig())
	if err != nil {
		t.Fatal(err)
	}
	server, err := yamux.Server(b, agentproto.AgentMuxConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	var mu sync.Mutex
	accepted := 0
	go func() {
		for {
			if _, err := server.Accept(); err != nil {
				return
			}
			mu.Lock()
			accepted++
			mu.Unlock()
		}
	}()
	return client, func() int { mu.Lock(); defer mu.Unlock(); return accepted }
}

func TestSpareStream(t *testing.T) {
	ctx := context.Background()
	sess, accepted := muxPair(t)
	sp := New(sess)

	if st := sp.Take(ctx); st != nil {
		t.Fatal("take returned a stream before any refill")
	}
	sp.Refill()
	sp.Refill() // one is already open: no second stream
	first := sp.Take(ctx)
	if first == nil {
		t.Fatal("take after refill returned nil")
	}
	if st := sp.Take(ctx); st != nil {
		t.Fatal("the spare was handed out twice")
	}
	deadline := time.Now().Add(5 * time.Second)
	for accepted() != 1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := accepted(); n != 1 {
		t.Fatalf("server accepted %d streams, want 1", n)
	}

	// A request waits for an open in flight; a second concurrent one does
	// not queue behind it.
	sp.mu.Lock()
	sp.inFlight = true // as refill does before opening
	sp.mu.Unlock()
	got := make(chan *yamux.Stream)
	go func() { got <- sp.Take(ctx) }()
	for {
		sp.mu.Lock()
		taking := sp.taking
		sp.mu.Unlock()
		if taking {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if st := sp.Take(ctx); st != nil {
		t.Fatal("a concurrent take got the stream another take waits for")
	}
	st, err := sess.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	sp.ch <- spareResult{st: st}
	if g := <-got; g != st {
		t.Fatal("the waiting take did not get the stream that was opened")
	}

	// A cancelled wait leaves the outcome to the next request.
	sp.mu.Lock()
	sp.inFlight = true
	sp.mu.Unlock()
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if st := sp.Take(cctx); st != nil {
		t.Fatal("take with a cancelled context returned a stream")
	}
	st2, _ := sess.OpenStream()
	sp.ch <- spareResult{st: st2}
	if g := sp.Take(ctx); g != st2 {
		t.Fatal("the outcome of an abandoned wait was lost")
	}

	// A failed open is reported as no spare, and the next refill retries.
	sess.Close()
	sp.Refill()
	if st := sp.Take(ctx); st != nil {
		t.Fatal("take returned a stream from a closed session")
	}
	sp.mu.Lock()
	inFlight := sp.inFlight
	sp.mu.Unlock()
	if inFlight {
		t.Fatal("a failed open left the spare marked in flight")
	}
}
