// Command airlock-guest is the airlock agent. It runs as PID 1 inside every
// isolation boundary and must be built static: CGO_ENABLED=0.
package main

import (
	"os"

	"github.com/airlock-sandbox/airlock/internal/agent"
)

func main() { agent.Main(os.Args) }
