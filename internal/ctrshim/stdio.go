//go:build linux

package ctrshim

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"sync"
	"syscall"

	"github.com/containerd/fifo"
)

// stdio is a process's standard streams as containerd hands them over:
// the paths of FIFOs it made and reads (or writes, for stdin), or file://
// URIs of files to append to. Empty paths are streams nobody reads.
type stdio struct {
	Stdin, Stdout, Stderr string
	Terminal              bool
}

// openedIO is stdio opened by the shim.
type openedIO struct {
	stdin          io.ReadCloser
	stdout, stderr io.WriteCloser
	closeOnce      sync.Once
}

// open opens the streams: containerd has the other ends of its FIFOs
// open already, so that opening ours does not wait.
func (s stdio) open(ctx context.Context) (_ *openedIO, err error) {
	o := &openedIO{}
	defer func() {
		if err != nil {
			o.close()
		}
	}()
	if s.Stdin != "" {
		p, err := fifoPath(s.Stdin)
		if err != nil {
			return nil, err
		}
		if o.stdin, err = fifo.OpenFifo(ctx, p, syscall.O_RDONLY|syscall.O_NONBLOCK, 0); err != nil {
			return nil, fmt.Errorf("open the process's stdin %s: %w", s.Stdin, err)
		}
	}
	if o.stdout, err = openOutput(ctx, s.Stdout); err != nil {
		return nil, err
	}
	if !s.Terminal {
		if o.stderr, err = openOutput(ctx, s.Stderr); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// fifoPath is the path of a stream that must be a FIFO (stdin).
func fifoPath(uri string) (string, error) {
	u, err := url.Parse(uri)
	if err != nil || u.Scheme == "" || u.Scheme == "fifo" {
		return uri, nil
	}
	return "", fmt.Errorf("stdin %q: only FIFOs are supported for stdin", uri)
}

func openOutput(ctx context.Context, uri string) (io.WriteCloser, error) {
	if uri == "" {
		return nil, nil
	}
	u, err := url.Parse(uri)
	switch {
	case err != nil || u.Scheme == "" || u.Scheme == "fifo":
		w, err := fifo.OpenFifo(ctx, uri, syscall.O_WRONLY, 0)
		if err != nil {
			return nil, fmt.Errorf("open the process's output %s: %w", uri, err)
		}
		return w, nil
	case u.Scheme == "file":
		f, err := os.OpenFile(u.Path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
		if err != nil {
			return nil, fmt.Errorf("open the process's output %s: %w", uri, err)
		}
		return f, nil
	default:
		return nil, fmt.Errorf("output %q: the airlock shim writes a process's output to FIFOs and file:// URIs only, not to logging binaries (%s://)", uri, u.Scheme)
	}
}

// closeStdin ends the process's input.
func (o *openedIO) closeStdin() {
	if o.stdin != nil {
		o.stdin.Close()
	}
}

// close closes every stream; safe more than once.
func (o *openedIO) close() {
	o.closeOnce.Do(func() {
		for _, c := range []io.Closer{o.stdin, o.stdout, o.stderr} {
			if c != nil {
				_ = c.Close()
			}
		}
	})
}

// writer is w, or io.Discard for a stream nobody reads. Once a write to
// w fails, the rest of the output is dropped: a client that detached
// (ctr run -d) closed its end of the FIFO, and the process goes on
// with nobody reading it, rather than being ended by a broken pipe.
func writer(w io.WriteCloser) io.Writer {
	if w == nil {
		return io.Discard
	}
	return &dropOnError{w: w}
}

type dropOnError struct {
	w      io.Writer
	broken bool
}

func (d *dropOnError) Write(b []byte) (int, error) {
	if !d.broken {
		if _, err := d.w.Write(b); err != nil {
			d.broken = true
		}
	}
	return len(b), nil
}
