package vmkernel

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// cached puts a kernel with key in the cache as a build leaves it: its
// directory, image and manifest; current says whether it carries this
// airlock's fragment and script hashes.
func cached(t *testing.T, cacheDir, key string, current bool) {
	t.Helper()
	dir := filepath.Join(cacheDir, kernelsDir, key)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	frag, _ := Fragment("x86_64")
	m := Manifest{Key: key, Arch: "x86_64", Image: "vmlinux", FragmentSHA256: sum(frag), ScriptSHA256: sum(buildScript), BuiltAt: time.Now()}
	if !current {
		m.FragmentSHA256 = "old"
	}
	b, _ := json.Marshal(m)
	if err := os.WriteFile(filepath.Join(dir, manifestFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "vmlinux"), []byte("image"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestRemoveAndPrune(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cached(t, dir, "aaaa1111", true)
	cached(t, dir, "aaaa2222", false)
	cached(t, dir, "bbbb3333", false)

	if _, err := Remove(ctx, dir, "aaaa"); err == nil {
		t.Error("a prefix of two keys removed one")
	}
	if _, err := Remove(ctx, dir, "abc"); !errors.Is(err, ErrNoKernel) {
		t.Errorf("a prefix of 3 characters: %v", err)
	}
	if _, err := Remove(ctx, dir, "cccc"); !errors.Is(err, ErrNoKernel) {
		t.Errorf("no such key: %v", err)
	}
	k, err := Remove(ctx, dir, "bbbb")
	if err != nil || k.Key != "bbbb3333" {
		t.Fatalf("Remove bbbb: %+v, %v", k, err)
	}
	removed, err := Prune(ctx, dir)
	if err != nil || len(removed) != 1 || removed[0].Key != "aaaa2222" {
		t.Fatalf("Prune: %+v, %v", removed, err)
	}
	ks, err := List(dir)
	if err != nil || len(ks) != 1 || ks[0].Key != "aaaa1111" || !ks[0].Current {
		t.Errorf("left: %+v, %v", ks, err)
	}
	ents, _ := os.ReadDir(filepath.Join(dir, kernelsDir))
	for _, e := range ents {
		if e.Name() != "aaaa1111" && e.Name() != ".locks" {
			t.Errorf("left in the cache: %s", e.Name())
		}
	}
}
