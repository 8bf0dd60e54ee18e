package untar

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/airlock-sandbox/airlock/internal/testbin"
)

// ent is one tar entry of a test layer.
type ent struct {
	name, link string
	typ        byte
	body       string
	size       int64 // when set, a body of this many zero bytes
	mode       int64
	uid, gid   int
}

func layerTar(t testing.TB, ents ...ent) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: e.mode, Uid: e.uid, Gid: e.gid,
			ModTime: time.Unix(1700000000, 0), Format: tar.FormatPAX}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
			if h.Typeflag == tar.TypeDir {
				h.Mode = 0o755
			}
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.body))
			if e.size > 0 {
				h.Size = e.size
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if e.size > 0 {
				if _, err := io.CopyN(tw, zeros{}, e.size); err != nil {
					t.Fatal(err)
				}
			} else if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

var generous = Options{Limits: Limits{Bytes: 1 << 30, Entries: 1 << 20}, KeepOwners: os.Geteuid() == 0}

// setup makes base/root and base/outside (holding a file "secret"),
// and an Unpacker on root.
func setup(t testing.TB, opts Options) (u *Unpacker, root, outside string) {
	t.Helper()
	base := t.TempDir()
	root, outside = filepath.Join(base, "root"), filepath.Join(base, "outside")
	for _, d := range []string{root, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	u, err := New(root, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u.Close() })
	return u, root, outside
}

// outsideIntact fails t if anything under outside changed.
func outsideIntact(t testing.TB, outside string) {
	t.Helper()
	ents, err := os.ReadDir(outside)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != "secret" {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("a layer wrote outside the root: %v", names)
	}
	fi, err := os.Lstat(filepath.Join(outside, "secret"))
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o644 {
		t.Fatalf("outside/secret changed: %v %v", fi.Mode(), err)
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "secret")); string(b) != "host" {
		t.Fatalf("outside/secret now holds %q", b)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Nlink != 1 {
		t.Fatalf("outside/secret has %d links: a layer linked to it", st.Nlink)
	}
}

func apply(t testing.TB, u *Unpacker, layer []byte) error {
	t.Helper()
	return u.Apply(context.Background(), bytes.NewReader(layer))
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestApplyTree(t *testing.T) {
	u, root, _ := setup(t, generous)
	err := apply(t, u, layerTar(t,
		ent{name: "./", typ: tar.TypeDir, mode: 0o755},
		ent{name: "usr/bin/", typ: tar.TypeDir},
		ent{name: "usr/bin/tool", body: "#!/bin/sh\n", mode: 0o4755},
		ent{name: "bin", typ: tar.TypeSymlink, link: "usr/bin"},
		ent{name: "etc/passwd", body: "root:x:0:0::/root:/bin/sh\n"},
		ent{name: "etc/passwd-", typ: tar.TypeLink, link: "etc/passwd"},
		ent{name: "/abs/file", body: "contained"},
		ent{name: "run/fifo", typ: tar.TypeFifo, mode: 0o600},
		ent{name: "ro/", typ: tar.TypeDir, mode: 0o555},
		ent{name: "ro/inside", body: "made before its folder became read-only"},
		ent{name: "tmp/", typ: tar.TypeDir, mode: 0o1777},
	))
	if err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(root, "bin/tool")); got != "#!/bin/sh\n" {
		t.Fatalf("bin/tool through the bin link: %q", got)
	}
	fi, err := os.Stat(filepath.Join(root, "usr/bin/tool"))
	if err != nil || fi.Mode()&fs.ModeSetuid == 0 || fi.Mode().Perm() != 0o755 {
		t.Fatalf("usr/bin/tool mode %v %v, want setuid 0755", fi.Mode(), err)
	}
	if !fi.ModTime().Equal(time.Unix(1700000000, 0)) {
		t.Fatalf("usr/bin/tool mtime %v", fi.ModTime())
	}
	a, _ := os.Stat(filepath.Join(root, "etc/passwd"))
	b, _ := os.Stat(filepath.Join(root, "etc/passwd-"))
	if !os.SameFile(a, b) {
		t.Fatal("etc/passwd- is not a hard link of etc/passwd")
	}
	if got := read(t, filepath.Join(root, "abs/file")); got != "contained" {
		t.Fatalf("an absolute name: %q", got)
	}
	if fi, err := os.Lstat(filepath.Join(root, "run/fifo")); err != nil || fi.Mode()&fs.ModeNamedPipe == 0 {
		t.Fatalf("run/fifo: %v %v", fi, err)
	}
	want := fs.FileMode(0o555)
	if !generous.KeepOwners {
		want = 0o755
	}
	if fi, err := os.Stat(filepath.Join(root, "ro")); err != nil || fi.Mode().Perm() != want {
		t.Fatalf("ro mode %v %v, want %v", fi.Mode(), err, want)
	}
	if fi, err := os.Stat(filepath.Join(root, "tmp")); err != nil || fi.Mode()&fs.ModeSticky == 0 {
		t.Fatalf("tmp mode %v %v, want sticky", fi.Mode(), err)
	}
	if st := u.Stats(); st.Entries != 11 {
		t.Fatalf("stats %+v", st)
	}
}

func TestOwners(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("keeping owners needs root")
	}
	u, root, _ := setup(t, generous)
	if err := apply(t, u, layerTar(t,
		ent{name: "home/user/", typ: tar.TypeDir, mode: 0o700, uid: 1000, gid: 1000},
		ent{name: "home/user/file", body: "x", uid: 1000, gid: 1000},
		ent{name: "usr/bin/sudo", body: "x", mode: 0o4755, uid: 0, gid: 0},
		ent{name: "usr/bin/wall", body: "x", mode: 0o2755, uid: 0, gid: 5},
		ent{name: "link", typ: tar.TypeSymlink, link: "home", uid: 7, gid: 8},
		ent{name: "nobody", body: "x", uid: 65534, gid: 65534},
	)); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string][3]uint32{
		"home/user": {1000, 1000, 0o700}, "home/user/file": {1000, 1000, 0o644},
		"usr/bin/wall": {0, 5, 0o2755}, "usr/bin/sudo": {0, 0, 0o4755}, "link": {7, 8, 0o777}, "nobody": {65534, 65534, 0o644},
	} {
		fi, err := os.Lstat(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != want[0] || st.Gid != want[1] || uint32(st.Mode)&0o7777 != want[2] {
			t.Errorf("%s: %d:%d %o, want %d:%d %o", name, st.Uid, st.Gid, uint32(st.Mode)&0o7777, want[0], want[1], want[2])
		}
	}
	// An id no sandbox maps refuses the layer.
	u2, _, _ := setup(t, generous)
	err := apply(t, u2, layerTar(t, ent{name: "f", body: "x", uid: 65536}))
	if err == nil || !strings.Contains(err.Error(), "beyond") {
		t.Fatalf("uid 65536: %v, want a refusal", err)
	}
}

