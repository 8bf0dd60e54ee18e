package rpc

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"os"
	"syscall"
	"testing"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/api"
	airlockclient "github.com/airlock-sandbox/airlock/client"
)

// pipeConn is one end of a session over two OS pipes, as `airlock rpc`
// gets from its parent.
type pipeConn struct {
	r *os.File
	w *os.File
}

func (p *pipeConn) Read(b []byte) (int, error)  { return p.r.Read(b) }
func (p *pipeConn) Write(b []byte) (int, error) { return p.w.Write(b) }
func (p *pipeConn) Close() error                { p.w.Close(); return p.r.Close() }

// serveClient serves a session over OS pipes in this process and returns
// the Go client driving it, with the session's one sandbox, for profiles
// of the whole request path.
func serveClient(b testing.TB) (*airlockclient.Client, *airlockclient.Sandbox) {
	b.Helper()
	needAgent(b)
	inR, inW, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cr := &created{}
	srv := NewServer(Options{AllowCreate: true, Create: cr.create})
	served := make(chan error, 1)
	go func() {
		served <- srv.Serve(ctx, inR, outW)
		outW.Close()
	}()
	c := airlockclient.NewClient(&pipeConn{r: outR, w: inW}, airlockclient.Options{})
	sb, err := c.Create(ctx, api.CreateParams{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		c.Close()
		<-served
		cancel()
		inR.Close()
		for _, sb := range cr.list() {
			sb.Close()
		}
	})
	return c, sb
}

// BenchmarkFilesThroughRPC writes and reads back a large file through a
// session, as the rpc section of airlock-bench does.
func BenchmarkFilesThroughRPC(b *testing.B) {
	_, sb := serveClient(b)
	ctx := context.Background()
	data := make([]byte, 64<<20)
	rand.NewChaCha8([32]byte{1}).Read(data)
	b.Run("write", func(b *testing.B) {
		defer reportFaults(b)()
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if err := sb.WriteFile(ctx, "/workspace/blob", data, 0o644); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("embed-write", func(b *testing.B) {
		defer reportFaults(b)()
		esb, err := airlock.Create(ctx, airlock.Config{})
		if err != nil {
			b.Fatal(err)
		}
		defer esb.Close()
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if err := esb.WriteFile(ctx, "/workspace/blob", data, 0o644); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("read", func(b *testing.B) {
		defer reportFaults(b)()
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			got, err := sb.ReadFile(ctx, "/workspace/blob")
			if err != nil || !bytes.Equal(got, data) {
				b.Fatalf("read back %d bytes (%v)", len(got), err)
			}
		}
	})
}

// BenchmarkExecThroughRPC runs `true` through a session, and through the
// embed API for comparison.
func BenchmarkExecThroughRPC(b *testing.B) {
	c, sb := serveClient(b)
	ctx := context.Background()
	b.Run("rpc", func(b *testing.B) {
		for b.Loop() {
			if _, err := sb.Run(ctx, api.ExecParams{Argv: []string{"true"}}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("info", func(b *testing.B) {
		for b.Loop() {
			if _, err := c.Info(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("embed", func(b *testing.B) {
		esb, err := airlock.Create(ctx, airlock.Config{})
		if err != nil {
			b.Fatal(err)
		}
		defer esb.Close()
		for b.Loop() {
			if _, err := esb.Run(ctx, airlock.Command{Argv: []string{"true"}}); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		b.Run("start-wait", func(b *testing.B) {
			for b.Loop() {
				p, err := esb.Start(ctx, airlock.Command{Argv: []string{"true"}})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := p.Wait(); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}

var _ io.ReadWriteCloser = (*pipeConn)(nil)

// reportFaults reports the page faults of the process per operation.
func reportFaults(b *testing.B) func() {
	var before syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	return func() {
		var after syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &after)
		b.ReportMetric(float64(after.Minflt-before.Minflt)/float64(b.N), "faults/op")
	}
}
