//go:build linux

package cgroup

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
)

// freezer of v2: cgroup.freeze of the sandbox's group (agent and user
// below it), and the "frozen" key of its cgroup.events.
func (g *v2Group) freezer() (freezeFile, frozenFile, error) {
	p := filepath.Join(g.dir, "cgroup.freeze")
	if !exists(p) {
		return freezeFile{}, frozenFile{}, fmt.Errorf("freeze cgroup %s: %w: this kernel's cgroup v2 has no freezer (Linux 5.2 and later have)", g.dir, errors.ErrUnsupported)
	}
	return freezeFile{path: p, freeze: []byte("1"), thaw: []byte("0")},
		frozenFile{path: filepath.Join(g.dir, "cgroup.events"), isFrozen: func(b []byte) bool {
			for line := range bytes.Lines(b) {
				if bytes.Equal(bytes.TrimSpace(line), []byte("frozen 1")) {
					return true
				}
			}
			return false
		}}, nil
}

// freezer of v1: freezer.state of the sandbox's group in the freezer
// hierarchy, which freezes the groups below it too.
func (g *v1Group) freezer() (freezeFile, frozenFile, error) {
	for _, m := range g.mounts {
		if m.controller == "freezer" {
			p := filepath.Join(m.dir, g.rel, "freezer.state")
			return freezeFile{path: p, freeze: []byte("FROZEN"), thaw: []byte("THAWED")},
				frozenFile{path: p, isFrozen: func(b []byte) bool { return string(bytes.TrimSpace(b)) == "FROZEN" }}, nil
		}
	}
	return freezeFile{}, frozenFile{}, fmt.Errorf("freeze cgroup %s: %w: no writable cgroup v1 freezer hierarchy is mounted (mount -t cgroup -o freezer cgroup /sys/fs/cgroup/freezer)", g.rel, errors.ErrUnsupported)
}
