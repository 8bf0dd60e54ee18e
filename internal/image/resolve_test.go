package image

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/image/store"
)

// maker makes a one-file image for any name, counting its calls.
func maker(kind string, calls *atomic.Int32) Maker {
	return func(ctx context.Context, c *store.Cache, name string, p store.ProgressFunc) (store.Image, error) {
		calls.Add(1)
		time.Sleep(20 * time.Millisecond)
		img, err := c.Make(ctx, store.Key([]byte(kind+name)), func(_ context.Context, dir string) (store.Meta, error) {
			p(store.Progress{Image: name, Step: "build"})
			return store.Meta{Kind: kind}, os.MkdirAll(filepath.Join(dir, "rootfs"), 0o755)
		})
		if err != nil {
			return img, err
		}
		return img, c.Tag(name, img.Key)
	}
}

func TestResolverChoosesMaker(t *testing.T) {
	c, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var builds, downloads, pulls atomic.Int32
	r := &Resolver{Cache: c, Variants: []string{"minimal", "standard"}, Build: maker("variant", &builds), Pull: maker("oci", &pulls)}
	ctx := context.Background()
	img, err := r.Get(ctx, "standard", nil)
	if err != nil || img.Kind != "variant" || builds.Load() != 1 {
		t.Fatalf("standard: %+v %v (builds %d)", img, err, builds.Load())
	}
	// Cached: nothing is made again.
	if _, err := r.Get(ctx, "standard", nil); err != nil || builds.Load() != 1 {
		t.Fatalf("standard again: %v, builds %d", err, builds.Load())
	}
	if img, err := r.Get(ctx, "python:3.12-slim", nil); err != nil || img.Kind != "oci" || pulls.Load() != 1 {
		t.Fatalf("python: %+v %v", img, err)
	}
	// A configured manifest wins over a build.
	r.Download = maker("download", &downloads)
	if img, err := r.Get(ctx, "minimal", nil); err != nil || img.Kind != "download" {
		t.Fatalf("minimal with a manifest: %+v %v", img, err)
	}
	if _, err := r.Get(ctx, "host", nil); err == nil {
		t.Fatal("host came from the cache")
	}
}

func TestResolverSharesConcurrentGets(t *testing.T) {
	c, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var pulls atomic.Int32
	r := &Resolver{Cache: c, Pull: maker("oci", &pulls)}
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = r.Get(context.Background(), "registry.test/a:1", nil)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if pulls.Load() != 1 {
		t.Fatalf("6 concurrent gets pulled %d times", pulls.Load())
	}
}

func TestResolverNamesVariantsForAMistypedOne(t *testing.T) {
	c, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	unreachable := errors.New("dial tcp: lookup registry-1.docker.io: no such host")
	r := &Resolver{Cache: c, Variants: []string{"minimal", "standard", "full"},
		Pull: func(context.Context, *store.Cache, string, store.ProgressFunc) (store.Image, error) {
			return store.Image{}, unreachable
		}}
	_, err = r.Get(context.Background(), "standrd", nil)
	if !errors.Is(err, unreachable) || !strings.Contains(err.Error(), "minimal, standard, full") {
		t.Fatalf("a mistyped variant: %v", err)
	}
	_, err = r.Get(context.Background(), "registry.test/x:1", nil)
	if !errors.Is(err, unreachable) || strings.Contains(err.Error(), "variant") {
		t.Fatalf("a reference: %v", err)
	}
}

func TestResolverFindsCanonicalNames(t *testing.T) {
	c, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var pulls atomic.Int32
	pull := maker("oci", &pulls)
	r := &Resolver{Cache: c,
		Canonical: func(n string) (string, error) { return "docker.io/library/" + n, nil },
		Pull: func(ctx context.Context, c *store.Cache, name string, p store.ProgressFunc) (store.Image, error) {
			return pull(ctx, c, "docker.io/library/"+name, p)
		}}
	if _, err := r.Get(context.Background(), "python:3", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Get(context.Background(), "python:3", nil); err != nil || pulls.Load() != 1 {
		t.Fatalf("an image cached under its canonical name was pulled again: %v, pulls %d", err, pulls.Load())
	}
}
