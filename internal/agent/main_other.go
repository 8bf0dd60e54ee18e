//go:build !linux

package agent

import (
	"fmt"
	"os"
	"runtime"
)

// Main reports that the agent only runs on Linux.
func Main(args []string) {
	fmt.Fprintf(os.Stderr, "airlock-guest runs inside Linux sandboxes only; this is %s\n", runtime.GOOS)
	os.Exit(2)
}
