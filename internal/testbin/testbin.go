// Package testbin builds the module's commands for the tests that run
// them: the agent (static, as every sandbox needs it) and the CLI.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// module is the import path the commands are built from, so that a
// build works from any package's directory.
const module = "github.com/airlock-sandbox/airlock/cmd/"

// Dir makes a temporary directory, named with prefix, that every user
// may search (0755): when tests run as root, sandboxes run as other
// uids and must still reach the binaries and state kept in it. The
// caller removes it.
func Dir(prefix string) (string, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// Build builds each named command of the module ("airlock",
// "airlock-guest") into dir, statically (CGO_ENABLED=0), and returns
// their paths in the same order.
func Build(dir string, commands ...string) ([]string, error) {
	paths := make([]string, len(commands))
	for i, name := range commands {
		paths[i] = filepath.Join(dir, name)
		cmd := exec.Command("go", "build", "-o", paths[i], module+name)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go build %s: %v\n%s", module+name, err, out)
		}
	}
	return paths, nil
}

// BuildHere builds the package in the current directory, statically,
// into a new directory (removed when t ends) that also holds the given
// commands of the module, as a user would have them beside it. It
// returns the directory, the program's path, then the commands' paths.
func BuildHere(t *testing.T, name string, commands ...string) (dir, bin string, built []string) {
	t.Helper()
	dir, err := Dir(name + "-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if built, err = Build(dir, commands...); err != nil {
		t.Fatal(err)
	}
	bin = filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return dir, bin, built
}
