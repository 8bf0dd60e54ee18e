package agentproto

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
)

// recordingConn records the size and the first bytes of every Write.
type recordingConn struct {
	net.Conn
	mu     sync.Mutex
	writes [][]byte
}

func (r *recordingConn) Write(p []byte) (int, error) {
	r.mu.Lock()
	r.writes = append(r.writes, bytes.Clone(p))
	r.mu.Unlock()
	return r.Conn.Write(p)
}

func (r *recordingConn) snapshot() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]byte(nil), r.writes...)
}

func TestCoalesceWrites(t *testing.T) {
	a, b := net.Pipe()
	rec := &recordingConn{Conn: a}
	client, err := yamux.Client(CoalesceWrites(rec), HostMuxConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := yamux.Server(b, AgentMuxConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()

	small := []byte("hello, agent")
	large := bytes.Repeat([]byte{7}, coalesceMax+1000)
	got := make(chan []byte, 1)
	go func() {
		st, err := server.Accept()
		if err != nil {
			got <- nil
			return
		}
		data, _ := io.ReadAll(st)
		got <- data
	}()

	st, err := client.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Write(small); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Write(large); err != nil {
		t.Fatal(err)
	}
	st.Close()
	if data := <-got; !bytes.Equal(data, append(bytes.Clone(small), large...)) {
		t.Fatalf("server read %d bytes, want %d intact", len(data), len(small)+len(large))
	}

	var sawSmall, sawLargeHeader bool
	writes := rec.snapshot()
	for k := 0; k < len(writes); k++ {
		w := writes[k]
		if len(w) < muxHeaderSize {
			t.Fatalf("write %d of %d bytes is shorter than a frame header", k, len(w))
		}
		typ, n := w[1], binary.BigEndian.Uint32(w[8:12])
		switch {
		case typ != muxTypeData || n == 0:
			if len(w) != muxHeaderSize {
				t.Errorf("control frame written as %d bytes, want a bare header", len(w))
			}
		case int(n) <= coalesceMax:
			if len(w) != muxHeaderSize+int(n) {
				t.Errorf("data frame of %d bytes written as %d bytes, want header and body together", n, len(w))
			}
			sawSmall = sawSmall || bytes.Equal(w[muxHeaderSize:], small)
		default:
			if len(w) != muxHeaderSize || k+1 >= len(writes) || len(writes[k+1]) != int(n) {
				t.Errorf("frame of %d bytes not written as its header then its body", n)
			}
			sawLargeHeader = true
			k++ // the body
		}
	}
	if !sawSmall || !sawLargeHeader {
		t.Errorf("writes did not include the small frame (%v) and a large frame header (%v)", sawSmall, sawLargeHeader)
	}
}

// TestMuxSlowHostReadsClosedStream has the agent answer a request and
// close its stream while the host does not read it, for longer than
// yamux's close timeout was ever set here (a host stopped, swapped out or
// throttled): the host then reads the whole answer, not a reset.
func TestMuxSlowHostReadsClosedStream(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for seconds")
	}
	a, b := net.Pipe()
	client, err := yamux.Client(a, HostMuxConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := yamux.Server(b, AgentMuxConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()

	answer := bytes.Repeat([]byte("result "), 1000)
	answered := make(chan error, 1)
	go func() {
		st, err := server.Accept()
		if err != nil {
			answered <- err
			return
		}
		var req [4]byte
		if _, err := io.ReadFull(st, req[:]); err != nil {
			answered <- err
			return
		}
		_, err = st.Write(answer)
		st.Close()
		answered <- err
	}()
	st, err := client.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Write([]byte("exec")); err != nil {
		t.Fatal(err)
	}
	if err := <-answered; err != nil {
		t.Fatalf("agent: %v", err)
	}
	time.Sleep(6 * time.Second)
	got, err := io.ReadAll(st)
	if err != nil || !bytes.Equal(got, answer) {
		t.Fatalf("host read %d bytes, %v; want the whole answer of %d bytes", len(got), err, len(answer))
	}
}
