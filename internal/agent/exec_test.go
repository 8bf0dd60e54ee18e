//go:build linux

package agent

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestMergeEnv(t *testing.T) {
	got := mergeEnv([]string{"PATH=/bin", "HOME=/root", "A=1"}, []string{"A=2", "B=3", "PATH=/x"})
	want := []string{"PATH=/x", "HOME=/root", "A=2", "B=3"}
	if !slices.Equal(got, want) {
		t.Fatalf("mergeEnv = %v, want %v", got, want)
	}
	if v := lookupEnv(got, "PATH"); v != "/x" {
		t.Fatalf("lookupEnv PATH = %q", v)
	}
	if v := lookupEnv(got, "PAT"); v != "" {
		t.Fatalf("lookupEnv must match whole names, got %q", v)
	}
}

func TestLookPath(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "tool")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "data"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=/nonexistent:" + dir}
	if p, err := lookPath("tool", env, "/"); err != nil || p != exe {
		t.Fatalf("lookPath(tool) = %q, %v", p, err)
	}
	if _, err := lookPath("data", env, "/"); err == nil || !strings.Contains(err.Error(), "command not found") {
		t.Fatalf("a non-executable file must not be found: %v", err)
	}
	if p, _ := lookPath("./rel/x", env, "/"); p != "./rel/x" {
		t.Fatalf("names with a slash are used as given, got %q", p)
	}
	// PATH is taken from the command's environment, not the agent's.
	if _, err := lookPath("tool", []string{"PATH=/nonexistent"}, "/"); err == nil {
		t.Fatal("tool must not be found outside the command's PATH")
	}
}

func TestCleanPath(t *testing.T) {
	for _, bad := range []string{"", "rel/path", "./x"} {
		if _, err := cleanPath(bad); err == nil {
			t.Errorf("cleanPath(%q) must fail", bad)
		}
	}
	if p, err := cleanPath("/a/../b//c/"); err != nil || p != "/b/c" {
		t.Fatalf("cleanPath = %q, %v", p, err)
	}
}

func TestLandlockNotes(t *testing.T) {
	if n := landlockNotesFor(0, os.ErrInvalid); len(n) != 1 || !strings.Contains(n[0], "not available") {
		t.Errorf("no landlock: notes %q", n)
	}
	if n := landlockNotesFor(4, nil); len(n) != 1 || !strings.Contains(n[0], "ABI 4") || !strings.Contains(n[0], "scoping") {
		t.Errorf("ABI 4: notes %q", n)
	}
	if n := landlockNotesFor(7, nil); len(n) != 0 {
		t.Errorf("ABI 7 provides everything asked for, notes %q", n)
	}
}
