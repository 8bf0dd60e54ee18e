package airlock

import (
	"fmt"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/vfs"
)

// VFSConfig gives a sandbox files beyond its own tree: programmable
// mounts served by providers on the host (package vfs), host
// directories bound in directly, and paths that are never visible.
type VFSConfig struct {
	// Mounts are programmable mounts by target (an absolute path in the
	// sandbox), described as JSON-RPC and the CLI describe them.
	Mounts map[string]MountSpec `json:"mounts,omitempty"`
	// DirectMounts are host directories, or regular files, bound at
	// their target: as fast as the host's own files, with no provider
	// in between (no hooks, no events). A file is bound at the process
	// level only (see DirectMount).
	DirectMounts map[string]DirectMount `json:"direct_mounts,omitempty"`
	// BlockedPaths are never visible in the sandbox, whatever the
	// mounts: inside a programmable mount they do not exist (and cannot
	// be made); elsewhere they are covered by an empty directory or a
	// file no one can open.
	BlockedPaths []string `json:"blocked_paths,omitempty"`
	// Providers are Go providers mounted at their target as they are
	// (the embed API's own; Mounts describes the built-in ones).
	Providers map[string]vfs.Provider `json:"-"`
	// Hooks run on every operation of the programmable mounts, with
	// paths as the sandbox sees them; a hook may refuse one.
	Hooks vfs.Hooks `json:"-"`
}

// MountSpec describes a built-in provider.
type MountSpec struct {
	// Type is "memory", "real_fs" or "overlay".
	Type string `json:"type"`
	// SizeMB bounds a memory mount's data; 0: the sandbox's DiskMB.
	SizeMB int64 `json:"size_mb,omitempty"`
	// HostPath is a real_fs mount's host directory.
	HostPath string `json:"host_path,omitempty"`
	// Readonly refuses every write with EROFS.
	Readonly bool `json:"readonly,omitempty"`
	// Upper and Lower are an overlay's layers: writes go to Upper,
	// Lower is never changed.
	Upper *MountSpec `json:"upper,omitempty"`
	Lower *MountSpec `json:"lower,omitempty"`
}

// DirectMount is a host directory bound into the sandbox, or a host
// regular file bound over a file of the sandbox's (made empty first where
// the image has none), as docker's -v binds one: a configuration file,
// a Kubernetes config map's key. A file is bound at the process level;
// the gvisor and vm levels serve direct mounts through airlock's file
// server, which mounts directories, and refuse one.
type DirectMount struct {
	HostPath string `json:"host_path"`
	Readonly bool   `json:"readonly,omitempty"`
}

// Mount types.
const (
	MountMemory  = "memory"
	MountRealFS  = "real_fs"
	MountOverlay = "overlay"
)

// IsZero reports whether v asks for nothing.
func (v VFSConfig) IsZero() bool {
	return len(v.Mounts) == 0 && len(v.DirectMounts) == 0 && len(v.BlockedPaths) == 0 && len(v.Providers) == 0
}

// reservedTargets are the sandbox's own trees, which no mount may hide
// or enter.
var reservedTargets = []string{"/proc", "/dev", "/sys"}

// checkTarget checks a mount target or a blocked path.
func checkTarget(what, t string) error {
	if !strings.HasPrefix(t, "/") {
		return fmt.Errorf("%s %q must be an absolute path", what, t)
	}
	if len(t) > 4096 || strings.ContainsRune(t, 0) {
		return fmt.Errorf("%s %q is not a valid path", what, t)
	}
	if path.Clean(t) != t {
		return fmt.Errorf("%s %q is not clean: write %q", what, t, path.Clean(t))
	}
	if t == "/" {
		return fmt.Errorf("%s cannot be /: mount under it, for example /workspace", what)
	}
	for _, r := range reservedTargets {
		if within(t, r) || within(r, t) {
			return fmt.Errorf("%s %s would hide or enter %s, which is the sandbox's own", what, t, r)
		}
	}
	return nil
}

