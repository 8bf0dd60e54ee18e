package vfs

import "os"

// HostFiler is implemented by a Handle of a read-only provider whose
// contents are those of an open file of the host (a RealFS file behind
// NewReadonly): a FUSE server on the same host may then have the kernel
// read that file directly (passthrough), without asking the provider
// for each read. HostFile returns the file, which the handle keeps open
// until it is closed; nil if it has none.
//
// Only a file that nothing can write through the provider qualifies:
// the kernel ties the host file to the mounted file, not to one open of
// it, and a later open for writing would write the host file directly,
// past the provider's hooks, events and copy-on-write. A wrapper
// forwards it only when it leaves reads as they are; a provider that
// changes what a read returns, or that may later give the same path
// another file (Overlay's copy-up), must not implement it.
type HostFiler interface {
	HostFile() *os.File
}

// HostFileOf is the host file behind h (see HostFiler), or nil.
func HostFileOf(h Handle) *os.File {
	if f, ok := h.(HostFiler); ok {
		return f.HostFile()
	}
	return nil
}

// hostBacked is implemented by RealFS's handles: the open host file,
// which only a read-only provider above them may offer (HostFiler).
type hostBacked interface {
	hostFile() *os.File
}

// HostFile implements HostFiler: a read-only provider's file is the host
// file beneath, if it has one.
func (h readonlyHandle) HostFile() *os.File {
	if b, ok := h.Handle.(hostBacked); ok {
		return b.hostFile()
	}
	return HostFileOf(h.Handle)
}

// The wrappers that watch or refuse changes leave reads as they are.

func (h *observedHandle) HostFile() *os.File { return HostFileOf(h.Handle) }
func (h *hookedHandle) HostFile() *os.File   { return HostFileOf(h.Handle) }
func (h routerHandle) HostFile() *os.File    { return HostFileOf(h.Handle) }
