// Package outlog keeps the output of a detached sandbox's main command: the
// bytes as they came, in one file that any tool can read, and beside it an
// index of when each part came and on which stream. The index is what lets
// `airlock logs` print stdout and stderr apart, with times, and from a
// time on.
//
// The index is a file of fixed 16-byte records (time in Unix nanoseconds,
// length, stream), each naming the next bytes of the log. Parts of one
// stream that come within a millisecond share a record, so a command that
// writes a byte at a time does not make an index sixteen times its log.
package outlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"
)

// Stream names where output came from.
type Stream uint8

// Streams of a record.
const (
	Stdout Stream = 1
	Stderr Stream = 2
)

func (s Stream) String() string {
	if s == Stderr {
		return "stderr"
	}
	return "stdout"
}

const (
	// MaxLogBytes bounds a log; past it, output is no longer logged.
	MaxLogBytes = 64 << 20
	// maxRecords bounds the index (16 MiB). Past it, parts of the stream
	// of the last record still extend it, and anything else is logged
	// without a record: it reads as stdout at the time of the log's last
	// change.
	maxRecords = 1 << 20
	recordSize = 16
	// coalesce is how close in time two parts of one stream must be to
	// share a record.
	coalesce = time.Millisecond
)

// IndexPath is where the index of the log at path is.
func IndexPath(path string) string { return path + ".idx" }

type record struct {
	at     int64 // Unix nanoseconds
	length uint32
	stream Stream
}

func (r record) encode() []byte {
	b := make([]byte, recordSize)
	binary.LittleEndian.PutUint64(b, uint64(r.at))
	binary.LittleEndian.PutUint32(b[8:], r.length)
	b[12] = byte(r.stream)
	return b
}

func decode(b []byte) record {
	return record{at: int64(binary.LittleEndian.Uint64(b)), length: binary.LittleEndian.Uint32(b[8:]), stream: Stream(b[12])}
}

// Writer appends output to a log and its index. It is not safe for
// concurrent use.
type Writer struct {
	log, idx  *os.File
	logged    int64
	records   int64
	last      record
	truncated bool
}

// Create opens (creating, 0600, never through a symbolic link) the log at
// path and its index, for appending.
func Create(path string) (*Writer, error) {
	log, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open the sandbox log: %w", err)
	}
	// Not O_APPEND: the last record is rewritten in place.
	idx, err := os.OpenFile(IndexPath(path), os.O_WRONLY|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		log.Close()
		return nil, fmt.Errorf("open the sandbox log's index: %w", err)
	}
	w := &Writer{log: log, idx: idx}
	if st, err := log.Stat(); err == nil {
		w.logged = st.Size()
	}
	if st, err := idx.Stat(); err == nil {
		w.records = st.Size() / recordSize
	}
	if w.records > 0 {
		b := make([]byte, recordSize)
		if _, err := idx.ReadAt(b, (w.records-1)*recordSize); err == nil {
			w.last = decode(b)
		}
	}
	return w, nil
}

// Write logs b, which came on stream at t. It reports whether the log is
// full: from then on nothing more is logged.
func (w *Writer) Write(stream Stream, b []byte, t time.Time) (full bool) {
	if w.truncated {
		return true
	}
	if room := MaxLogBytes - w.logged; int64(len(b)) > room {
		b = b[:room]
		w.truncated = true
	}
	w.append(stream, b, t)
	if w.truncated {
		w.append(Stderr, fmt.Appendf(nil, "\n[airlock: log truncated at %d MiB; attach to see further output]\n", MaxLogBytes>>20), t)
	}
	return w.truncated
}

func (w *Writer) append(stream Stream, b []byte, t time.Time) {
	if len(b) == 0 {
		return
	}
	n, _ := w.log.Write(b)
	if n == 0 {
		return
	}
	w.logged += int64(n)
	at := t.UnixNano()
	same := w.records > 0 && w.last.stream == stream && uint64(w.last.length)+uint64(n) <= 1<<32-1
	switch {
	case same && (at-w.last.at < int64(coalesce) || w.records >= maxRecords):
		w.last.length += uint32(n)
		_, _ = w.idx.WriteAt(w.last.encode(), (w.records-1)*recordSize)
	case w.records < maxRecords:
		w.last = record{at: at, length: uint32(n), stream: stream}
		if _, err := w.idx.WriteAt(w.last.encode(), w.records*recordSize); err == nil {
			w.records++
		}
	}
}

