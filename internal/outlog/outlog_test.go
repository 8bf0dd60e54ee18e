package outlog

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func text(ps []Piece, s Stream) string {
	var b strings.Builder
	for _, p := range ps {
		if p.Stream == s {
			b.Write(p.Data)
		}
	}
	return b.String()
}

func TestStreamsTimesAndLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "main.log")
	w, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1000, 0)
	w.Write(Stdout, []byte("one\ntw"), t0)
	w.Write(Stderr, []byte("err"), t0.Add(time.Second))
	w.Write(Stdout, []byte("o\n"), t0.Add(2*time.Second))
	w.Write(Stderr, []byte("or\n"), t0.Add(3*time.Second))
	// Within a millisecond: one record.
	w.Write(Stdout, []byte("a"), t0.Add(4*time.Second))
	w.Write(Stdout, []byte("b\n"), t0.Add(4*time.Second+time.Microsecond))
	if w.records != 5 {
		t.Errorf("%d records, want 5", w.records)
	}

	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ps, err := r.Next(false)
	if err != nil {
		t.Fatal(err)
	}
	if got := text(ps, Stdout); got != "one\ntwo\nab\n" {
		t.Errorf("stdout %q", got)
	}
	if got := text(ps, Stderr); got != "error\n" {
		t.Errorf("stderr %q", got)
	}
	// A line's pieces carry the time it started, and only its first
	// piece starts it.
	var lines []string
	for _, p := range ps {
		if p.LineStart {
			lines = append(lines, p.Stream.String()+"@"+p.Time.Sub(t0).String())
		} else if p.Time != t0 && p.Time != t0.Add(time.Second) {
			t.Errorf("continuation %q at %v, want its line's start", p.Data, p.Time.Sub(t0))
		}
	}
	if got := strings.Join(lines, " "); got != "stdout@0s stdout@0s stderr@1s stdout@4s" {
		t.Errorf("line starts: %s", got)
	}

	// More output is read from where the reader stopped, including the
	// growth of the record it read last.
	w.Write(Stdout, []byte("c\n"), t0.Add(4*time.Second+2*time.Microsecond))
	w.Write(Stderr, []byte("late\n"), t0.Add(5*time.Second))
	ps, _ = r.Next(false)
	if got := text(ps, Stdout) + "|" + text(ps, Stderr); got != "c\n|late\n" {
		t.Errorf("after more output: %q", got)
	}
	w.Close()
}

func TestWithoutIndexAndUnindexedTail(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "main.log")
	os.WriteFile(path, []byte("old\nlog\n"), 0o600)
	r, _ := Open(path)
	ps, _ := r.Next(false)
	if len(ps) != 0 {
		t.Errorf("bytes without a record were returned before the end: %+v", ps)
	}
	ps, _ = r.Next(true)
	if got := text(ps, Stdout); got != "old\nlog\n" {
		t.Errorf("a log without an index: %q", got)
	}
	r.Close()
}

func TestTruncatedAtTheBound(t *testing.T) {
	path := filepath.Join(t.TempDir(), "main.log")
	w, _ := Create(path)
	chunk := bytes.Repeat([]byte("x"), 1<<20)
	full := false
	for i := 0; i < MaxLogBytes>>20+2 && !full; i++ {
		full = w.Write(Stdout, chunk, time.Unix(int64(i), 0))
	}
	if !full || !w.Write(Stderr, []byte("more"), time.Now()) {
		t.Fatal("the log did not fill")
	}
	w.Close()
	st, _ := os.Stat(path)
	if st.Size() > MaxLogBytes+200 {
		t.Errorf("log of %d bytes", st.Size())
	}
	r, _ := Open(path)
	defer r.Close()
	ps, _ := r.Next(true)
	if got := text(ps, Stderr); !strings.Contains(got, "truncated at 64 MiB") {
		t.Errorf("stderr %q", got)
	}
}

func TestIndexBound(t *testing.T) {
	path := filepath.Join(t.TempDir(), "main.log")
	w, _ := Create(path)
	w.records = maxRecords // as if full
	w.last = record{at: 1, length: 1, stream: Stdout}
	w.Write(Stdout, []byte("same stream"), time.Unix(100, 0))
	w.Write(Stderr, []byte("other"), time.Unix(101, 0))
	if w.records != maxRecords {
		t.Errorf("records grew past the bound: %d", w.records)
	}
	st, _ := w.idx.Stat()
	if st.Size() != maxRecords*recordSize {
		t.Errorf("index of %d bytes", st.Size())
	}
	w.Close()
}

// Reopening a log goes on after what is there.
func TestReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "main.log")
	w, _ := Create(path)
	w.Write(Stdout, []byte("a\n"), time.Unix(1, 0))
	w.Close()
	w, _ = Create(path)
	w.Write(Stderr, []byte("b\n"), time.Unix(2, 0))
	w.Close()
	r, _ := Open(path)
	defer r.Close()
	ps, _ := r.Next(false)
	if text(ps, Stdout) != "a\n" || text(ps, Stderr) != "b\n" {
		t.Errorf("%+v", ps)
	}
}

// FuzzReader: a damaged or hostile index never makes the reader fail,
// loop or return more than the log holds.
func FuzzReader(f *testing.F) {
	f.Add([]byte("hello\nworld\n"), record{at: 1, length: 6, stream: Stdout}.encode())
	f.Add([]byte("x"), append(record{at: 1, length: 1 << 31, stream: 9}.encode(), 1, 2, 3))
	f.Fuzz(func(t *testing.T, log, idx []byte) {
		dir := t.TempDir()
		path := filepath.Join(dir, "main.log")
		os.WriteFile(path, log, 0o600)
		os.WriteFile(IndexPath(path), idx, 0o600)
		r, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		var n int
		for _, final := range []bool{false, false, true, true} {
			ps, err := r.Next(final)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range ps {
				n += len(p.Data)
				if p.Stream != Stdout && p.Stream != Stderr {
					t.Fatalf("stream %d", p.Stream)
				}
			}
		}
		if n != len(log) {
			t.Fatalf("read %d bytes of a %d-byte log", n, len(log))
		}
	})
}
