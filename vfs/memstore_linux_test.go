package vfs

import (
	"context"
	"testing"
)

// TestMemoryClose releases the store at once, and twice is harmless.
func TestMemoryClose(t *testing.T) {
	ctx := context.Background()
	m := NewMemory(MemoryOptions{})
	h, err := m.Create(ctx, "/f", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.WriteAt(ctx, []byte("data"), 0); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
	if s, ok := m.store.(memfdStore); ok && s.Fd() != ^uintptr(0) {
		t.Errorf("the memfd is still open after Close: descriptor %d", s.Fd())
	}
}