// Close closes the log and its index.
func (w *Writer) Close() error {
	return errors.Join(w.log.Close(), w.idx.Close())
}

// Piece is a run of output of one stream with no newline but perhaps at
// its end.
type Piece struct {
	// Time is when the line the piece is part of started to come.
	Time   time.Time
	Stream Stream
	Data   []byte
	// LineStart is true when the piece starts a line of its stream.
	LineStart bool
}

// Reader reads a log and its index from their start, and again from where
// it stopped as they grow.
type Reader struct {
	log, idx *os.File
	// The record being read and how much of it is read.
	rec      int64
	cur      record
	curRead  uint32
	haveCur  bool
	logRead  int64
	lineTime [3]time.Time // per stream, when its open line started
	open     [3]bool      // per stream, whether a line is open
}

// Open opens the log at path, and its index if there is one (a log written
// without one reads as stdout at the time of its last change).
func Open(path string) (*Reader, error) {
	log, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	r := &Reader{log: log}
	if idx, err := os.Open(IndexPath(path)); err == nil {
		r.idx = idx
	}
	return r, nil
}

// Close closes the files.
func (r *Reader) Close() error {
	if r.idx != nil {
		r.idx.Close()
	}
	return r.log.Close()
}

// Next returns the output logged since the last call. With final set, the
// bytes of the log that no record names yet are returned too, as stdout;
// otherwise they wait for their record.
func (r *Reader) Next(final bool) ([]Piece, error) {
	st, err := r.log.Stat()
	if err != nil {
		return nil, err
	}
	size := min(st.Size(), MaxLogBytes+1<<10)
	var out []Piece
	for r.logRead < size {
		if !r.haveCur || r.curRead == r.cur.length {
			if !r.loadRecord() {
				break
			}
		}
		n := min(int64(r.cur.length-r.curRead), size-r.logRead)
		if n <= 0 {
			break
		}
		b := make([]byte, n)
		if _, err := r.log.ReadAt(b, r.logRead); err != nil && !errors.Is(err, io.EOF) {
			return out, err
		}
		r.logRead += n
		r.curRead += uint32(n)
		out = r.split(out, r.cur.stream, time.Unix(0, r.cur.at), b)
	}
	if final && r.logRead < size {
		b := make([]byte, size-r.logRead)
		if _, err := r.log.ReadAt(b, r.logRead); err != nil && !errors.Is(err, io.EOF) {
			return out, err
		}
		r.logRead = size
		out = r.split(out, Stdout, st.ModTime(), b)
	}
	return out, nil
}

// loadRecord moves to the next record, or rereads the current one, which
// may have grown; it reports whether there is more to read.
func (r *Reader) loadRecord() bool {
	if r.idx == nil {
		return false
	}
	b := make([]byte, recordSize)
	if r.haveCur {
		// The last record grows while its stream goes on.
		if _, err := r.idx.ReadAt(b, r.rec*recordSize); err == nil {
			if c := decode(b); c.at == r.cur.at && c.length > r.cur.length {
				r.cur.length = c.length
				return true
			}
		}
		if _, err := r.idx.ReadAt(b, (r.rec+1)*recordSize); err != nil {
			return false
		}
		r.rec++
	} else if _, err := r.idx.ReadAt(b, 0); err != nil {
		return false
	}
	c := decode(b)
	if c.stream != Stdout && c.stream != Stderr {
		c.stream = Stdout
	}
	r.cur, r.curRead, r.haveCur = c, 0, true
	return true
}

// split cuts b, which came on stream at t, after each newline.
func (r *Reader) split(out []Piece, stream Stream, t time.Time, b []byte) []Piece {
	for len(b) > 0 {
		n := len(b)
		for i, c := range b {
			if c == '\n' {
				n = i + 1
				break
			}
		}
		start := !r.open[stream]
		if start {
			r.lineTime[stream] = t
		}
		out = append(out, Piece{Time: r.lineTime[stream], Stream: stream, Data: b[:n:n], LineStart: start})
		r.open[stream] = b[n-1] != '\n'
		b = b[n:]
	}
	return out
}