func TestNotOwners(t *testing.T) {
	opts := generous
	opts.KeepOwners = false
	u, root, _ := setup(t, opts)
	if err := apply(t, u, layerTar(t,
		ent{name: "ro/", typ: tar.TypeDir, mode: 0o555, uid: 1000},
		ent{name: "ro/a", body: "a", uid: 1000},
		ent{name: "f", body: "x", uid: 70000},
	)); err != nil {
		t.Fatal(err)
	}
	// The next layer changes what is in the read-only folder.
	if err := apply(t, u, layerTar(t, ent{name: "ro/.wh.a", typ: tar.TypeReg}, ent{name: "ro/b", body: "b"})); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(root, "ro/a")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("ro/a after its whiteout: %v", err)
	}
	for _, name := range []string{"ro", "ro/b", "f"} {
		fi, err := os.Lstat(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != os.Getuid() {
			t.Errorf("%s belongs to %d, want the caller %d", name, st.Uid, os.Getuid())
		}
	}
}

func TestWhiteoutsAndOpaque(t *testing.T) {
	u, root, _ := setup(t, generous)
	if err := apply(t, u, layerTar(t,
		ent{name: "a/x", body: "x"}, ent{name: "a/y", body: "y"}, ent{name: "a/sub/z", body: "z"},
		ent{name: "b/z", body: "z"}, ent{name: "b/keep", body: "k"}, ent{name: "c", body: "c"},
		ent{name: "d/deep/file", body: "d"},
	)); err != nil {
		t.Fatal(err)
	}
	if err := apply(t, u, layerTar(t,
		// An entry of this layer before the marker stays.
		ent{name: "a/", typ: tar.TypeDir},
		ent{name: "a/early", body: "e"},
		ent{name: "a/.wh..wh..opq", typ: tar.TypeReg},
		ent{name: "a/new", body: "n"},
		ent{name: ".wh.c", typ: tar.TypeReg},
		ent{name: "b/.wh.z", typ: tar.TypeReg},
		ent{name: ".wh.d", typ: tar.TypeReg},
		ent{name: "e/.wh..wh..opq", typ: tar.TypeReg},
		ent{name: ".wh.never-there", typ: tar.TypeReg},
	)); err != nil {
		t.Fatal(err)
	}
	var got []string
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			rel += "/"
		}
		got = append(got, rel)
		return nil
	})
	want := "./ a/ a/early a/new b/ b/keep e/"
	if strings.Join(got, " ") != want {
		t.Fatalf("tree after whiteouts:\n got %s\nwant %s", strings.Join(got, " "), want)
	}
	// Markers are never made as files.
	if _, err := os.Lstat(filepath.Join(root, "a/.wh..wh..opq")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the opaque marker was made: %v", err)
	}
}

