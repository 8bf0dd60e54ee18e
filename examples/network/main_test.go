package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testbin"
)

// TestRunsAsShown builds the example with the agent beside it, runs it
// with a key in its environment, and checks that the sandbox has a
// placeholder and never the key.
func TestRunsAsShown(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a sandbox's network device")
	}
	dir, bin, _ := testbin.BuildHere(t, "network", "airlock-guest")
	const key = "sk-network-example-4c1d"
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "AIRLOCK_HOME="+filepath.Join(dir, "home"), "AIRLOCK_AGENT=", "OPENAI_API_KEY="+key)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the example: %v\n%s", err, stderr.String())
	}
	if want := "placeholder: true\ninside, the placeholder: true\npins: 0\n"; string(out) != want {
		t.Errorf("the example printed %q, want %q", out, want)
	}
	if strings.Contains(string(out)+stderr.String(), key) {
		t.Error("the key was printed")
	}
}

// TestReadmeShowsThisCode: README.md's Go code on the network is this
// program's.
func TestReadmeShowsThisCode(t *testing.T) {
	testbin.ReadmeShowsCode(t, "../../README.md", "Network in Go", "main.go")
}
