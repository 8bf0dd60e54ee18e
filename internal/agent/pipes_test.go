package agent

import (
	"io"
	"testing"
)

func TestPipePool(t *testing.T) {
	p := &pipePool{ready: make(chan pipe, pipesAhead)}
	// Empty: get makes a pipe on the spot.
	r, w, err := p.get()
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	w.Close()
	p.refill()
	if n := len(p.ready); n != pipesAhead {
		t.Fatalf("refill left %d pipes, want %d", n, pipesAhead)
	}
	p.refill() // full: nothing to do
	for range pipesAhead {
		r, w, err := p.get()
		if err != nil {
			t.Fatal(err)
		}
		// Each pipe works: what is written comes out of the read end.
		if _, err := w.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		w.Close()
		b, err := io.ReadAll(r)
		if err != nil || string(b) != "x" {
			t.Fatalf("read %q, %v; want x", b, err)
		}
		r.Close()
	}
	if n := len(p.ready); n != 0 {
		t.Fatalf("%d pipes left after taking all", n)
	}
}
