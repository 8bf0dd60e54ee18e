package agentproto

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"testing"

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
	client, err := yamux.Client(CoalesceWrites(rec), MuxConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := yamux.Server(b, MuxConfig())
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