// Hostile layers: each is refused, or contained in the root.
func TestHostile(t *testing.T) {
	for _, tc := range []struct {
		name    string
		layers  func(outside string) [][]ent
		refused string // part of the error; "" when contained
		check   func(t *testing.T, root string)
	}{
		{name: "dotdot", refused: "leaves the image root", layers: func(string) [][]ent {
			return [][]ent{{{name: "../outside/pwned", body: "x"}}}
		}},
		{name: "dotdot in the middle", refused: "leaves the image root", layers: func(string) [][]ent {
			return [][]ent{{{name: "a/../../outside/pwned", body: "x"}}}
		}},
		{name: "absolute symlink then write", refused: "escapes", layers: func(o string) [][]ent {
			return [][]ent{{{name: "etc", typ: tar.TypeSymlink, link: o}, {name: "etc/pwned", body: "x"}}}
		}},
		{name: "absolute symlink planted by an earlier layer", refused: "escapes", layers: func(o string) [][]ent {
			return [][]ent{{{name: "etc", typ: tar.TypeSymlink, link: o}}, {{name: "etc/pwned", body: "x"}}}
		}},
		{name: "relative symlink out then write", refused: "escapes", layers: func(string) [][]ent {
			return [][]ent{{{name: "a/up", typ: tar.TypeSymlink, link: "../../outside"}}, {{name: "a/up/pwned", body: "x"}}}
		}},
		{name: "symlink then a folder through it", refused: "escapes", layers: func(o string) [][]ent {
			return [][]ent{{{name: "d", typ: tar.TypeSymlink, link: o}, {name: "d/sub/", typ: tar.TypeDir}}}
		}},
		{name: "symlink then fifo through it", refused: "escapes", layers: func(o string) [][]ent {
			return [][]ent{{{name: "d", typ: tar.TypeSymlink, link: o}, {name: "d/fifo", typ: tar.TypeFifo}}}
		}},
		{name: "symlink then whiteout through it", refused: "escapes", layers: func(o string) [][]ent {
			return [][]ent{{{name: "d", typ: tar.TypeSymlink, link: o}}, {{name: "d/.wh.secret"}}}
		}},
		{name: "symlink then opaque through it", refused: "not a directory", layers: func(string) [][]ent {
			return [][]ent{{{name: "d", typ: tar.TypeSymlink, link: "../outside"}}, {{name: "d/.wh..wh..opq"}}}
		}},
		{name: "file over a symlink replaces it", layers: func(o string) [][]ent {
			return [][]ent{{{name: "f", typ: tar.TypeSymlink, link: filepath.Join(o, "secret")}}, {{name: "f", body: "mine"}}}
		}, check: func(t *testing.T, root string) {
			fi, err := os.Lstat(filepath.Join(root, "f"))
			if err != nil || !fi.Mode().IsRegular() || read(t, filepath.Join(root, "f")) != "mine" {
				t.Fatalf("f: %v %v", fi, err)
			}
		}},
		{name: "hard link to outside", refused: "leaves the image root", layers: func(string) [][]ent {
			return [][]ent{{{name: "hl", typ: tar.TypeLink, link: "../outside/secret"}}}
		}},
		{name: "hard link by an absolute name", layers: func(o string) [][]ent {
			// Taken beneath the root, where there is no such file.
			return [][]ent{{{name: "hl", typ: tar.TypeLink, link: filepath.Join(o, "secret")}}}
		}, refused: "no such file"},
		{name: "hard link through an absolute symlink", refused: "escapes", layers: func(o string) [][]ent {
			return [][]ent{{{name: "l", typ: tar.TypeSymlink, link: o}, {name: "hl", typ: tar.TypeLink, link: "l/secret"}}}
		}},
		{name: "hard link through a relative symlink", refused: "escapes", layers: func(string) [][]ent {
			return [][]ent{{{name: "l", typ: tar.TypeSymlink, link: "../outside"}}, {{name: "hl", typ: tar.TypeLink, link: "l/secret"}}}
		}},
		{name: "hard link to a symlink links the symlink", layers: func(o string) [][]ent {
			return [][]ent{{{name: "l", typ: tar.TypeSymlink, link: filepath.Join(o, "secret")}, {name: "hl", typ: tar.TypeLink, link: "l"}}}
		}, check: func(t *testing.T, root string) {
			fi, err := os.Lstat(filepath.Join(root, "hl"))
			if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
				t.Fatalf("hl: %v %v", fi, err)
			}
		}},
		{name: "device nodes", layers: func(string) [][]ent {
			return [][]ent{{{name: "dev/sda", typ: tar.TypeBlock}, {name: "dev/mem", typ: tar.TypeChar}, {name: "ok", body: "x"}}}
		}, check: func(t *testing.T, root string) {
			for _, n := range []string{"dev/sda", "dev/mem"} {
				if _, err := os.Lstat(filepath.Join(root, n)); !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("%s was made: %v", n, err)
				}
			}
		}},
		{name: "whiteout of dotdot", refused: "whiteout", layers: func(string) [][]ent {
			return [][]ent{{{name: "a/.wh..."}}}
		}},
		{name: "whiteout leaving the root", refused: "leaves the image root", layers: func(string) [][]ent {
			return [][]ent{{{name: "../.wh.outside"}}}
		}},
		{name: "file as the root", refused: "image root", layers: func(string) [][]ent {
			return [][]ent{{{name: ".", body: "x"}}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, root, outside := setup(t, generous)
			var err error
			for _, l := range tc.layers(outside) {
				if err = apply(t, u, layerTar(t, l...)); err != nil {
					break
				}
			}
			outsideIntact(t, outside)
			switch {
			case tc.refused == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.refused != "" && err == nil:
				t.Fatalf("applied, want a refusal naming %q", tc.refused)
			case tc.refused != "" && !strings.Contains(err.Error(), tc.refused):
				t.Fatalf("refused with %q, want one naming %q", err, tc.refused)
			}
			if tc.check != nil {
				tc.check(t, root)
			}
		})
	}
}

