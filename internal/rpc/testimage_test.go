package rpc

import (
	"os"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/image/store"
)

// useTestImage points the image cache at the one `make images` fills
// ($AIRLOCK_TEST_IMAGE_CACHE), and skips t, saying how to get it, when
// that cache does not hold name: building a variant takes minutes, which
// `make test` spends once per machine, before the tests.
func useTestImage(t *testing.T, name string) {
	t.Helper()
	dir := os.Getenv("AIRLOCK_TEST_IMAGE_CACHE")
	if dir == "" {
		t.Skipf("image %s: set AIRLOCK_TEST_IMAGE_CACHE to a cache that holds it (make images builds it)", name)
	}
	c, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Lookup(name); err != nil {
		t.Skipf("image %s is not in %s (make images builds it): %v", name, dir, err)
	}
	t.Setenv("AIRLOCK_CACHE_DIR", dir)
}
