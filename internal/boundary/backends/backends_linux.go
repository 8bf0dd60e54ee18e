package backends

import (
	"errors"
	"slices"

	"github.com/airlock-sandbox/airlock/internal/boundary"
	"github.com/airlock-sandbox/airlock/internal/boundary/gvisor"
	"github.com/airlock-sandbox/airlock/internal/boundary/process"
	"github.com/airlock-sandbox/airlock/internal/boundary/vm"
)

// For returns the backend of isolation level iso.
func For(iso string) (boundary.Backend, error) {
	switch iso {
	case Process:
		return process.Backend{}, nil
	case VM:
		return vm.Backend{}, nil
	case GVisor:
		return gvisor.Backend{}, nil
	}
	return nil, notHere(iso, "is not an isolation level")
}

// Sweep removes what sandboxes whose supervisor died (for example by
// SIGKILL) left on the host, and returns their ids.
func Sweep() []string {
	ids := append(append(process.Sweep(nil), vm.Sweep()...), gvisor.Sweep()...)
	slices.Sort(ids)
	return slices.Compact(ids)
}

// Reclaim removes what sandbox id left on the host after its supervisor
// died.
func Reclaim(id string) error {
	return errors.Join(process.Reclaim(id), vm.Reclaim(id), gvisor.Reclaim(id))
}
