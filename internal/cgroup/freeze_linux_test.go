package cgroup

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The v2 freezer's files, played by the test as the kernel would: Freeze
// writes cgroup.freeze and waits for "frozen 1" in cgroup.events; one
// that never comes thaws the group again and says why.
func TestFreezeV2Files(t *testing.T) {
	dir := t.TempDir()
	freeze, events := filepath.Join(dir, "cgroup.freeze"), filepath.Join(dir, "cgroup.events")
	for _, f := range []string{freeze, events} {
		if err := os.WriteFile(f, []byte("0\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(events, []byte("populated 1\nfrozen 0\n"), 0o644)
	g := &Group{id: "sb-test", version: V2, impl: &v2Group{dir: dir}}

	kernel := make(chan struct{})
	go func() {
		defer close(kernel)
		for range 1000 {
			if b, _ := os.ReadFile(freeze); strings.TrimSpace(string(b)) == "1" {
				os.WriteFile(events, []byte("populated 1\nfrozen 1\n"), 0o644)
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.Freeze(ctx); err != nil {
		t.Fatalf("Freeze: %v", err)
	}
	<-kernel
	if err := g.Thaw(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(freeze); string(b) != "0" {
		t.Errorf("cgroup.freeze after Thaw: %q", b)
	}

	// A group the kernel never reports frozen.
	os.WriteFile(events, []byte("populated 1\nfrozen 0\n"), 0o644)
	short, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	err := g.Freeze(short)
	if err == nil || !strings.Contains(err.Error(), "not all frozen") {
		t.Errorf("Freeze of a group never frozen: %v", err)
	}
	if b, _ := os.ReadFile(freeze); string(b) != "0" {
		t.Errorf("cgroup.freeze after a failed Freeze: %q, want thawed", b)
	}

	// No freezer at all.
	os.Remove(freeze)
	if err := g.Freeze(ctx); err == nil || !strings.Contains(err.Error(), "no freezer") {
		t.Errorf("Freeze without cgroup.freeze: %v", err)
	}
}
