package vfs

import (
	"context"
	"strings"
	"syscall"
)

// Limits on paths.
const (
	// MaxName is the longest file name, in bytes, as Linux's NAME_MAX.
	MaxName = 255
	// MaxPath is the longest path a provider is given, in bytes. Linux
	// bounds the path that one system call takes (PATH_MAX, 4096 bytes
	// with its NUL), not the depth of a tree: a process goes deeper with
	// relative paths (chdir, openat). A provider is given whole paths
	// from its root, so it takes four times as much: a PATH_MAX path
	// below a directory 12 KiB deep.
	MaxPath = 16 << 10
	// MaxDepth is the most names a path has: as many as one PATH_MAX
	// path holds, so that the work a provider does for one path (which
	// may grow as the square of its names: an overlay looks each
	// ancestor up) stays what one system call can ask for.
	MaxDepth = 2048
	// MaxTarget is the longest symlink target, in bytes, as PATH_MAX.
	MaxTarget = 4096
)

// CleanPath validates an untrusted path for use with a Provider and
// returns it unchanged. A valid path is absolute, at most MaxPath bytes
// and MaxDepth names, has no NUL byte, and no empty, "." or ".."
// component or component over MaxName bytes; "/" is valid. A trailing
// slash is refused (it makes an empty component). Errors are
// ENAMETOOLONG for the lengths and EINVAL for the rest.
func CleanPath(p string) (string, error) {
	if len(p) > MaxPath {
		return "", syscall.ENAMETOOLONG
	}
	if p == "" || p[0] != '/' || strings.IndexByte(p, 0) >= 0 {
		return "", syscall.EINVAL
	}
	if p == "/" {
		return p, nil
	}
	depth := 0
	for name := range strings.SplitSeq(p[1:], "/") {
		depth++
		switch {
		case name == "", name == ".", name == "..":
			return "", syscall.EINVAL
		case len(name) > MaxName, depth > MaxDepth:
			return "", syscall.ENAMETOOLONG
		}
	}
	return p, nil
}

// splitPath returns the parent directory and the last name of a clean
// path other than "/".
func splitPath(p string) (dir, name string) {
	i := strings.LastIndexByte(p, '/')
	if i <= 0 {
		return "/", p[i+1:]
	}
	return p[:i], p[i+1:]
}

// isWithin reports whether p is dir or lies below it.
func isWithin(p, dir string) bool {
	if dir == "/" || p == dir {
		return true
	}
	return strings.HasPrefix(p, dir) && p[len(dir)] == '/'
}

// Origin says where an operation on a provider comes from.
type Origin uint8

const (
	// OriginHost is host code or the file API: the default for a context
	// that carries no origin.
	OriginHost Origin = iota
	// OriginSandbox is the sandbox itself, through its mount.
	OriginSandbox
)

type originKey struct{}

// WithOrigin returns ctx carrying o. The server that serves a sandbox's
// mount marks its contexts with OriginSandbox; providers that implement
// Watcher (Memory) report to their watchers only the changes whose
// origin is not the sandbox, since the sandbox's kernel already knows of
// its own.
func WithOrigin(ctx context.Context, o Origin) context.Context {
	return context.WithValue(ctx, originKey{}, o)
}

// OriginFrom returns the origin ctx carries, OriginHost if none.
func OriginFrom(ctx context.Context) Origin {
	o, _ := ctx.Value(originKey{}).(Origin)
	return o
}

// joinPath joins a clean directory path and a name.
func joinPath(dir, name string) string {
	if dir == "/" {
		return "/" + name
	}
	return dir + "/" + name
}
