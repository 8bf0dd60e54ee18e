package vfsproto

import (
	"bufio"
	"context"
	"errors"
	"io"
	"sync"
	"time"
)

// bufPool keeps frame buffers in three sizes, so that a stream of 4 KiB
// reads does not hold megabytes and a stream of 1 MiB reads does not
// allocate each time.
type bufPool struct {
	small, medium, large sync.Pool
}

const (
	smallBuf  = 4 << 10
	mediumBuf = 64 << 10
	largeBuf  = 4 + MaxFrame
)

// get returns a buffer of length n, n at most largeBuf.
func (p *bufPool) get(n int) *[]byte {
	var pool *sync.Pool
	var size int
	switch {
	case n <= smallBuf:
		pool, size = &p.small, smallBuf
	case n <= mediumBuf:
		pool, size = &p.medium, mediumBuf
	default:
		pool, size = &p.large, largeBuf
	}
	if b, ok := pool.Get().(*[]byte); ok {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, max(n, size))
	return &b
}

// put gives b back; b is not used after.
func (p *bufPool) put(b *[]byte) {
	if b == nil {
		return
	}
	switch cap(*b) {
	case smallBuf:
		p.small.Put(b)
	case mediumBuf:
		p.medium.Put(b)
	case largeBuf:
		p.large.Put(b)
	}
}

// outFrame is a frame waiting to be written: b, which lies in buf if buf
// is not nil, and done, called once it is written or dropped.
type outFrame struct {
	b    []byte
	buf  *[]byte
	done func()
}

var errWriterClosed = errors.New("vfsproto: connection closed")

// frameWriter writes the frames that many goroutines hand it, in one
// goroutine, batching those that queue up into one flush.
type frameWriter struct {
	bw      *bufio.Writer
	conn    io.Closer
	pool    *bufPool
	ch      chan outFrame
	stop    chan struct{}
	done    chan struct{}
	err     error // set before done is closed
	timeout time.Duration
	once    sync.Once
}

// newFrameWriter starts a writer on conn. With a timeout, a batch that
// takes longer than that to write closes conn: the peer stopped reading.
func newFrameWriter(conn io.WriteCloser, pool *bufPool, timeout time.Duration) *frameWriter {
	fw := &frameWriter{
		bw:      bufio.NewWriterSize(conn, 64<<10),
		conn:    conn,
		pool:    pool,
		ch:      make(chan outFrame, MaxInflight),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
		timeout: timeout,
	}
	go fw.loop()
	return fw
}

func (fw *frameWriter) loop() {
	err := fw.run()
	fw.err = err
	close(fw.done)
	// Release what is still queued; senders see done from now on.
	for {
		select {
		case f := <-fw.ch:
			fw.finish(f)
		default:
			return
		}
	}
}

func (fw *frameWriter) run() error {
	for {
		var f outFrame
		select {
		case f = <-fw.ch:
		case <-fw.stop:
			return errWriterClosed
		}
		var timer *time.Timer
		if fw.timeout > 0 {
			timer = time.AfterFunc(fw.timeout, func() { fw.conn.Close() })
		}
		_, err := fw.bw.Write(f.b)
		fw.finish(f)
	batch:
		for err == nil {
			select {
			case f = <-fw.ch:
				_, err = fw.bw.Write(f.b)
				fw.finish(f)
			default:
				break batch
			}
		}
		if err == nil {
			err = fw.bw.Flush()
		}
		if timer != nil && !timer.Stop() && err == nil {
			err = errors.New("vfsproto: write timed out")
		}
		if err != nil {
			return err
		}
	}
}

func (fw *frameWriter) finish(f outFrame) {
	fw.pool.put(f.buf)
	if f.done != nil {
		f.done()
	}
}

// send queues f. It fails once the writer has stopped, or when ctx is done
// before f could be queued; f is released either way.
func (fw *frameWriter) send(ctx context.Context, f outFrame) error {
	select {
	case <-fw.done:
		fw.finish(f)
		return fw.err
	default:
	}
	select {
	case fw.ch <- f:
		return nil
	case <-fw.done:
		fw.finish(f)
		return fw.err
	case <-ctx.Done():
		fw.finish(f)
		return ctx.Err()
	}
}

// trySend queues f if there is room, and drops it otherwise.
func (fw *frameWriter) trySend(f outFrame) {
	select {
	case fw.ch <- f:
	default:
		fw.finish(f)
	}
}

// close stops the writer; frames still queued are dropped.
func (fw *frameWriter) close() {
	fw.once.Do(func() { close(fw.stop) })
	<-fw.done
}
