package gvisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
)

// Paths inside the sandbox's first root, the bundle's, where the agent
// finds itself and a prepared root.
const (
	agentInside  = "/.airlock/agent"
	rootfsInside = "/.airlock/rootfs"
)

// bundle writes the OCI bundle that runsc starts the agent from, in dir:
// config.json and a read-only root of empty mount points. The root holds
// only what the agent builds the sandbox's own root from (as the process
// boundary's agent does from the host's): the host directories of the
// default root, the /etc entries it copies, or a prepared root, each
// bound read-only; and the agent binary. Nothing else of the host is in
// reach of the Sentry or its gofer. boot's root is rewritten to name
// the paths inside.
//
// With ids (as root), the Sentry and its gofer run in a user namespace
// that maps the sandbox's 0 to len-1 to that block of the host's: what
// reaches the host's files through the gofer then carries no privilege
// (host files of other owners are as closed to it as to any uid, and
// what it makes belongs to the block), as at the process level.
func bundle(dir, agentPath string, boot *agentproto.Boot, env []string, ids *specs.LinuxIDMapping, binds []attachSpec) error {
	rootfs := filepath.Join(dir, "rootfs")
	for _, d := range []string{"proc", "sys", "dev", "tmp", "etc", ".airlock"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			return fmt.Errorf("make the sandbox's bundle: %w", err)
		}
	}
	var mounts []specs.Mount
	bind := func(host, inside string) error {
		fi, err := os.Stat(host)
		if err != nil {
			return err
		}
		p := filepath.Join(rootfs, inside)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("make mount point %s in the sandbox's bundle: %w", inside, err)
		}
		if fi.IsDir() {
			err = os.MkdirAll(p, 0o755)
		} else {
			err = os.WriteFile(p, nil, 0o644)
		}
		if err != nil {
			return fmt.Errorf("make mount point %s in the sandbox's bundle: %w", inside, err)
		}
		mounts = append(mounts, specs.Mount{Destination: inside, Type: "bind", Source: host, Options: []string{"rbind", "ro", "nosuid", "nodev"}})
		return nil
	}
	if err := bind(agentPath, agentInside); err != nil {
		return fmt.Errorf("the agent binary: %w", err)
	}
	if boot.Root.RootFS != "" {
		if err := bind(boot.Root.RootFS, rootfsInside); err != nil {
			return fmt.Errorf("the sandbox's root %s: %w", boot.Root.RootFS, err)
		}
		boot.Root.RootFS = rootfsInside
	} else {
		for _, d := range agentproto.HostRootDirs() {
			if err := mirror("/"+d, filepath.Join(rootfs, d), "/"+d, bind); err != nil {
				return err
			}
		}
	}
	// The sandbox's programmable mounts (their providers refuse what
	// they must) and its disk, writable, which the agent binds at their
	// places. Not nosuid: the Sentry decides for its own processes
	// (--allow-suid), as on the sandbox's own tree.
	for _, b := range binds {
		if err := os.MkdirAll(filepath.Join(rootfs, b.inside), 0o755); err != nil {
			return fmt.Errorf("make mount point %s in the sandbox's bundle: %w", b.inside, err)
		}
		mounts = append(mounts, specs.Mount{Destination: b.inside, Type: "bind", Source: b.at, Options: []string{"rbind", "rw", "nodev"}})
	}
	for _, name := range boot.Root.HostEtc {
		p := filepath.Join("/etc", name)
		if err := mirror(p, filepath.Join(rootfs, "etc", name), p, bind); err != nil {
			return err
		}
	}
	spec := specs.Spec{
		Version:  specs.Version,
		Hostname: boot.Hostname,
		Root:     &specs.Root{Path: "rootfs", Readonly: true},
		Process: &specs.Process{
			Args: []string{agentInside},
			Env:  env,
			Cwd:  "/",
			// The agent is root of the Sentry with every capability:
			// it builds the root, mounts and the network interface,
			// and confines commands itself, as at the process level.
			Capabilities: &specs.LinuxCapabilities{Bounding: allCaps, Effective: allCaps, Permitted: allCaps},
			Rlimits:      []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 1 << 20, Soft: 1 << 20}},
		},
		Mounts: append([]specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"ro", "nosuid", "nodev", "noexec"}},
		}, mounts...),
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{{Type: specs.PIDNamespace}, {Type: specs.NetworkNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace}, {Type: specs.MountNamespace}},
		},
	}
	if ids != nil {
		spec.Linux.Namespaces = append(spec.Linux.Namespaces, specs.LinuxNamespace{Type: specs.UserNamespace})
		spec.Linux.UIDMappings = []specs.LinuxIDMapping{*ids}
		spec.Linux.GIDMappings = []specs.LinuxIDMapping{*ids}
	}
	b, err := json.MarshalIndent(&spec, "", "  ")
	if err != nil {
		return fmt.Errorf("write the sandbox's OCI spec: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o600); err != nil {
		return fmt.Errorf("write the sandbox's OCI spec: %w", err)
	}
	return nil
}

// mirror makes inside (a path in the bundle's root) what host is: the
// same symlink, or a read-only bind of the directory or file. A host
// path that does not exist is left out, as the agent leaves it out.
func mirror(host, inside, dest string, bind func(host, inside string) error) error {
	fi, err := os.Lstat(host)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s for the sandbox's root: %w", host, err)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		target, err := os.Readlink(host)
		if err != nil {
			return fmt.Errorf("read %s for the sandbox's root: %w", host, err)
		}
		if err := os.MkdirAll(filepath.Dir(inside), 0o755); err != nil {
			return err
		}
		return os.Symlink(target, inside)
	}
	if err := bind(host, dest); err != nil {
		return fmt.Errorf("bind %s into the sandbox's bundle: %w", host, err)
	}
	return nil
}

// allCaps is every capability the Sentry knows.
var allCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE", "CAP_NET_BIND_SERVICE",
	"CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK", "CAP_IPC_OWNER",
	"CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE", "CAP_SYS_PACCT",
	"CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE", "CAP_SYS_RESOURCE", "CAP_SYS_TIME",
	"CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE", "CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL",
	"CAP_SETFCAP", "CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG", "CAP_WAKE_ALARM",
	"CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ",
}
