package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testbin"
)

// TestRunsAsShown builds the example with the agent beside it, as a user
// of the embed API would, runs it, and checks what it prints.
func TestRunsAsShown(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the example's sandbox has cgroup limits")
	}
	dir, bin, _ := testbin.BuildHere(t, "embed", "airlock-guest")
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "AIRLOCK_HOME="+filepath.Join(dir, "home"))
	cmd.Env = append(cmd.Env, "AIRLOCK_AGENT=")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the example: %v\n%s", err, out)
	}
	want := `0 42 
go
interrupted: true
{"n": 42} <nil>
missing: true
2 files; /workspace/out.json 9 bytes <nil>
5 xxxxx 1048576 <nil>
2 <nil>
600 1577934245
../lib/libfoo.so.1
xxxxxxxxxxyyxxxx`
	if string(out) != want {
		t.Errorf("the example printed:\n%s\nwant:\n%s", out, want)
	}
}

// TestReadmeShowsThisCode: README.md's Go section is this program's code.
func TestReadmeShowsThisCode(t *testing.T) {
	testbin.ReadmeShowsCode(t, "../../README.md", "Go", "main.go")
}
