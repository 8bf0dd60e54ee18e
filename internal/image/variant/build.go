package variant

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"runtime"
	"time"

	"github.com/airlock-sandbox/airlock/internal/image/store"
)

// Kind is the store.Meta.Kind of a variant's image.
const Kind = "variant"

// Builder builds variants into an image cache.
type Builder struct {
	Cache  *store.Cache
	Source Source
	// Progress, when set, receives reports of a build (throttled).
	Progress store.ProgressFunc
	// Log, when set, gets mmdebstrap's output at debug level.
	Log *slog.Logger
	// Rebuild builds a variant even when the cache holds it, replacing
	// the image there.
	Rebuild bool
}

// Build builds the variant called name into cache, from the Source
// that SourceFromEnv says, unless cache holds it already; it returns
// the image, named after the variant. See Builder.
func Build(ctx context.Context, cache *store.Cache, name string, progress store.ProgressFunc) (store.Image, error) {
	src, err := SourceFromEnv()
	if err != nil {
		return store.Image{}, err
	}
	b := Builder{Cache: cache, Source: src, Progress: progress}
	return b.Build(ctx, name)
}

// Cached returns the image of the variant called name if the cache
// holds it.
func (b *Builder) Cached(name string) (store.Image, bool, error) {
	v, err := Get(name)
	if err != nil {
		return store.Image{}, false, err
	}
	img, err := b.Cache.Get(v.Key(b.Source))
	if errors.Is(err, store.ErrNotFound) {
		return store.Image{}, false, nil
	}
	if err != nil {
		return store.Image{}, false, err
	}
	return img, true, nil
}

// Build builds the variant called name, unless the cache holds it (and
// Rebuild is not set), names it after the variant, and packs it as an
// erofs file too. A build that fails or is cancelled leaves nothing in
// the cache; two builds of one variant at once, in this process or
// another, build it once.
func (b *Builder) Build(ctx context.Context, name string) (store.Image, error) {
	v, err := Get(name)
	if err != nil {
		return store.Image{}, err
	}
	return b.BuildVariant(ctx, v)
}

// debName is what a Debian package name may be (Debian policy 5.6.1):
// anything else could be an apt pattern or an option.
var debName = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+$`)

// BuildVariant is Build for a variant given whole.
func (b *Builder) BuildVariant(ctx context.Context, v Variant) (store.Image, error) {
	if err := b.Source.check(); err != nil {
		return store.Image{}, err
	}
	if v.Name == "" {
		return store.Image{}, errors.New("a variant needs a name")
	}
	for _, p := range v.Packages {
		if !debName.MatchString(p) {
			return store.Image{}, fmt.Errorf("variant %s: %q is not a Debian package name", v.Name, p)
		}
	}
	key := v.Key(b.Source)
	if b.Rebuild {
		if _, err := b.Cache.Remove(ctx, key); err != nil && !errors.Is(err, store.ErrNotFound) {
			return store.Image{}, fmt.Errorf("remove the cached image of %s to build it again: %w", v.Name, err)
		}
	}
	t := &throttle{fn: b.Progress, interval: 100 * time.Millisecond}
	img, err := b.Cache.Make(ctx, key, func(ctx context.Context, dir string) (store.Meta, error) {
		if err := b.fill(ctx, v, dir, t); err != nil {
			return store.Meta{}, err
		}
		return store.Meta{
			Kind:   Kind,
			Source: fmt.Sprintf("debian %s/%s %s, from %s", b.Source.Suite, b.Source.Arch, v.Name, b.Source.Mirror),
			Arch:   runtime.GOARCH,
			Config: store.Config{
				Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
				Cmd: []string{"/bin/bash"},
			},
		}, nil
	})
	if err != nil {
		return store.Image{}, fmt.Errorf("build image %s: %w", v.Name, err)
	}
	if err := b.Cache.Tag(v.Name, key); err != nil {
		return store.Image{}, err
	}
	t.send(store.Progress{Image: v.Name, Step: StepPack, Item: "erofs"})
	if _, err := b.Cache.EROFS(ctx, img); err != nil {
		// The tree is whole and usable; the vm level packs it again
		// when it needs it.
		b.log().Warn("image built, but not packed as erofs", "image", v.Name, "err", err)
	}
	img, err = b.Cache.Get(key)
	if err != nil {
		return store.Image{}, err
	}
	t.send(store.Progress{Image: v.Name, Step: StepDone, Done: img.Size, Total: img.Size})
	return img, nil
}

func (b *Builder) log() *slog.Logger {
	if b.Log != nil {
		return b.Log
	}
	return slog.New(slog.DiscardHandler)
}
