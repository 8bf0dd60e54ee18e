package airlock

import (
	"github.com/airlock-sandbox/airlock/internal/image"
	"github.com/airlock-sandbox/airlock/internal/image/store"
)

// newResolver is the image resolver for c's images in cache: with every
// way of getting an image this build has.
func newResolver(cache *store.Cache, c *Config) *image.Resolver {
	return &image.Resolver{Cache: cache, Variants: []string{"minimal", "standard", "full"}}
}
