package process

// Sandbox ids: when airlock runs as root, a sandbox's ids 0 to
// SandboxIDs-1 map to a block of as many unprivileged host ids of its own
// in [SandboxUIDBase, SandboxUIDBase + SandboxUIDRange), not to root or to
// any id the host uses: whatever reaches the host through the kernel then
// carries no privilege, and sandboxes differ from each other. A block is
// never shared by two running sandboxes; the range holds 32768 of them.
// Host uid 2^32-1 is (uid_t)-1 and never an id.
const (
	SandboxUIDBase  = 1_000_000_000
	SandboxUIDRange = 1 << 31
	// SandboxIDs is how many ids a sandbox has under root: 0 (root) to
	// 65535, which is what images expect (nobody is 65534) and what
	// rootless container engines give by default.
	SandboxIDs = 65536
)

// HostIDsDir is the registry (see package idalloc) of the host id blocks
// that running sandboxes hold when airlock runs as root. The ids are the
// host's, shared by every airlock process whatever its state directory,
// so there is one registry per host; it lives on /run, a tmpfs, as no
// sandbox outlives a boot.
const HostIDsDir = "/run/airlock/ids"