func TestDeviceNodesCounted(t *testing.T) {
	u, _, _ := setup(t, generous)
	if err := apply(t, u, layerTar(t, ent{name: "dev/null", typ: tar.TypeChar}, ent{name: "dev/sda", typ: tar.TypeBlock})); err != nil {
		t.Fatal(err)
	}
	if st := u.Stats(); st.SkippedCount != 2 || strings.Join(st.Skipped, " ") != "/dev/null /dev/sda" {
		t.Fatalf("stats %+v, want the two nodes skipped", st)
	}
}

func gz(t testing.TB, b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	w.Write(b)
	w.Close()
	return buf.Bytes()
}

func TestTarBomb(t *testing.T) {
	// 64 MiB of zeros compresses to about 64 KiB; the limit is 8 MiB.
	bomb := gz(t, layerTar(t, ent{name: "a", size: 32 << 20}, ent{name: "b", size: 32 << 20}))
	opts := Options{Limits: Limits{Bytes: 8 << 20, Entries: 100}}
	u, root, _ := setup(t, opts)
	err := u.Apply(context.Background(), bytes.NewReader(bomb))
	var le *LimitError
	if !errors.As(err, &le) || le.What != "bytes" {
		t.Fatalf("a 64 MiB layer under an 8 MiB limit: %v", err)
	}
	// The entry past the limit was never written.
	if _, err := os.Lstat(filepath.Join(root, "a")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the bomb's file was made: %v", err)
	}
	// Entries are bounded too, across layers.
	u2, _, _ := setup(t, Options{Limits: Limits{Bytes: 1 << 20, Entries: 5}})
	if err := apply(t, u2, layerTar(t, ent{name: "1"}, ent{name: "2"}, ent{name: "3"})); err != nil {
		t.Fatal(err)
	}
	err = apply(t, u2, layerTar(t, ent{name: "4"}, ent{name: "5"}, ent{name: "6"}))
	if !errors.As(err, &le) || le.What != "entries" || !strings.Contains(err.Error(), "more than 5 entries") {
		t.Fatalf("6 entries under a limit of 5: %v", err)
	}
}

