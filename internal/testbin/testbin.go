// Package testbin builds the module's commands for the tests that run
// them: the agent (static, as every sandbox needs it) and the CLI.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
