package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testbin"
)

// TestRunsAsShown builds airlock and the example, runs the example with
// airlock as $AIRLOCK_BIN, and checks what it prints.
func TestRunsAsShown(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the example's sandbox has cgroup limits")
	}
	dir, bin, bins := testbin.BuildHere(t, "client", "airlock", "airlock-guest")
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "AIRLOCK_BIN="+bins[0], "AIRLOCK_HOME="+filepath.Join(dir, "home"), "AIRLOCK_AGENT=")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the example: %v\n%s", err, stderr.String())
	}
	if want := "\"hello\\n\"\nstreamed\nmissing: true\nthrough the socket\n"; string(out) != want {
		t.Errorf("the example printed %q, want %q", out, want)
	}
	if !strings.Contains(stderr.String(), "event: exec") {
		t.Errorf("the example saw no exec event: %s", stderr.String())
	}
}

// TestReadmeShowsThisCode: README.md's Go client section is this
// program's code.
func TestReadmeShowsThisCode(t *testing.T) {
	testbin.ReadmeShowsCode(t, "../../README.md", "Go client", "main.go")
}
