package agentproto

// FUSEHandover is what the agent sends for each programmable mount on
// RootSpec.VFSChan, with the mount's FUSE device attached: the mount is
// made, and the kernel holds every access to it until the host serves
// the device.
type FUSEHandover struct {
	Target string `cbor:"target"`
	// DevMajor and DevMinor are the mount's device number, which names
	// its FUSE connection (/sys/fs/fuse/connections), so that the host
	// can end it at teardown whatever waits on it.
	DevMajor uint32 `cbor:"dev_major"`
	DevMinor uint32 `cbor:"dev_minor"`
}

// FUSEServed answers a FUSEHandover: Err is empty once the host serves
// the mount, and says why not otherwise.
type FUSEServed struct {
	Err string `cbor:"err,omitempty"`
}

// MaxFUSEHandover bounds either message (a target is at most a path).
const MaxFUSEHandover = 8 << 10
