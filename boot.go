package airlock

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
)

// hostEtc are the /etc entries bound read-only from the host into the
// default root: what programs need to run (dynamic linker cache,
// alternatives symlinks, CA certificates, time zone) and nothing that
// identifies users or holds secrets.
var hostEtc = []string{
	"alternatives", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "ssl", "ca-certificates",
	"ca-certificates.conf", "localtime", "timezone", "mime.types", "protocols", "services",
	"gai.conf", "bash.bashrc", "profile", "profile.d", "inputrc", "terminfo", "magic",
	"magic.mime", "debian_version", "os-release", "perl", "gitconfig", "npmrc", "pip.conf",
	// Accounts: the configuration that useradd, su and login need; the
	// accounts themselves (passwd, group) are the sandbox's own.
	"login.defs", "pam.d", "pam.conf", "security/limits.conf", "security/limits.d",
	"security/pam_env.conf", "default/useradd", "default/locale", "skel",
}

// Bounds on what the kernel keeps for a sandbox's System V and POSIX
// IPC: kernel memory, charged to the memory limit, that outlives the
// process that made it. Shared memory segments are bounded by the disk
// (like /dev/shm, which is in the disk) and freed when no process has
// them attached; message queues and semaphores get a few MiB each.
const (
	ipcMsgQueues     = 256      // kernel.msgmni
	ipcMsgQueueBytes = 16 << 10 // kernel.msgmnb (the kernel's default): 4 MiB in all
	// kernel.sem: the kernel's per-set and per-call bounds (SEMMSL,
	// SEMOPM), 65536 semaphores of 64 bytes in all (SEMMNS: 4 MiB), in
	// at most 1024 sets (SEMMNI).
	ipcSemPerSet     = 32000
	ipcSems          = 65536
	ipcSemOpsPerCall = 500
	ipcSemSets       = 1024
)

// posixMsgQueueBytes is the sandbox's RLIMIT_MSGQUEUE: no POSIX message
// queues. The kernel charges the bytes of a user namespace's queues to
// the user that owns the namespace as well, within that user's own
// RLIMIT_MSGQUEUE (800 KiB by default). Under root that is the sandbox's
// own uid; for an unprivileged caller it is the caller, so queues made in
// one sandbox would be missing from the caller's other sandboxes and
// processes. (mq_open finds no queue file system that landlock lets
// commands reach anyway.)
const posixMsgQueueBytes = 0

// bootConfig builds the boundary-independent part of the agent's boot
// configuration for a sandbox whose writable tree is st.
func bootConfig(id string, c *Config, st storage) *agentproto.Boot {
	host := c.Hostname
	if host == "" {
		host = id
	}
	env := []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=/root",
		"LANG=C.UTF-8",
		"HOSTNAME=" + host,
		"AIRLOCK_SANDBOX_ID=" + id,
	}
	rootfs := c.RootFS
	etc := etcFiles(host)
	if c.image != nil {
		rootfs = c.image.rootfs
		env = imageEnv(env, c.image.info.Env)
		// The image's own accounts, so that its users, useradd and su
		// work; airlock's only where it has none.
		for _, name := range []string{"passwd", "group", "nsswitch.conf"} {
			if imageHasFile(rootfs, "etc/"+name) {
				delete(etc, name)
			}
		}
	}
	keys := make([]string, 0, len(c.Env))
	for k := range c.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	user := make([]string, 0, len(keys))
	for _, k := range keys {
		user = append(user, k+"="+c.Env[k])
	}
	env = imageEnv(env, user)
	mq := uint64(posixMsgQueueBytes)
	b := &agentproto.Boot{
		Version:  agentproto.Version,
		ID:       id,
		Hostname: host,
		Env:      env,
		Root: agentproto.RootSpec{
			RootFS:    rootfs,
			SizeBytes: st.SizeBytes,
			Inodes:    st.Inodes,
			Etc:       etc,
			Workdir:   c.workingDir(),
		},
		Rlimits: agentproto.Rlimits{
			NoFile:   c.NofileLimit,
			FSize:    uint64(c.MaxFileSizeMB) << 20,
			MsgQueue: &mq,
		},
		IPC: agentproto.IPCLimits{
			ShmBytes:      uint64(st.SizeBytes),
			ShmRmidForced: true,
			MsgQueues:     ipcMsgQueues,
			MsgQueueBytes: ipcMsgQueueBytes,
			Sem:           agentproto.SemLimits{PerSet: ipcSemPerSet, Total: ipcSems, OpsPerCall: ipcSemOpsPerCall, Sets: ipcSemSets},
		},
		Hardening: agentproto.Hardening{Seccomp: true, Landlock: true, AllowPtrace: c.AllowPtrace},
	}
	if rootfs == "" {
		b.Root.HostEtc = presentHostEtc()
	}
	for _, t := range sortedKeys(c.VFS.DirectMounts) {
		d := c.VFS.DirectMounts[t]
		b.Root.Direct = append(b.Root.Direct, agentproto.DirectMount{Target: t, HostPath: d.HostPath, Readonly: d.Readonly})
	}
	b.Root.Blocked = c.VFS.BlockedPaths
	return b
}

func presentHostEtc() []string {
	var out []string
	for _, name := range hostEtc {
		if _, err := os.Lstat(filepath.Join("/etc", name)); err == nil {
			out = append(out, name)
		}
	}
	// Interpreters keep site configuration under /etc/pythonX.Y.
	if m, _ := filepath.Glob("/etc/python3*"); len(m) > 0 {
		for _, p := range m {
			out = append(out, filepath.Base(p))
		}
	}
	return out
}

func etcFiles(host string) map[string][]byte {
	return map[string][]byte{
		"passwd": []byte("root:x:0:0:root:/root:/bin/sh\n" +
			"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"),
		"group":         []byte("root:x:0:\nnogroup:x:65534:\n"),
		"hostname":      []byte(host + "\n"),
		"hosts":         []byte(fmt.Sprintf("127.0.0.1\tlocalhost %s\n::1\tlocalhost ip6-localhost ip6-loopback\n", host)),
		"resolv.conf":   []byte("# airlock: this sandbox has no network\nnameserver 127.0.0.1\n"),
		"nsswitch.conf": []byte(strings.Join([]string{"passwd: files", "group: files", "shadow: files", "hosts: files dns", "networks: files", "protocols: files", "services: files", ""}, "\n")),
	}
}
