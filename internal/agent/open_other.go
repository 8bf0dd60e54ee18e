//go:build !linux

package agent

import "os"

func outputPipe() (r, w *os.File, err error) { return os.Pipe() }

// pending is 0: the agent runs on Linux only (see Main), this keeps the
// package building elsewhere.
func pending(*os.File) int { return 0 }
