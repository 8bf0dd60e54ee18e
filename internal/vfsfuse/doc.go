// Package vfsfuse serves a vfs.Provider as a FUSE file system: the
// sandbox's side of a programmable mount, run by the agent. Every
// request names its file by path and goes to the provider (in the
// sandbox, a vfsproto client whose provider is on the host); the kernel
// keeps attributes and names for a short time, and the provider's
// changes made elsewhere are dropped from its caches as they happen.
package vfsfuse
