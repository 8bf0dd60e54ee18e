package vfsproto

import (
	"context"
	"fmt"
	"net"
	"testing"

	"github.com/airlock-sandbox/airlock/vfs"
)

// benchFile makes a client over a Memory holding an 8 MiB file, and
// returns a handle on it.
func benchFile(b *testing.B, serial bool) vfs.Handle {
	m := vfs.NewMemory(vfs.MemoryOptions{})
	ctx := context.Background()
	h, err := m.Create(ctx, "/f", 0o644)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := h.WriteAt(ctx, make([]byte, 8<<20), 0); err != nil {
		b.Fatal(err)
	}
	h.Close()
	// A socket pair, as a yamux stream over a real connection would be,
	// rather than net.Pipe's unbuffered hand-over.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	srv := NewServer(m, ServerOptions{})
	go func() {
		conn, err := ln.Accept()
		if err == nil {
			srv.Serve(context.Background(), conn)
		}
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	c := NewClient(conn, ClientOptions{Serial: serial})
	b.Cleanup(func() { c.Close() })
	fh, err := c.Open(ctx, "/f", 0, 0)
	if err != nil {
		b.Fatal(err)
	}
	return fh
}

func BenchmarkRead(b *testing.B) {
	for _, size := range []int{4 << 10, 128 << 10, 1 << 20} {
		for _, serial := range []bool{false, true} {
			b.Run(fmt.Sprintf("size=%dK/serial=%v", size>>10, serial), func(b *testing.B) {
				h := benchFile(b, serial)
				b.SetBytes(int64(size))
				b.SetParallelism(4)
				b.RunParallel(func(pb *testing.PB) {
					buf := make([]byte, size)
					off := int64(0)
					for pb.Next() {
						if _, err := h.ReadAt(context.Background(), buf, off); err != nil {
							b.Error(err)
							return
						}
						off = (off + int64(size)) % (8 << 20)
					}
				})
			})
		}
	}
}

func BenchmarkStat(b *testing.B) {
	for _, serial := range []bool{false, true} {
		b.Run(fmt.Sprintf("serial=%v", serial), func(b *testing.B) {
			h := benchFile(b, serial)
			c := h.(*Handle).c
			b.SetParallelism(4)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := c.Stat(context.Background(), "/f"); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
