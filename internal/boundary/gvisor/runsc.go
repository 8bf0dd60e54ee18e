package gvisor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// runscNames are the runsc binaries looked for, in order: airlock's own
// build of it (`make runsc`), then a runsc installed apart.
var runscNames = []string{"airlock-runsc", "runsc"}

// ErrNoRunsc is wrapped by Find's error when no runsc is found.
var ErrNoRunsc = errors.New("neither airlock-runsc nor runsc was found beside airlock or on PATH")

// RunscFix says how to get a runsc.
const RunscFix = "`make runsc` builds bin/airlock-runsc (gVisor's runsc from the gvisor.dev/gvisor version airlock pins) beside bin/airlock; or put airlock-runsc or runsc on PATH"

// RunscEnv, when set, names the runsc to use, and no other is looked for.
const RunscEnv = "AIRLOCK_RUNSC"

// Find returns the runsc to use: the one RunscEnv names, else
// airlock-runsc beside the running executable, then each name of
// runscNames on PATH (through lookPath).
func Find(lookPath func(string) (string, error)) (string, error) {
	if p := os.Getenv(RunscEnv); p != "" {
		fi, err := os.Stat(p)
		if err != nil {
			return "", fmt.Errorf("%s names %s: %w", RunscEnv, p, err)
		}
		if !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
			return "", fmt.Errorf("%s names %s, which is not an executable file", RunscEnv, p)
		}
		return p, nil
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), runscNames[0])
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	for _, name := range runscNames {
		if p, err := lookPath(name); err == nil {
			return p, nil
		}
	}
	return "", ErrNoRunsc
}
