package untar

import (
	"archive/tar"
	"bytes"
	"context"
	"io/fs"
	"path/filepath"
	"syscall"
	"testing"
)

// FuzzApply applies any bytes as a layer, twice (so that what the first
// application planted is there for the second), and checks that nothing
// outside the root changed and that no device node was made.
func FuzzApply(f *testing.F) {
	for _, l := range [][]ent{
		{{name: "a/b/c", body: "x"}, {name: "l", typ: tar.TypeSymlink, link: "a/b"}, {name: "l/d", body: "y"}},
		{{name: "e", typ: tar.TypeSymlink, link: "/"}, {name: "e/x", body: "x"}},
		{{name: "up", typ: tar.TypeSymlink, link: "../outside"}, {name: "h", typ: tar.TypeLink, link: "up/secret"}},
		{{name: "../outside/x", body: "x"}},
		{{name: "d/", typ: tar.TypeDir, mode: 0o555}, {name: "d/f", body: "f"}, {name: "d/.wh..wh..opq"}, {name: ".wh.d"}},
		{{name: "n", typ: tar.TypeChar}, {name: "p", typ: tar.TypeFifo}, {name: "s", body: "s", mode: 0o6755}},
	} {
		f.Add(layerTar(f, l...))
		f.Add(gz(f, layerTar(f, l...)))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		u, root, outside := setup(t, Options{Limits: Limits{Bytes: 1 << 20, Entries: 200}, KeepOwners: generous.KeepOwners})
		for range 2 {
			_ = u.Apply(context.Background(), bytes.NewReader(data))
		}
		outsideIntact(t, outside)
		var size int64
		seen := map[uint64]bool{}
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			if d.Type()&(fs.ModeDevice|fs.ModeCharDevice) != 0 {
				t.Fatalf("a device node was made: %s", p)
			}
			if fi, err := d.Info(); err == nil && fi.Mode().IsRegular() && !seen[fi.Sys().(*syscall.Stat_t).Ino] {
				seen[fi.Sys().(*syscall.Stat_t).Ino] = true
				size += fi.Size()
			}
			return nil
		})
		if size > 1<<20 {
			t.Fatalf("the root holds %d bytes of files, past the limit of %d", size, 1<<20)
		}
	})
}
