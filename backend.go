package airlock

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/airlock-sandbox/airlock/internal/agentbin"
	"github.com/airlock-sandbox/airlock/internal/agentproto"
	"github.com/airlock-sandbox/airlock/internal/bootcfg"
	"github.com/airlock-sandbox/airlock/internal/boundary"
	"github.com/airlock-sandbox/airlock/internal/boundary/backends"
	"github.com/airlock-sandbox/airlock/internal/vmkernel"
)

// bootInput is what the agent's boot configuration is made from. Direct
// mounts are in it when the backend binds host directories (binds);
// otherwise buildVFS serves them.
func bootInput(id string, c *Config, st storage, binds bool) bootcfg.Input {
	in := bootcfg.Input{
		ID: id, Hostname: c.Hostname, RootFS: c.RootFS, Env: c.Env,
		DiskBytes: st.SizeBytes, Inodes: st.Inodes,
		NoFile: c.NofileLimit, FSizeBytes: uint64(c.MaxFileSizeMB) << 20,
		Workdir: c.workingDir(), AllowPtrace: c.AllowPtrace, Blocked: c.VFS.BlockedPaths,
	}
	if c.image != nil {
		in.RootFS, in.FromImage, in.ImageEnv = c.image.rootfs, true, c.image.info.Env
	}
	if binds {
		for _, t := range sortedKeys(c.VFS.DirectMounts) {
			d := c.VFS.DirectMounts[t]
			in.Direct = append(in.Direct, agentproto.DirectMount{Target: t, HostPath: d.HostPath, Readonly: d.Readonly})
		}
	}
	return in
}

// boundarySpec is what the sandbox's backend is asked to start.
func boundarySpec(id string, c *Config, st storage) (boundary.Spec, error) {
	agent, err := agentbin.Find(c.AgentPath)
	if err != nil {
		return boundary.Spec{}, err
	}
	spec := boundary.Spec{
		ID: id, AgentPath: agent, Log: c.Logger,
		Limits: boundary.Limits{MemoryBytes: max(c.Resources.MemoryMB, 0) << 20, Pids: c.PidsLimit, CPUs: c.Resources.CPUs},
		Kernel: c.Kernel, RequireKVM: c.RequireKVM,
	}
	if c.image != nil {
		spec.RootImage = c.image.erofs
	}
	if c.Isolation == IsolationVM {
		// Kernels live beside the images, unless their own cache is
		// named.
		spec.CacheDir = os.Getenv(vmkernel.EnvCacheDir)
		if spec.CacheDir == "" {
			if spec.CacheDir, err = c.imageCacheDir(); err != nil {
				return boundary.Spec{}, err
			}
		}
	}
	if st.OnDisk {
		home, err := Home()
		if err != nil {
			return boundary.Spec{}, fmt.Errorf("a disk larger than memory allows lives under the state directory: %w", err)
		}
		spec.DiskDir = filepath.Join(home, "disks")
	}
	return spec, nil
}

// Sweep removes what sandboxes whose supervisor died (for example by
// SIGKILL) left on the host: their empty cgroups. Everything else such a
// sandbox had lived in its own namespaces and died with it. The airlock CLI
// calls it once per invocation; a long-running embedder may call it
// periodically. It returns the ids of the sandboxes cleaned.
func Sweep() []string { return backends.Sweep() }

// Reclaim removes what sandbox id left on the host after its supervisor
// died: any process still in its cgroups, and the cgroups. Call it only for
// a sandbox whose supervisor is known to be gone (airlock prune does).
func Reclaim(id string) error { return backends.Reclaim(id) }
