package agent

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
)

// validContainer checks a container request before anything is made.
func validContainer(r *agentproto.ContainerRequest) error {
	if r == nil {
		return errors.New("no container request")
	}
	if !agentproto.ValidContainerName(r.Name) {
		return fmt.Errorf("container name %q: use 1-64 letters, digits, '.', '-' or '_'", r.Name)
	}
	if r.Remove {
		return nil
	}
	if !filepath.IsAbs(r.Root) || len(r.Root) > 4096 {
		return fmt.Errorf("container %s: its root %q is not an absolute path", r.Name, r.Root)
	}
	if len(r.Binds) > agentproto.MaxContainerBinds {
		return fmt.Errorf("container %s: %d binds, at most %d", r.Name, len(r.Binds), agentproto.MaxContainerBinds)
	}
	for _, b := range r.Binds {
		if !filepath.IsAbs(b.Source) || !filepath.IsAbs(b.Target) || len(b.Source) > 4096 || len(b.Target) > 4096 {
			return fmt.Errorf("container %s: bind %q to %q: both paths must be absolute", r.Name, b.Source, b.Target)
		}
		if t := filepath.Clean(b.Target); t == "/" || t == "/proc" || strings.HasPrefix(t, "/proc/") || t == "/dev" {
			return fmt.Errorf("container %s: a bind to %s would hide the container's own", r.Name, t)
		}
	}
	return nil
}
