package cli

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock"
)

// mountFlags are run's file flags, in docker's spelling: -v for host
// directories, --mount for programmable mounts (and binds), and
// --block-path.
type mountFlags struct {
	volumes []string
	mounts  []string
	tmpfs   []string
	blocked []string
}

func (f *mountFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringArrayVarP(&f.volumes, "volume", "v", nil, "bind a host directory, or a file at the process level: HOST:SANDBOX[:ro|rw] (HOST absolute or relative to here; read-write unless :ro)")
	fl.StringArrayVar(&f.mounts, "mount", nil, "a mount, as docker writes them: type=memory|tmpfs,target=/workspace[,size=64m][,readonly]; type=real_fs,source=HOST,target=/data[,readonly] (a host directory served by airlock: hooks and events see it); type=overlay,source=HOST,target=/src (writes kept in memory, the host directory never changed); type=bind,source=HOST,target=/data[,readonly] (as -v)")
	fl.StringArrayVar(&f.tmpfs, "tmpfs", nil, "a memory mount, as docker's --tmpfs: PATH[:size=64m][,ro] (nosuid and nodev, as every mount; repeatable)")
	fl.StringArrayVar(&f.blocked, "block-path", nil, "a path of the sandbox that is never visible, whatever the mounts (e.g. /workspace/.env)")
}

// apply puts the flags' mounts in c.
func (f *mountFlags) apply(c *airlock.Config) error {
	v := airlock.VFSConfig{Mounts: map[string]airlock.MountSpec{}, DirectMounts: map[string]airlock.DirectMount{}}
	for _, s := range f.volumes {
		target, d, err := parseVolume(s)
		if err != nil {
			return err
		}
		v.DirectMounts[target] = d
	}
	for _, s := range f.mounts {
		if err := parseMount(s, &v); err != nil {
			return err
		}
	}
	for _, s := range f.tmpfs {
		target, spec, err := parseTmpfs(s)
		if err != nil {
			return err
		}
		v.Mounts[target] = spec
	}
	v.BlockedPaths = f.blocked
	if len(v.Mounts) == 0 {
		v.Mounts = nil
	}
	if len(v.DirectMounts) == 0 {
		v.DirectMounts = nil
	}
	c.VFS = v
	return nil
}

// parseVolume reads -v HOST:SANDBOX[:ro|rw].
func parseVolume(s string) (string, airlock.DirectMount, error) {
	parts := strings.Split(s, ":")
	var d airlock.DirectMount
	switch {
	case len(parts) == 3 && (parts[2] == "ro" || parts[2] == "rw"):
		d.Readonly = parts[2] == "ro"
	case len(parts) == 2:
	default:
		return "", d, fmt.Errorf("-v %s: write HOST:SANDBOX, HOST:SANDBOX:ro or HOST:SANDBOX:rw", s)
	}
	host, err := filepath.Abs(parts[0])
	if err != nil || parts[0] == "" {
		return "", d, fmt.Errorf("-v %s: the host directory %q is not a path", s, parts[0])
	}
	d.HostPath = host
	return cleanTarget(parts[1]), d, nil
}

// cleanTarget is a sandbox path as the user wrote it, without a
// trailing slash (docker takes /data/ as /data).
func cleanTarget(t string) string {
	if len(t) > 1 {
		t = strings.TrimRight(t, "/")
	}
	return t
}

// parseTmpfs reads --tmpfs PATH[:OPTIONS], OPTIONS as docker's: mount
// options with commas, size in bytes unless a unit says otherwise.
func parseTmpfs(s string) (string, airlock.MountSpec, error) {
	spec := airlock.MountSpec{Type: airlock.MountMemory}
	target, opts, _ := strings.Cut(s, ":")
	if target = cleanTarget(target); target == "" {
		return "", spec, fmt.Errorf("--tmpfs %s: the sandbox path is missing (--tmpfs /run)", s)
	}
	for o := range strings.SplitSeq(opts, ",") {
		k, val, _ := strings.Cut(strings.TrimSpace(o), "=")
		switch k {
		case "", "rw", "nosuid", "nodev":
			// Every mount is nosuid and nodev.
		case "ro":
			spec.Readonly = true
		case "size":
			n, err := parseBytes(val)
			if err != nil || n < 1<<20 {
				return "", spec, fmt.Errorf("--tmpfs %s: size %q: give at least 1m (64m, 1g; a bare number is bytes, as docker reads it)", s, val)
			}
			spec.SizeMB = n >> 20
		case "noexec", "exec", "mode", "uid", "gid", "nr_inodes", "suid", "dev":
			return "", spec, fmt.Errorf("--tmpfs %s: option %s is not supported: a memory mount takes size and ro", s, k)
		default:
			return "", spec, fmt.Errorf("--tmpfs %s: unknown option %q: a memory mount takes size and ro", s, k)
		}
	}
	return target, spec, nil
}

