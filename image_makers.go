package airlock

import (
	"context"

	"github.com/airlock-sandbox/airlock/internal/image"
	"github.com/airlock-sandbox/airlock/internal/image/dist"
	"github.com/airlock-sandbox/airlock/internal/image/oci"
	"github.com/airlock-sandbox/airlock/internal/image/store"
	"github.com/airlock-sandbox/airlock/internal/image/variant"
)

// newResolver is the image resolver for c's images in cache: with every
// way of getting an image this build has. An image's unpacked size is
// bounded by oci's default (16 GiB, a million entries), not by the
// sandbox's disk: it lives in the cache, shared by every sandbox that
// runs it, and the disk bounds only what a sandbox writes on top.
func newResolver(cache *store.Cache, c *Config) *image.Resolver {
	r := &image.Resolver{
		Cache:     cache,
		Variants:  variant.Names(),
		Build:     variant.Build,
		Canonical: oci.CanonicalName,
		Pull: func(ctx context.Context, cache *store.Cache, name string, p store.ProgressFunc) (store.Image, error) {
			return oci.Pull(ctx, cache, name, oci.Options{}, p)
		},
	}
	if _, err := dist.ConfiguredManifest(); err == nil {
		r.Download = dist.Download
	}
	return r
}
