package oci_test

import (
	"archive/tar"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/airlock-sandbox/airlock/internal/image/oci"
)

// sameInode reports whether a and b are one file (hard links).
func sameInode(t *testing.T, a, b string) bool {
	t.Helper()
	fa, err := os.Lstat(a)
	if err != nil {
		t.Fatal(err)
	}
	fb, err := os.Lstat(b)
	if err != nil {
		t.Fatal(err)
	}
	return os.SameFile(fa, fb)
}

// A pull of an image that begins with the layers of one pulled before
// starts from their unpacked chain: their blobs are neither read nor
// downloaded again, and its tree shares their files. An image that
// extends another whole starts from that image's tree. Prune removes
// the chains once no image begins with them.
func TestChainReuse(t *testing.T) {
	ctx := ctxT(t)
	reg := startRegistry(t, registryOptions{})
	l1 := layerOf(t,
		file{name: "usr/", typ: tar.TypeDir, mode: 0o755},
		file{name: "usr/lib/", typ: tar.TypeDir, mode: 0o2750, uid: 7},
		file{name: "usr/lib/big", size: 1 << 20},
		file{name: "usr/bin/su", body: "su", mode: 0o4755},
		file{name: "usr/bin/again", typ: tar.TypeLink, link: "usr/bin/su"},
		file{name: "bin", typ: tar.TypeSymlink, link: "usr/bin"},
		file{name: "etc/gone", body: "gone"},
	)
	l2 := layerOf(t, file{name: "etc/.wh.gone"}, file{name: "etc/mid", body: "mid"})
	la := layerOf(t, file{name: "a", body: "a"})
	lb := layerOf(t, file{name: "b", body: "b"}, file{name: "usr/lib/big", body: "replaced"})
	l4 := layerOf(t, file{name: "c", body: "c"})
	reg.Push(t, "a:1", imageOf(t, v1.Config{}, l1, l2, la))
	reg.Push(t, "b:1", imageOf(t, v1.Config{}, l1, l2, lb))
	reg.Push(t, "c:1", imageOf(t, v1.Config{}, l1, l2, la, l4))
	c := openCache(t)
	a, err := oci.Pull(ctx, c, reg.Host+"/a:1", oci.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Without the shared layers' blobs, b is made from their chain.
	for _, l := range []v1.Layer{l1, l2} {
		p, _ := c.BlobPath(digestOf(t, l))
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	b, err := oci.Pull(ctx, c, reg.Host+"/b:1", oci.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []v1.Layer{l1, l2, la, lb} {
		if n := reg.BlobGets(digestOf(t, l)); n != 1 {
			t.Errorf("layer %s was downloaded %d times, want once", digestOf(t, l), n)
		}
	}
	for _, n := range []string{"usr/bin/su", "usr/bin/again", "bin", "etc/mid"} {
		if !sameInode(t, filepath.Join(a.RootFS, n), filepath.Join(b.RootFS, n)) {
			t.Errorf("%s of b is not a's: the chain was not used", n)
		}
	}
	if !sameInode(t, filepath.Join(b.RootFS, "usr/bin/su"), filepath.Join(b.RootFS, "usr/bin/again")) {
		t.Error("a hard link in the chain is two files in its copy")
	}
	if got := readFile(t, filepath.Join(b.RootFS, "usr/lib/big")); got != "replaced" {
		t.Errorf("b's own layer: usr/lib/big is %q", got)
	}
	if len(readFile(t, filepath.Join(a.RootFS, "usr/lib/big"))) != 1<<20 {
		t.Error("b's layer changed a's file through a hard link")
	}
	for _, n := range []string{"a", "etc/gone"} {
		if _, err := os.Lstat(filepath.Join(b.RootFS, n)); err == nil {
			t.Errorf("b has %s", n)
		}
	}
	// Directories are b's own, with a's mode, owner and time (but
	// usr/lib's, which b's layer changed).
	for _, n := range []string{"usr", "usr/lib"} {
		da, _ := os.Lstat(filepath.Join(a.RootFS, n))
		db, _ := os.Lstat(filepath.Join(b.RootFS, n))
		if os.SameFile(da, db) || da.Mode() != db.Mode() || n == "usr" && !da.ModTime().Equal(db.ModTime()) {
			t.Errorf("%s: a's %v %v, b's %v %v", n, da.Mode(), da.ModTime(), db.Mode(), db.ModTime())
		}
	}
	db, _ := os.Lstat(filepath.Join(b.RootFS, "usr/lib"))
	if os.Geteuid() == 0 {
		if uid := db.Sys().(*syscall.Stat_t).Uid; uid != 7 {
			t.Errorf("usr/lib of b belongs to %d, want 7", uid)
		}
	}
	if target, _ := os.Readlink(filepath.Join(b.RootFS, "bin")); target != "usr/bin" {
		t.Errorf("bin -> %q", target)
	}
	// c is a and a layer: a's own blob is not needed either.
	p, _ := c.BlobPath(digestOf(t, la))
	os.Remove(p)
	cimg, err := oci.Pull(ctx, c, reg.Host+"/c:1", oci.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if reg.BlobGets(digestOf(t, la)) != 1 || !sameInode(t, filepath.Join(a.RootFS, "a"), filepath.Join(cimg.RootFS, "a")) {
		t.Errorf("c was not made from a's tree: a's layer downloaded %d times", reg.BlobGets(digestOf(t, la)))
	}
	if readFile(t, filepath.Join(cimg.RootFS, "c")) != "c" || cimg.Files != a.Files+1 {
		t.Errorf("c: %d files, a %d", cimg.Files, a.Files)
	}
	// The chains stay while an image begins with them.
	for _, key := range []string{a.Key, b.Key} {
		if _, err := c.Remove(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	r, err := c.Prune(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// a's and b's own chains (their trees) go; c begins with the two
	// chains of l1 and l2, which stay.
	if r.Chains != 2 {
		t.Errorf("prune with c left removed %d chains, want 2", r.Chains)
	}
	if _, err := c.Remove(ctx, cimg.Key); err != nil {
		t.Fatal(err)
	}
	if r, err := c.Prune(ctx); err != nil || r.Chains != 3 {
		t.Errorf("prune with no image left removed %d chains (%v), want 3", r.Chains, err)
	}
	if ents, _ := os.ReadDir(filepath.Join(c.Dir(), "chains")); len(ents) != 0 {
		t.Errorf("%d chains left", len(ents))
	}
}

// A cached blob is checked as it is applied: a damaged one is removed,
// downloaded again, and the image made whole, whether the damage spoils
// the layer's contents or its format.
func TestDamagedCachedBlobDownloadedAgain(t *testing.T) {
	for name, damage := range map[string]func([]byte){
		"contents": func(b []byte) { b[len(b)-40] ^= 0xff },
		"format":   func(b []byte) { b[0] ^= 0xff },
	} {
		t.Run(name, func(t *testing.T) {
			ctx := ctxT(t)
			reg := startRegistry(t, registryOptions{})
			l1 := layerOf(t, file{name: "base", size: 256 << 10})
			l2 := layerOf(t, file{name: "top", size: 256 << 10}, file{name: "note", body: "good"})
			reg.Push(t, "x:1", imageOf(t, v1.Config{}, l1, l2))
			c := openCache(t)
			img, err := oci.Pull(ctx, c, reg.Host+"/x:1", oci.Options{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			want := readFile(t, filepath.Join(img.RootFS, "top"))
			bp, _ := c.BlobPath(digestOf(t, l2))
			b, err := os.ReadFile(bp)
			if err != nil {
				t.Fatal(err)
			}
			damage(b)
			if err := os.WriteFile(bp, b, 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Remove(ctx, img.Key); err != nil {
				t.Fatal(err)
			}
			var log progressLog
			img, err = oci.Pull(ctx, c, reg.Host+"/x:1", oci.Options{}, log.fn)
			if err != nil {
				t.Fatal(err)
			}
			if readFile(t, filepath.Join(img.RootFS, "top")) != want || readFile(t, filepath.Join(img.RootFS, "note")) != "good" {
				t.Fatal("the image made again is not the image")
			}
			if n := reg.BlobGets(digestOf(t, l2)); n != 2 {
				t.Errorf("the damaged layer was downloaded %d times, want 2", n)
			}
			if n := reg.BlobGets(digestOf(t, l1)); n != 1 {
				t.Errorf("the whole layer was downloaded %d times, want 1", n)
			}
			if b2, _ := os.ReadFile(bp); len(b2) != len(b) || string(b2) == string(b) {
				t.Error("the damaged blob is still in the cache")
			}
			found := false
			for _, p := range log.all {
				found = found || p.Step == "verify"
			}
			if !found {
				t.Error("no verify progress said why the layer was downloaded again")
			}
			if ents, _ := os.ReadDir(filepath.Join(c.Dir(), "tmp")); len(ents) != 0 {
				t.Errorf("%d work folders left", len(ents))
			}
		})
	}
}
