// Package bootcfg builds what a sandbox's agent is told at its start, the
// same for every boundary: its root, environment, accounts, limits and
// hardening. Backends add their own parts (network interface, channels).
package bootcfg

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

// Input is what the boot configuration is made from.
type Input struct {
	ID string
	// Hostname; "" is the id.
	Hostname string
	// RootFS is the sandbox's root tree; "" is the host's own, read-only.
	RootFS string
	// FromImage says that RootFS is an image's, whose Env is ImageEnv.
	FromImage bool
	ImageEnv  []string
	// Env is the sandbox's own environment, over the image's.
	Env map[string]string
	// DiskBytes and Inodes bound the writable tree.
	DiskBytes, Inodes int64
	// NoFile and FSizeBytes are the commands' RLIMIT_NOFILE and
	// RLIMIT_FSIZE (0: unlimited).
	NoFile, FSizeBytes uint64
	// Workdir is where commands start unless they say otherwise.
	Workdir     string
	AllowPtrace bool
	// Direct are the host directories bound in; Blocked the paths never
	// visible.
	Direct  []agentproto.DirectMount
	Blocked []string
}

// Boot is the boundary-independent part of the agent's boot
// configuration.
func Boot(in Input) *agentproto.Boot {
	host := in.Hostname
	if host == "" {
		host = in.ID
	}
	env := []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=/root",
		"LANG=C.UTF-8",
		"HOSTNAME=" + host,
		"AIRLOCK_SANDBOX_ID=" + in.ID,
	}
	rootfs := in.RootFS
	etc := etcFiles(host)
	if in.FromImage {
		env = MergeEnv(env, in.ImageEnv)
		// The image's own accounts, so that its users, useradd and su
		// work; airlock's only where it has none.
		for _, name := range []string{"passwd", "group", "nsswitch.conf"} {
			if hasFile(rootfs, "etc/"+name) {
				delete(etc, name)
			}
		}
	}
	keys := make([]string, 0, len(in.Env))
	for k := range in.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	user := make([]string, 0, len(keys))
	for _, k := range keys {
		user = append(user, k+"="+in.Env[k])
	}
	env = MergeEnv(env, user)
	mq := uint64(posixMsgQueueBytes)
	b := &agentproto.Boot{
		Version:  agentproto.Version,
		ID:       in.ID,
		Hostname: host,
		Env:      env,
		Root: agentproto.RootSpec{
			RootFS:    rootfs,
			SizeBytes: in.DiskBytes,
			Inodes:    in.Inodes,
			Etc:       etc,
			Workdir:   in.Workdir,
		},
		Rlimits: agentproto.Rlimits{
			NoFile:   in.NoFile,
			FSize:    in.FSizeBytes,
			MsgQueue: &mq,
		},
		IPC: agentproto.IPCLimits{
			ShmBytes:      uint64(in.DiskBytes),
			ShmRmidForced: true,
			MsgQueues:     ipcMsgQueues,
			MsgQueueBytes: ipcMsgQueueBytes,
			Sem:           agentproto.SemLimits{PerSet: ipcSemPerSet, Total: ipcSems, OpsPerCall: ipcSemOpsPerCall, Sets: ipcSemSets},
		},
		Hardening: agentproto.Hardening{Seccomp: true, Landlock: true, AllowPtrace: in.AllowPtrace},
	}
	if rootfs == "" {
		b.Root.HostEtc = presentHostEtc()
	}
	b.Root.Direct = in.Direct
	b.Root.Blocked = in.Blocked
	return b
}

// MergeEnv merges an environment (KEY=VALUE entries, later ones winning)
// over base, in base's order with new keys after.
func MergeEnv(base, more []string) []string {
	out := append([]string{}, base...)
	index := map[string]int{}
	for i, kv := range out {
		k, _, _ := strings.Cut(kv, "=")
		index[k] = i
	}
	for _, kv := range more {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.ContainsRune(kv, 0) {
			continue
		}
		if i, ok := index[k]; ok {
			out[i] = kv
			continue
		}
		index[k] = len(out)
		out = append(out, kv)
	}
	return out
}

// hasFile reports whether the root tree has the regular file name
// (relative to its root), not following symbolic links out of it.
func hasFile(rootfs, name string) bool {
	r, err := os.OpenRoot(rootfs)
	if err != nil {
		return false
	}
	defer r.Close()
	fi, err := r.Stat(name)
	return err == nil && fi.Mode().IsRegular()
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
