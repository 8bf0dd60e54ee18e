// Package image finds the image a sandbox names in the local cache, and
// gets it there first when it is missing: a variant is built from
// Debian's packages or downloaded from a manifest, anything else is
// pulled from a registry (or read from a local OCI layout or docker-save
// tarball).
package image

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/airlock-sandbox/airlock/internal/image/store"
)

// Host is the name of the default image: the host's /usr, /bin and
// /lib, read-only. It is not in the cache.
const Host = "host"

// Maker gets an image into the cache by name.
type Maker func(ctx context.Context, cache *store.Cache, name string, progress store.ProgressFunc) (store.Image, error)

// Resolver finds images by name in Cache, getting them first when they
// are missing.
type Resolver struct {
	Cache *store.Cache
	// Variants are the names Build and Download make.
	Variants []string
	// Download gets a variant from the configured manifest; nil when
	// none is configured. It is preferred to Build when set: a
	// configured manifest is the user's choice of where variants come
	// from, and a download takes seconds where a build takes minutes.
	Download Maker
	// Build builds a variant from Debian's packages.
	Build Maker
	// Pull gets any other name from a registry, a local OCI layout or a
	// docker-save tarball.
	Pull Maker
	// Canonical, when set, gives the name under which Pull names what it
	// pulls ("python:3" is "docker.io/library/python:3"), so that a
	// cached image is found without asking its registry.
	Canonical func(name string) (string, error)

	mu       sync.Mutex
	inflight map[string]*call
}

// call is one get of a name that others in this process wait for.
type call struct {
	done chan struct{}
	img  store.Image
	err  error
}

// IsVariant reports whether name is one of the variants.
func (r *Resolver) IsVariant(name string) bool { return slices.Contains(r.Variants, name) }

// Get returns the image name in the cache, getting it first when it is
// missing. Concurrent gets of one name in this process share one
// attempt (the cache itself keeps makers in other processes apart);
// progress reaches only the first caller's function.
func (r *Resolver) Get(ctx context.Context, name string, progress store.ProgressFunc) (store.Image, error) {
	name = strings.TrimSpace(name)
	if name == "" || name == Host {
		return store.Image{}, fmt.Errorf("the %s image is not in the image cache: it is the host's own /usr, /bin and /lib", Host)
	}
	img, err := r.Cache.Lookup(name)
	if errors.Is(err, store.ErrNotFound) && !r.IsVariant(name) && r.Canonical != nil {
		if cn, cerr := r.Canonical(name); cerr == nil && cn != name {
			img, err = r.Cache.Lookup(cn)
		}
	}
	if err == nil {
		return img, nil
	} else if !errors.Is(err, store.ErrNotFound) {
		// A damaged entry is made again.
		progressOrNothing(progress)(store.Progress{Image: name, Step: "verify", Item: err.Error()})
	}
	r.mu.Lock()
	if c, ok := r.inflight[name]; ok {
		r.mu.Unlock()
		select {
		case <-c.done:
			return c.img, c.err
		case <-ctx.Done():
			return store.Image{}, ctx.Err()
		}
	}
	c := &call{done: make(chan struct{})}
	if r.inflight == nil {
		r.inflight = map[string]*call{}
	}
	r.inflight[name] = c
	r.mu.Unlock()

	c.img, c.err = r.make(ctx, name, progressOrNothing(progress))
	r.mu.Lock()
	delete(r.inflight, name)
	r.mu.Unlock()
	close(c.done)
	return c.img, c.err
}

func (r *Resolver) make(ctx context.Context, name string, progress store.ProgressFunc) (store.Image, error) {
	var m Maker
	switch {
	case r.IsVariant(name) && r.Download != nil:
		m = r.Download
	case r.IsVariant(name) && r.Build != nil:
		m = r.Build
	case r.IsVariant(name):
		return store.Image{}, fmt.Errorf("image %q is a variant, and this build can neither build nor download variants", name)
	case r.Pull != nil:
		m = r.Pull
	default:
		return store.Image{}, fmt.Errorf("image %q is not a known variant (%s) and this build cannot pull images", name, strings.Join(r.Variants, ", "))
	}
	img, err := m(ctx, r.Cache, name, progress)
	if err != nil {
		if !r.IsVariant(name) && bareName(name) {
			// Most likely a variant mistyped, not an image of Docker
			// Hub's library.
			return store.Image{}, fmt.Errorf("image %q is not a variant (%s), and as an OCI image: %w", name, strings.Join(r.Variants, ", "), err)
		}
		return store.Image{}, err
	}
	// The vm level attaches an image as an erofs disk: packed now,
	// while the tree is hot in the page cache. A failure here costs the
	// vm level a pack later, and nothing else.
	progress(store.Progress{Image: name, Step: "pack", Item: "erofs"})
	if _, err := r.Cache.EROFS(ctx, img); err != nil {
		progress(store.Progress{Image: name, Step: "pack", Item: "erofs not made: " + err.Error()})
	}
	progress(store.Progress{Image: name, Step: "done", Done: img.Size, Total: img.Size})
	return img, nil
}

// bareName reports whether name is a plain word, with no registry,
// path, tag or digest.
func bareName(name string) bool {
	return !strings.ContainsAny(name, "/:@.")
}

func progressOrNothing(p store.ProgressFunc) store.ProgressFunc {
	if p == nil {
		return func(store.Progress) {}
	}
	return p
}