// within reports whether p is dir or beneath it.
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// validate reports the first problem with v, in words a user can act
// on, before anything starts.
func (v VFSConfig) validate() error {
	targets := map[string]string{}
	add := func(kind, t string) error {
		if err := checkTarget(kind+" target", t); err != nil {
			return err
		}
		if other, ok := targets[t]; ok {
			return fmt.Errorf("%s is both a %s and a %s: give each target once", t, other, kind)
		}
		targets[t] = kind
		return nil
	}
	for t, m := range v.Mounts {
		if err := add("mount", t); err != nil {
			return err
		}
		if err := m.validate("vfs.mounts[" + t + "]"); err != nil {
			return err
		}
	}
	for t, p := range v.Providers {
		if p == nil {
			return fmt.Errorf("the provider at %s is nil", t)
		}
		if err := add("mount", t); err != nil {
			return err
		}
	}
	for t, d := range v.DirectMounts {
		if err := add("direct mount", t); err != nil {
			return err
		}
		if err := checkHostPath("vfs.direct_mounts["+t+"].host_path", d.HostPath, true); err != nil {
			return err
		}
	}
	// A host directory cannot be bound inside a programmable mount: the
	// mount is served from the host only once the sandbox runs.
	for t, kind := range targets {
		if kind != "direct mount" {
			continue
		}
		for o, okind := range targets {
			if okind == "mount" && t != o && within(t, o) {
				return fmt.Errorf("direct mount %s is inside the programmable mount %s: mount the host directory elsewhere, or as a real_fs mount at %s", t, o, t)
			}
		}
	}
	for _, b := range v.BlockedPaths {
		if err := checkTarget("blocked path", b); err != nil {
			return err
		}
		if _, ok := targets[b]; ok {
			return fmt.Errorf("blocked path %s is also a mount target", b)
		}
	}
	return nil
}

func (m *MountSpec) validate(where string) error {
	switch m.Type {
	case MountMemory:
		if m.HostPath != "" || m.Upper != nil || m.Lower != nil {
			return fmt.Errorf("%s: a memory mount takes size_mb and readonly only", where)
		}
		if m.SizeMB < 0 || m.SizeMB > maxSizeMB {
			return fmt.Errorf("%s: size_mb %d is out of range", where, m.SizeMB)
		}
	case MountRealFS:
		if m.Upper != nil || m.Lower != nil || m.SizeMB != 0 {
			return fmt.Errorf("%s: a real_fs mount takes host_path and readonly only", where)
		}
		return checkHostPath(where+".host_path", m.HostPath, false)
	case MountOverlay:
		if m.Upper == nil || m.Lower == nil {
			return fmt.Errorf("%s: an overlay mount needs upper and lower, for example {\"upper\": {\"type\": \"memory\"}, \"lower\": {\"type\": \"real_fs\", \"host_path\": \"/srv/base\"}}", where)
		}
		if m.HostPath != "" || m.SizeMB != 0 {
			return fmt.Errorf("%s: an overlay mount takes upper, lower and readonly only", where)
		}
		if m.Upper.Readonly {
			return fmt.Errorf("%s.upper: an overlay's upper layer takes its writes, so it cannot be read-only", where)
		}
		if err := m.Upper.validate(where + ".upper"); err != nil {
			return err
		}
		return m.Lower.validate(where + ".lower")
	case "":
		return fmt.Errorf("%s: type is missing: give one of %s", where, strings.Join(mountTypes, ", "))
	default:
		return fmt.Errorf("%s: unknown mount type %q: give one of %s", where, m.Type, strings.Join(mountTypes, ", "))
	}
	return nil
}

var mountTypes = []string{MountMemory, MountRealFS, MountOverlay}

// checkHostPath checks that p is an absolute path to a host directory,
// or with fileOK to a regular file too.
func checkHostPath(where, p string, fileOK bool) error {
	what := "a host directory"
	if fileOK {
		what += " or file"
	}
	if p == "" {
		return fmt.Errorf("%s is missing: give %s", where, what)
	}
	if !strings.HasPrefix(p, "/") {
		return fmt.Errorf("%s %q must be an absolute path", where, p)
	}
	fi, err := os.Stat(p)
	if err != nil {
		return fmt.Errorf("%s %s: %w", where, p, err)
	}
	switch {
	case fi.IsDir():
	case !fileOK:
		return fmt.Errorf("%s %s is not a directory", where, p)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s %s is neither a directory nor a regular file (%s): only those can be bound into a sandbox", where, p, fileKind(fi.Mode()))
	}
	return nil
}

// fileKind names the type of a file that is not a directory or a
// regular file.
func fileKind(m os.FileMode) string {
	switch {
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeNamedPipe != 0:
		return "a FIFO"
	case m&os.ModeDevice != 0:
		return "a device"
	}
	return "a special file"
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