// parseMount reads one --mount.
func parseMount(s string, v *airlock.VFSConfig) error {
	kv := map[string]string{}
	readonly := false
	for _, field := range strings.Split(s, ",") {
		k, val, ok := strings.Cut(field, "=")
		k = strings.TrimSpace(k)
		switch {
		case k == "readonly" || k == "ro":
			if ok && val != "true" && val != "1" && val != "false" && val != "0" {
				return fmt.Errorf("--mount %s: readonly takes true or false", s)
			}
			readonly = !ok || val == "true" || val == "1"
		case !ok:
			return fmt.Errorf("--mount %s: %q is not KEY=VALUE", s, field)
		case k == "dst" || k == "destination":
			kv["target"] = val
		case k == "tmpfs-size":
			// docker's, in bytes unless a unit says otherwise.
			n, err := parseBytes(val)
			if err != nil || n < 1<<20 {
				return fmt.Errorf("--mount %s: tmpfs-size %q: give at least 1m (64m, 1g; a bare number is bytes)", s, val)
			}
			kv["size"] = strconv.FormatInt(n>>20, 10)
		case k == "src":
			kv["source"] = val
		default:
			kv[k] = val
		}
	}
	target := cleanTarget(kv["target"])
	if target == "" {
		return fmt.Errorf("--mount %s: target is missing (target=/workspace)", s)
	}
	source := kv["source"]
	if source != "" {
		abs, err := filepath.Abs(source)
		if err != nil {
			return fmt.Errorf("--mount %s: source: %w", s, err)
		}
		source = abs
	}
	needSource := func() error {
		if source == "" {
			return fmt.Errorf("--mount %s: source is missing (source=HOST_DIRECTORY)", s)
		}
		return nil
	}
	for k := range kv {
		switch k {
		case "type", "target", "source", "size":
		default:
			return fmt.Errorf("--mount %s: unknown key %q: it takes type, source, target, size and readonly", s, k)
		}
	}
	switch t := kv["type"]; t {
	case "memory", "tmpfs":
		mb, err := parseMiB(kv["size"], "--mount size")
		if err != nil {
			return err
		}
		v.Mounts[target] = airlock.MountSpec{Type: airlock.MountMemory, SizeMB: mb, Readonly: readonly}
	case "real_fs", "realfs":
		if err := needSource(); err != nil {
			return err
		}
		v.Mounts[target] = airlock.MountSpec{Type: airlock.MountRealFS, HostPath: source, Readonly: readonly}
	case "overlay":
		if err := needSource(); err != nil {
			return err
		}
		mb, err := parseMiB(kv["size"], "--mount size")
		if err != nil {
			return err
		}
		v.Mounts[target] = airlock.MountSpec{Type: airlock.MountOverlay, Readonly: readonly,
			Upper: &airlock.MountSpec{Type: airlock.MountMemory, SizeMB: mb},
			Lower: &airlock.MountSpec{Type: airlock.MountRealFS, HostPath: source}}
	case "bind":
		if err := needSource(); err != nil {
			return err
		}
		v.DirectMounts[target] = airlock.DirectMount{HostPath: source, Readonly: readonly}
	case "":
		return fmt.Errorf("--mount %s: type is missing: memory, tmpfs, real_fs, overlay or bind", s)
	default:
		return fmt.Errorf("--mount %s: unknown type %q: memory, tmpfs, real_fs, overlay or bind", s, t)
	}
	return nil
}
