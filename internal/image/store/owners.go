package store

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"

	"github.com/airlock-sandbox/airlock/internal/image/untar"
)

// Owners is how the cache's trees hold files of many owners, and how
// they are read, linked and removed once they do. As root, that is this
// process's own work (Local). A caller without root cannot give a file
// away, nor link, read or remove what belongs to others; Owners then
// does that work as root of a user namespace mapped like the caller's
// sandboxes (package owners).
type Owners interface {
	// ID names the way trees are made: it is part of the keys of
	// what is made, so that a tree made one way is never taken for
	// one made another.
	ID() string
	// Unpacker applies layers to the tree at dir; opts.KeepOwners is
	// Owners' to set.
	Unpacker(ctx context.Context, dir string, opts untar.Options) (Unpacker, error)
	// LinkTree is LinkTree for trees of these owners.
	LinkTree(ctx context.Context, src, dst string) error
	// RemoveTree is RemoveTree for trees of these owners.
	RemoveTree(ctx context.Context, dir string) error
	// Usage is Usage for trees of these owners.
	Usage(ctx context.Context, dir string) (size, files int64, err error)
	// Run runs program name, which reads or writes trees of these
	// owners, and returns what it printed.
	Run(ctx context.Context, name string, args ...string) ([]byte, error)
}

// Unpacker applies layers in order to one tree (see untar.Unpacker).
type Unpacker interface {
	Apply(ctx context.Context, r io.Reader) error
	Stats() untar.Stats
	Root() string
	Close() error
}

// Owners' IDs for this process's own work.
const (
	// OwnersNative: root keeps each file's owner as its layer says.
	OwnersNative = "native"
	// OwnersCaller: every file is the caller's.
	OwnersCaller = "caller"
)

// Local is this process's own work: as root, files keep their owners
// (OwnersNative); otherwise they are all the caller's (OwnersCaller).
func Local() Owners { return local{root: os.Geteuid() == 0} }

type local struct{ root bool }

func (l local) ID() string {
	if l.root {
		return OwnersNative
	}
	return OwnersCaller
}

func (l local) Unpacker(_ context.Context, dir string, opts untar.Options) (Unpacker, error) {
	opts.KeepOwners = l.root
	return untar.New(dir, opts)
}

func (local) LinkTree(ctx context.Context, src, dst string) error { return LinkTree(ctx, src, dst) }

func (local) RemoveTree(_ context.Context, dir string) error { return RemoveTree(dir) }

func (local) Usage(_ context.Context, dir string) (int64, int64, error) { return Usage(dir) }

func (local) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	b, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return b, fmt.Errorf("%s: %w", name, err)
	}
	return b, nil
}
