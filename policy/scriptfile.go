package policy

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"syscall"

	"go.starlark.net/starlark"
)

// The operations on files that on_file is asked about: its op argument.
const (
	FileOpOpen     = "open" // an open for writing
	FileOpCreate   = "create"
	FileOpWrite    = "write"
	FileOpTruncate = "truncate"
	FileOpRemove   = "remove"
	FileOpRename   = "rename"
	FileOpLink     = "link"
	FileOpMkdir    = "mkdir"
	FileOpSymlink  = "symlink"
	FileOpChmod    = "chmod"
	FileOpChown    = "chown"
	FileOpUtimens  = "utimens"
)

var fileOps = []string{
	FileOpOpen, FileOpCreate, FileOpWrite, FileOpTruncate, FileOpRemove, FileOpRename,
	FileOpLink, FileOpMkdir, FileOpSymlink, FileOpChmod, FileOpChown, FileOpUtimens,
}

// fileErrnos are the errno names on_file may return to deny an
// operation. Each is in package syscall on Linux and on macOS alike.
var fileErrnos = map[string]syscall.Errno{
	"EACCES":       syscall.EACCES,
	"EAGAIN":       syscall.EAGAIN,
	"EBADF":        syscall.EBADF,
	"EBUSY":        syscall.EBUSY,
	"ECANCELED":    syscall.ECANCELED,
	"EDEADLK":      syscall.EDEADLK,
	"EDQUOT":       syscall.EDQUOT,
	"EEXIST":       syscall.EEXIST,
	"EFBIG":        syscall.EFBIG,
	"EINTR":        syscall.EINTR,
	"EINVAL":       syscall.EINVAL,
	"EIO":          syscall.EIO,
	"EISDIR":       syscall.EISDIR,
	"ELOOP":        syscall.ELOOP,
	"EMFILE":       syscall.EMFILE,
	"EMLINK":       syscall.EMLINK,
	"ENAMETOOLONG": syscall.ENAMETOOLONG,
	"ENFILE":       syscall.ENFILE,
	"ENODEV":       syscall.ENODEV,
	"ENOENT":       syscall.ENOENT,
	"ENOLCK":       syscall.ENOLCK,
	"ENOMEM":       syscall.ENOMEM,
	"ENOSPC":       syscall.ENOSPC,
	"ENOSYS":       syscall.ENOSYS,
	"ENOTDIR":      syscall.ENOTDIR,
	"ENOTEMPTY":    syscall.ENOTEMPTY,
	"ENOTSUP":      syscall.ENOTSUP,
	"ENXIO":        syscall.ENXIO,
	"EOPNOTSUPP":   syscall.EOPNOTSUPP,
	"EPERM":        syscall.EPERM,
	"EROFS":        syscall.EROFS,
	"ESTALE":       syscall.ESTALE,
	"ETIMEDOUT":    syscall.ETIMEDOUT,
	"ETXTBSY":      syscall.ETXTBSY,
	"EWOULDBLOCK":  syscall.EWOULDBLOCK,
	"EXDEV":        syscall.EXDEV,
}

// fileErrnoNames lists the keys of fileErrnos, sorted, for errors.
var fileErrnoNames = strings.Join(slices.Sorted(maps.Keys(fileErrnos)), ", ")

// HasFileHook reports whether the policy script defines on_file, so
// that FileDecision can deny an operation on a file.
func (p *Policy) HasFileHook() bool {
	return p.script != nil && p.script.onFile != nil
}

// FileDecision asks the policy script's on_file(op, path, size) whether
// an operation on a file may go ahead. op is one of the FileOp constants
// ("open", "create", "write", ...); see the package documentation for
// what path and size are for each. It returns 0 to allow, or the errno
// to deny with: EACCES when on_file returns False, the errno it names
// when it returns a name such as "EROFS". Without on_file it allows.
//
// When the script fails (a fault, a step, time or allocation limit, a
// result that is neither a bool nor a known errno name, or ctx ending),
// FileDecision returns EACCES and a *ScriptError: deny, and report the
// error. An op it does not know is an error too, with EACCES.
func (p *Policy) FileDecision(ctx context.Context, op, path string, size int64) (errno syscall.Errno, err error) {
	if !slices.Contains(fileOps, op) {
		return syscall.EACCES, fmt.Errorf("policy: FileDecision: unknown file operation %q", op)
	}
	if !p.HasFileHook() {
		return 0, nil
	}
	errno, err = p.script.file(ctx, op, path, size)
	if err != nil {
		return syscall.EACCES, err
	}
	return errno, nil
}

// file runs on_file(op, path, size), which must return a bool or an
// errno name.
func (s *script) file(ctx context.Context, op, path string, size int64) (syscall.Errno, error) {
	var errno syscall.Errno
	err := s.run(ctx, fnOnFile, func(th *starlark.Thread) error {
		v, err := starlark.Call(th, s.onFile, starlark.Tuple{starlark.String(op), starlark.String(path), starlark.MakeInt64(size)}, nil)
		if err != nil {
			return err
		}
		errno, err = fileResult(v)
		if err != nil {
			return scriptErrorAt(fnOnFile, s.onFile.Position(), "%v", err)
		}
		return nil
	})
	return errno, err
}

// fileResult converts what on_file returned: True allows (0), False
// denies with EACCES, an errno name denies with that errno.
func fileResult(v starlark.Value) (syscall.Errno, error) {
	switch v := v.(type) {
	case starlark.Bool:
		if v {
			return 0, nil
		}
		return syscall.EACCES, nil
	case starlark.String:
		name := string(v)
		if errno, ok := fileErrnos[name]; ok {
			return errno, nil
		}
		if _, ok := fileErrnos[strings.ToUpper(name)]; ok {
			return 0, fmt.Errorf("returned %q: errno names are upper case (%q)", name, strings.ToUpper(name))
		}
		if len(name) > 40 {
			name = name[:40] + "..."
		}
		return 0, fmt.Errorf("returned %q, which is not an errno name on_file may return: want True, False or one of %s", name, fileErrnoNames)
	case starlark.NoneType:
		return 0, fmt.Errorf("returned None (does each branch end in a return?), want True, False or an errno name such as \"EPERM\"")
	}
	return 0, fmt.Errorf("returned %s, want True, False or an errno name such as \"EPERM\"", v.Type())
}
