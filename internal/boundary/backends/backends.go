// Package backends picks the isolation backend of a sandbox: the one
// place that knows every backend the build has.
package backends

import (
	"fmt"

	"github.com/airlock-sandbox/airlock/internal/boundary"
)

// Isolation levels, as airlock.Config names them.
const (
	Process = "process"
	GVisor  = "gvisor"
	VM      = "vm"
)

// notHere is the error of a level with no backend in this build.
func notHere(iso, why string) error {
	return fmt.Errorf("%w: isolation %q %s; use --isolation process (run `airlock doctor` to see what this machine supports)", boundary.ErrUnavailable, iso, why)
}
