// Package agentbin finds the agent binary, airlock-guest: the program
// that runs inside every sandbox, and that the host also runs for work
// that needs a user namespace of its own.
package agentbin

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
)

// Name is the agent binary's name.
const Name = "airlock-guest"

// Find returns the absolute path of the agent binary: explicit when it
// is set, else $AIRLOCK_AGENT, else airlock-guest beside the running
// program, else on PATH; the first that is an executable file.
func Find(explicit string) (string, error) {
	cands := []string{explicit, os.Getenv("AIRLOCK_AGENT")}
	if exe, err := os.Executable(); err == nil {
		cands = append(cands, filepath.Join(filepath.Dir(exe), Name))
	}
	if p, err := exec.LookPath(Name); err == nil {
		cands = append(cands, p)
	}
	for _, p := range cands {
		if p == "" {
			continue
		}
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return filepath.Abs(p)
		}
	}
	return "", errors.New("the sandbox agent airlock-guest was not found beside this program, on PATH or in $AIRLOCK_AGENT: " +
		"in a checkout of github.com/airlock-sandbox/airlock, `make build` builds bin/airlock-guest and `make install` puts it in /usr/local/bin; " +
		"or `CGO_ENABLED=0 go install github.com/airlock-sandbox/airlock/cmd/airlock-guest@latest` (static: the agent refuses a cgo build)")
}
