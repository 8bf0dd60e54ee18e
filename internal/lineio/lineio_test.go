package lineio

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

func TestReader(t *testing.T) {
	long := strings.Repeat("y", 200<<10) // longer than the read buffer
	in := "a\r\n\nb\n" + strings.Repeat("x", 11) + "\n" + strings.Repeat("z", 10) + "\n" + long + "\nlast"
	lr := NewReader(strings.NewReader(in), 10)
	type got struct {
		line string
		err  error
	}
	want := []got{{"a", nil}, {"", nil}, {"b", nil}, {"", ErrTooLong}, {strings.Repeat("z", 10), nil}, {"", ErrTooLong}, {"last", nil}, {"", io.EOF}}
	for i, w := range want {
		line, _, _, err := lr.Next()
		if string(line) != w.line || !errors.Is(err, w.err) && err != w.err {
			t.Errorf("line %d: %q, %v; want %q, %v", i, line, err, w.line, w.err)
		}
	}

	// Lines longer than the buffer, within the limit, are in buffers of
	// their own; a line over the limit is skipped and reading goes on.
	in = "a\r\n\nb\n" + long + "\n" + strings.Repeat("z", 300<<10) + "\nlast"
	lr = NewReader(strings.NewReader(in), 250<<10)
	for i, want := range []string{"a", "", "b", long} {
		line, _, own, err := lr.Next()
		if string(line) != want || err != nil || own != (len(want) > bufferSize) {
			t.Fatalf("line %d: %.20q (%d bytes, own %v), %v; want %.20q (%d bytes)", i, line, len(line), own, err, want, len(want))
		}
	}
	if _, n, _, err := lr.Next(); !errors.Is(err, ErrTooLong) || n != 300<<10+1 {
		t.Fatalf("line over the limit: %d bytes, %v", n, err)
	}
	if line, _, _, err := lr.Next(); string(line) != "last" || err != nil {
		t.Fatalf("after a line over the limit: %q, %v", line, err)
	}

	// Exactly at the limit, with "\r\n", and one over it.
	lr = NewReader(strings.NewReader(strings.Repeat("w", 100<<10)+"\r\n"+strings.Repeat("v", 100<<10+1)+"\n"), 100<<10)
	if line, _, _, err := lr.Next(); len(line) != 100<<10 || err != nil {
		t.Fatalf("line at the limit: %d bytes, %v", len(line), err)
	}
	if _, _, _, err := lr.Next(); !errors.Is(err, ErrTooLong) {
		t.Fatalf("line one over the limit: %v", err)
	}
}

// TestReaderLongLines reads lines of many lengths around the read
// buffer, the pieces and the longest line so far, in every order: each
// comes out whole, and one over the limit is skipped.
func TestReaderLongLines(t *testing.T) {
	sizes := []int{0, 1, bufferSize - 1, bufferSize, bufferSize + 1, chunkSize - 1, chunkSize, chunkSize + 1,
		3*chunkSize + 17, 300 << 10, 2*chunkSize + bufferSize, 5, 3*chunkSize + 17, 3*chunkSize + 18, 1 << 20}
	const limit = 4 << 20
	var in strings.Builder
	var want []string
	for i, n := range sizes {
		line := strings.Repeat(string(rune('a'+i%26)), n)
		if n > 10 {
			line = fmt.Sprintf("%08d", i) + line[8:]
		}
		in.WriteString(line + "\n")
		want = append(want, line)
		if i == 7 {
			in.WriteString(strings.Repeat("x", limit+3) + "\n")
			want = append(want, "TOO LONG")
		}
	}
	in.WriteString(strings.Repeat("e", 2*chunkSize+5)) // no newline at the end
	want = append(want, strings.Repeat("e", 2*chunkSize+5))
	lr := NewReader(strings.NewReader(in.String()), limit)
	for i, w := range want {
		line, n, own, err := lr.Next()
		if w == "TOO LONG" {
			if !errors.Is(err, ErrTooLong) || n != limit+4 {
				t.Fatalf("line %d: %d bytes, %v; want ErrTooLong", i, n, err)
			}
			continue
		}
		if err != nil || string(line) != w {
			t.Fatalf("line %d: %d bytes %.20q, %v; want %d bytes %.20q", i, len(line), line, err, len(w), w)
		}
		if own != (len(w)+1 > bufferSize) {
			t.Errorf("line %d (%d bytes): own %v", i, len(w), own)
		}
	}
	if _, _, _, err := lr.Next(); err != io.EOF {
		t.Fatalf("at the end: %v", err)
	}
}
