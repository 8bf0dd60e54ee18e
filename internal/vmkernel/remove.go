package vmkernel

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ErrNoKernel is returned by Remove for a key no cached kernel has.
var ErrNoKernel = errors.New("no such guest kernel")

// Remove removes the cached kernel whose key is, or starts with, key (at
// least 4 characters). It waits for a build of that key to end first, and
// returns what it removed.
func Remove(ctx context.Context, cacheDir, key string) (Kernel, error) {
	ks, err := List(cacheDir)
	if err != nil {
		return Kernel{}, err
	}
	var found []Kernel
	for _, k := range ks {
		if len(key) >= 4 && strings.HasPrefix(k.Key, key) {
			found = append(found, k)
		}
	}
	switch {
	case len(found) == 0:
		return Kernel{}, fmt.Errorf("%w %q in %s (airlock kernel list shows the keys; give at least 4 characters)", ErrNoKernel, key, filepath.Join(cacheDir, kernelsDir))
	case len(found) > 1:
		return Kernel{}, fmt.Errorf("%q names %d guest kernels: give more of the key", key, len(found))
	}
	return found[0], remove(ctx, cacheDir, found[0])
}

// Prune removes the cached kernels not built from this airlock's fragment
// and build script (List's Current), which nothing boots any more.
func Prune(ctx context.Context, cacheDir string) ([]Kernel, error) {
	ks, err := List(cacheDir)
	if err != nil {
		return nil, err
	}
	var removed []Kernel
	for _, k := range ks {
		if k.Current {
			continue
		}
		if err := remove(ctx, cacheDir, k); err != nil {
			return removed, err
		}
		removed = append(removed, k)
	}
	return removed, nil
}

// remove takes k's build lock, moves its directory aside (so that no
// reader finds half of it) and removes it.
func remove(ctx context.Context, cacheDir string, k Kernel) error {
	root := filepath.Join(cacheDir, kernelsDir)
	if err := os.MkdirAll(filepath.Join(root, ".locks"), 0o755); err != nil {
		return fmt.Errorf("remove the guest kernel %s: %w", k.Key, err)
	}
	unlock, err := Lock(ctx, filepath.Join(root, ".locks", k.Key))
	if err != nil {
		return fmt.Errorf("wait for a build of the guest kernel %s: %w", k.Key, err)
	}
	defer unlock()
	aside := filepath.Join(root, ".rm-"+k.Key)
	if err := os.Rename(filepath.Join(root, k.Key), aside); err != nil {
		return fmt.Errorf("remove the guest kernel %s: %w", k.Key, err)
	}
	if err := os.RemoveAll(aside); err != nil {
		return fmt.Errorf("remove the guest kernel %s: %w", k.Key, err)
	}
	return nil
}
