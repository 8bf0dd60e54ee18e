package owners

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/image/store"
	"github.com/airlock-sandbox/airlock/internal/image/untar"
)

// Serve is the worker: args are an op and its arguments (see the op
// constants). It runs as root of a user namespace whose maps the host
// wrote, answers on stdout and exits.
func Serve(args []string) {
	// Supplementary groups that came from the host are none of the
	// trees': files it makes take its own gid, 0 here.
	_ = syscall.Setgroups(nil)
	if len(args) == 0 {
		exit(errors.New("no operation"))
	}
	if os.Geteuid() != 0 {
		exit(fmt.Errorf("not root of its user namespace (uid %d): the host did not map it", os.Geteuid()))
	}
	ctx := context.Background()
	op, args := args[0], args[1:]
	switch {
	case op == opApply && len(args) == 2:
		exit(apply(ctx, args[0], args[1]))
	case op == opLink && len(args) == 2:
		answer(resultOf(store.LinkTree(ctx, args[0], args[1])))
	case op == opRemove && len(args) == 1:
		answer(resultOf(store.RemoveTree(args[0])))
	case op == opUsage && len(args) == 1:
		size, files, err := store.Usage(args[0])
		r := resultOf(err)
		r.Size, r.Files = size, files
		answer(r)
	case op == opExec && len(args) >= 1:
		// As root of the namespace, the program keeps its capabilities
		// there through this execution.
		err := unix.Exec(args[0], args, os.Environ())
		exit(fmt.Errorf("execute %s: %w", args[0], err))
	default:
		exit(fmt.Errorf("bad operation %q with %d arguments", op, len(args)))
	}
	os.Exit(0)
}

// answer writes r as the worker's result line.
func answer(r result) {
	b, err := json.Marshal(r)
	if err != nil {
		exit(err)
	}
	if _, err := os.Stdout.Write(append(b, '\n')); err != nil {
		exit(err)
	}
}

// exit ends the worker: with status 0 for a nil err, else printing it.
func exit(err error) {
	if err == nil {
		os.Exit(0)
	}
	fmt.Fprintf(os.Stderr, "airlock image worker: %v\n", err)
	os.Exit(1)
}

// apply applies the layers framed on stdin to dir, keeping owners, and
// answers each with its result; it ends at the end of stdin between
// layers.
func apply(ctx context.Context, dir, optsJSON string) error {
	var opts untar.Options
	if err := json.Unmarshal([]byte(optsJSON), &opts); err != nil {
		return fmt.Errorf("read the options: %w", err)
	}
	opts.KeepOwners = true
	u, newErr := untar.New(dir, opts)
	if newErr == nil {
		defer u.Close()
	}
	in := bufio.NewReaderSize(os.Stdin, 4+maxFrame)
	for {
		if _, err := in.Peek(1); errors.Is(err, io.EOF) {
			return nil
		}
		fr := &frameReader{r: in}
		applyErr := newErr
		if applyErr == nil {
			applyErr = u.Apply(ctx, fr)
		}
		// The rest of the layer, after the tar's end or where it
		// failed, is read through: the next frame begins the next
		// layer.
		if _, err := io.Copy(io.Discard, fr); err != nil {
			return err
		}
		r := resultOf(applyErr)
		if u != nil {
			st := u.Stats()
			r.Stats = &st
		}
		answer(r)
	}
}

// frameReader reads one layer's frames: the end of the layer is its
// end of file, and a stdin that ends inside it is an error.
type frameReader struct {
	r    *bufio.Reader
	left uint32
	end  bool
}

func (f *frameReader) Read(p []byte) (int, error) {
	for f.left == 0 {
		if f.end {
			return 0, io.EOF
		}
		var h [4]byte
		if _, err := io.ReadFull(f.r, h[:]); err != nil {
			return 0, fmt.Errorf("read the layer from the host: %w", noEOF(err))
		}
		f.left = binary.BigEndian.Uint32(h[:])
		if f.left > maxFrame {
			return 0, fmt.Errorf("a frame of %d bytes, more than %d", f.left, maxFrame)
		}
		if f.left == 0 {
			f.end = true
		}
	}
	if uint32(len(p)) > f.left {
		p = p[:f.left]
	}
	n, err := f.r.Read(p)
	f.left -= uint32(n)
	if err != nil {
		return n, fmt.Errorf("read the layer from the host: %w", noEOF(err))
	}
	return n, nil
}

func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