func TestCompressions(t *testing.T) {
	plain := layerTar(t, ent{name: "hello", body: "world"})
	var zbuf bytes.Buffer
	zw, _ := zstd.NewWriter(&zbuf)
	zw.Write(plain)
	zw.Close()
	for name, layer := range map[string][]byte{"plain": plain, "gzip": gz(t, plain), "zstd": zbuf.Bytes()} {
		t.Run(name, func(t *testing.T) {
			u, root, _ := setup(t, generous)
			if err := apply(t, u, layer); err != nil {
				t.Fatal(err)
			}
			if got := read(t, filepath.Join(root, "hello")); got != "world" {
				t.Fatalf("hello: %q", got)
			}
		})
	}
	u, _, _ := setup(t, generous)
	if err := apply(t, u, []byte{0xfd, '7', 'z', 'X', 'Z', 0, 1, 2}); err == nil || !strings.Contains(err.Error(), "xz") {
		t.Fatalf("an xz layer: %v", err)
	}
	if err := apply(t, u, []byte("not a tar at all, but long enough to have a header's worth of bytes? no.")); err == nil {
		t.Fatal("garbage applied")
	}
}

func TestCancel(t *testing.T) {
	u, _, _ := setup(t, generous)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := u.Apply(ctx, bytes.NewReader(layerTar(t, ent{name: "a", body: "a"}))); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled apply: %v", err)
	}
}

// TestUnprivileged applies the layers again as a user without root, who
// cannot keep owners: every file is the caller's, and nothing leaves the
// root either.
func TestUnprivileged(t *testing.T) {
	if os.Getenv("UNTAR_UNPRIV_CHILD") != "" {
		t.Skip("already the unprivileged run")
	}
	res := testbin.RerunUnprivileged(t, "^(TestApplyTree|TestNotOwners|TestWhiteoutsAndOpaque|TestHostile|TestTarBomb)$", 2*time.Minute, "UNTAR_UNPRIV_CHILD=1")
	for _, name := range []string{"TestApplyTree", "TestNotOwners", "TestHostile"} {
		if r := res[name]; r.Status != "PASS" {
			t.Errorf("unprivileged %s: %+v", name, r)
		}
	}
}
