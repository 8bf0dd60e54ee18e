package rpc

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

func TestLineReader(t *testing.T) {
	long := strings.Repeat("y", 200<<10) // longer than the read buffer
	in := "a\r\n\nb\n" + strings.Repeat("x", 11) + "\n" + strings.Repeat("z", 10) + "\n" + long + "\nlast"
	lr := newLineReader(strings.NewReader(in), 10)
	type got struct {
		line string
		err  error
	}
	want := []got{{"a", nil}, {"", nil}, {"b", nil}, {"", errLineTooLong}, {strings.Repeat("z", 10), nil}, {"", errLineTooLong}, {"last", nil}, {"", io.EOF}}
	for i, w := range want {
		line, _, err := lr.next()
		if string(line) != w.line || !errors.Is(err, w.err) && err != w.err {
			t.Errorf("line %d: %q, %v; want %q, %v", i, line, err, w.line, w.err)
		}
	}
	// Lines longer than the buffer, within the limit.
	lr = newLineReader(strings.NewReader(long+"\n"), 1<<20)
	if line, _, err := lr.next(); err != nil || string(line) != long {
		t.Errorf("long line: %d bytes, %v", len(line), err)
	}
}

func TestBudget(t *testing.T) {
	b := newBudget(10)
	if !b.tryAcquire(8) || b.tryAcquire(3) {
		t.Fatal("tryAcquire over the budget")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := b.acquire(ctx, 3); err == nil {
		t.Fatal("acquire over the budget did not wait")
	}
	done := make(chan error, 1)
	go func() { done <- b.acquire(context.Background(), 3) }()
	b.release(8)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// An item larger than the whole budget goes through alone.
	b.release(3)
	if !b.tryAcquire(100) || b.tryAcquire(1) {
		t.Error("an oversized item must go through alone")
	}
}
