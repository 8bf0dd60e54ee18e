package rpc

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"

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

// BenchmarkExecThroughRPC runs `true` through a session and through the
// embed API, alternated as airlock-bench does, and reports the p50 of
// each and their ratio; and an "info" round trip.
func BenchmarkExecThroughRPC(b *testing.B) {
	c, sb := serveClient(b)
	ctx := context.Background()
	esb, err := airlock.Create(ctx, airlock.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer esb.Close()
	b.Run("alternated", func(b *testing.B) {
		var viaRPC, embed []time.Duration
		for b.Loop() {
			t0 := time.Now()
			if _, err := esb.Run(ctx, airlock.Command{Argv: []string{"true"}}); err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			if _, err := sb.Run(ctx, api.ExecParams{Argv: []string{"true"}}); err != nil {
				b.Fatal(err)
			}
			embed, viaRPC = append(embed, t1.Sub(t0)), append(viaRPC, time.Since(t1))
		}
		e, r := median(embed), median(viaRPC)
		b.ReportMetric(float64(e.Microseconds()), "embed-p50-µs")
		b.ReportMetric(float64(r.Microseconds()), "rpc-p50-µs")
		b.ReportMetric(float64(r)/float64(e), "ratio")
	})
	b.Run("info", func(b *testing.B) {
		for b.Loop() {
			if _, err := c.Info(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[len(d)/2]
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
