package store

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func fillWith(files map[string]string) func(context.Context, string) (Meta, error) {
	return func(_ context.Context, dir string) (Meta, error) {
		for name, body := range files {
			p := filepath.Join(dir, "rootfs", name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return Meta{}, err
			}
			if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
				return Meta{}, err
			}
		}
		return Meta{Kind: "variant", Source: "test", Config: Config{Env: []string{"A=1"}, Cmd: []string{"sh"}}}, nil
	}
}

func open(t *testing.T) *Cache {
	t.Helper()
	c, err := Open(filepath.Join(t.TempDir(), "cache"))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestMakeOnceForConcurrentMakers(t *testing.T) {
	c := open(t)
	key := Key([]byte("minimal bookworm amd64"))
	var fills atomic.Int32
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = c.Make(context.Background(), key, func(ctx context.Context, dir string) (Meta, error) {
				fills.Add(1)
				time.Sleep(50 * time.Millisecond)
				return fillWith(map[string]string{"bin/sh": "#!"})(ctx, dir)
			})
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := fills.Load(); n != 1 {
		t.Fatalf("8 concurrent makers of one key filled %d times, want 1", n)
	}
	img, err := c.Get(key)
	if err != nil {
		t.Fatal(err)
	}
	if img.Files != 3 || img.Config.Cmd[0] != "sh" || img.Kind != "variant" {
		t.Fatalf("image: %+v", img)
	}
	if b, err := os.ReadFile(filepath.Join(img.RootFS, "bin/sh")); err != nil || string(b) != "#!" {
		t.Fatalf("rootfs/bin/sh: %q %v", b, err)
	}
	fi, err := os.Stat(c.Dir())
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("cache dir mode %v %v, want 0700", fi.Mode(), err)
	}
}

func TestFailedMakeLeavesNothing(t *testing.T) {
	c := open(t)
	key := Key([]byte("x"))
	boom := errors.New("mirror went away")
	_, err := c.Make(context.Background(), key, func(ctx context.Context, dir string) (Meta, error) {
		if _, err := fillWith(map[string]string{"half": "h"})(ctx, dir); err != nil {
			return Meta{}, err
		}
		return Meta{}, boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Make: %v, want the fill's error", err)
	}
	if _, err := c.Get(key); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after a failed make, Get: %v, want not found", err)
	}
	for _, sub := range []string{imagesDir, tmpDir} {
		ents, _ := os.ReadDir(filepath.Join(c.Dir(), sub))
		if len(ents) != 0 {
			t.Fatalf("%s holds %d entries after a failed make", sub, len(ents))
		}
	}
	// No root tree is a failure too.
	if _, err := c.Make(context.Background(), key, func(context.Context, string) (Meta, error) { return Meta{}, nil }); err == nil {
		t.Fatal("a fill that left no rootfs made an image")
	}
}

func TestKilledMakerLeavesNoImage(t *testing.T) {
	if os.Getenv("STORE_TEST_MAKER") != "" {
		c, err := Open(os.Getenv("STORE_TEST_MAKER"))
		if err != nil {
			os.Exit(2)
		}
		c.Make(context.Background(), Key([]byte("k")), func(ctx context.Context, dir string) (Meta, error) {
			fillWith(map[string]string{"a": "a"})(ctx, dir)
			os.WriteFile(filepath.Join(c.Dir(), "filled"), nil, 0o600)
			time.Sleep(time.Hour)
			return Meta{}, nil
		})
		os.Exit(0)
	}
	c := open(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestKilledMakerLeavesNoImage$")
	cmd.Env = append(os.Environ(), "STORE_TEST_MAKER="+c.Dir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(c.Dir(), "filled")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("the maker never filled")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if _, err := c.Get(Key([]byte("k"))); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a maker killed half-way left an image: %v", err)
	}
	// The next maker is not held up by the dead one's lock, and makes it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Make(ctx, Key([]byte("k")), fillWith(map[string]string{"a": "b"})); err != nil {
		t.Fatal(err)
	}
	// The dead maker's work folder goes with a prune, once old enough.
	ents, _ := os.ReadDir(filepath.Join(c.Dir(), tmpDir))
	if len(ents) != 1 {
		t.Fatalf("tmp holds %d entries, want the dead maker's one", len(ents))
	}
	old := time.Now().Add(-time.Hour)
	os.Chtimes(filepath.Join(c.Dir(), tmpDir, ents[0].Name()), old, old)
	c.Tag("keep", Key([]byte("k")))
	r, err := c.Prune(context.Background())
	if err != nil || r.Temp != 1 {
		t.Fatalf("prune: %+v %v, want 1 work folder removed", r, err)
	}
}

func TestNamesRemoveAndPrune(t *testing.T) {
	c := open(t)
	ctx := context.Background()
	k1, k2 := Key([]byte("1")), Key([]byte("2"))
	blob := "sha256:" + k2[len("sha256:"):]
	bp, err := c.BlobPath(blob)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(bp, []byte("layer"), 0o600)
	stray := Key([]byte("stray"))
	sp, _ := c.BlobPath(stray)
	os.WriteFile(sp, []byte("stray"), 0o600)

	if _, err := c.Make(ctx, k1, fillWith(map[string]string{"one": "1"})); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Make(ctx, k2, func(ctx context.Context, dir string) (Meta, error) {
		m, err := fillWith(map[string]string{"two": "2"})(ctx, dir)
		m.Blobs = []string{blob}
		return m, err
	}); err != nil {
		t.Fatal(err)
	}
	for name, key := range map[string]string{"standard": k1, "docker.io/library/python:3.12": k2, "../../etc/passwd": k2} {
		if err := c.Tag(name, key); err != nil {
			t.Fatal(err)
		}
	}
	img, err := c.Lookup("../../etc/passwd")
	if err != nil || img.Key != k2 || len(img.Names) != 2 {
		t.Fatalf("Lookup: %+v %v", img, err)
	}
	if _, err := c.Lookup("full"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Lookup of an unknown name: %v", err)
	}
	if img, err := c.Lookup(k1); err != nil || img.Names[0] != "standard" {
		t.Fatalf("Lookup by key: %+v %v", img, err)
	}
	list, err := c.List()
	if err != nil || len(list) != 2 {
		t.Fatalf("List: %d images, %v", len(list), err)
	}
	// One of two names goes: the image stays.
	if removed, err := c.Remove(ctx, "../../etc/passwd"); err != nil || len(removed) != 0 {
		t.Fatalf("Remove of one of two names: %v %v", removed, err)
	}
	if _, err := c.Lookup("docker.io/library/python:3.12"); err != nil {
		t.Fatal(err)
	}
	// Untagged by hand: prune takes the image and the stray blob, and
	// keeps the blob the named image was made from.
	os.Remove(c.namePath("standard"))
	r, err := c.Prune(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Images) != 1 || r.Images[0] != k1 || len(r.Blobs) != 1 || r.Blobs[0] != stray {
		t.Fatalf("prune: %+v", r)
	}
	if _, err := os.Stat(bp); err != nil {
		t.Fatalf("prune removed a blob an image needs: %v", err)
	}
	// By key, every name goes with it.
	if removed, err := c.Remove(ctx, k2); err != nil || len(removed) != 1 {
		t.Fatalf("Remove by key: %v %v", removed, err)
	}
	if list, _ := c.List(); len(list) != 0 {
		t.Fatalf("after removing everything, List: %d", len(list))
	}
	if _, err := c.Remove(ctx, "standard"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Remove of an unknown name: %v", err)
	}
}

// An image a sandbox uses is neither removed, nor untagged, nor pruned,
// until the last use ends; then it goes as any other.
func TestImageInUse(t *testing.T) {
	c := open(t)
	ctx := context.Background()
	named, nameless := Key([]byte("named")), Key([]byte("nameless"))
	blob := Key([]byte("a layer"))
	bp, _ := c.BlobPath(blob)
	os.WriteFile(bp, []byte("layer"), 0o600)
	for _, k := range []string{named, nameless} {
		if _, err := c.Make(ctx, k, func(ctx context.Context, dir string) (Meta, error) {
			m, err := fillWith(map[string]string{"f": k})(ctx, dir)
			m.Blobs = []string{blob}
			return m, err
		}); err != nil {
			t.Fatal(err)
		}
	}
	c.Tag("standard", named)
	c.Tag("alias", named)
	release1, err := c.Use(ctx, named)
	if err != nil {
		t.Fatal(err)
	}
	release2, err := c.Use(ctx, named)
	if err != nil {
		t.Fatalf("a second use of one image: %v", err)
	}
	releaseNameless, err := c.Use(ctx, nameless)
	if err != nil {
		t.Fatal(err)
	}
	// A name that another keeps the image by goes.
	if removed, err := c.Remove(ctx, "alias"); err != nil || len(removed) != 0 {
		t.Fatalf("Remove of one of two names of an image in use: %v %v", removed, err)
	}
	for _, what := range []string{"standard", named} {
		removed, err := c.Remove(ctx, what)
		if !errors.Is(err, ErrInUse) || len(removed) != 0 || !strings.Contains(err.Error(), "stop it first") {
			t.Fatalf("Remove %s of an image in use: %v %v", what, removed, err)
		}
	}
	if img, err := c.Lookup("standard"); err != nil || img.Key != named {
		t.Fatalf("a refused Remove changed the cache: %+v %v", img, err)
	}
	if in, err := c.InUse(named); err != nil || !in {
		t.Fatalf("InUse of an image in use: %v %v", in, err)
	}
	r, err := c.Prune(ctx)
	if err != nil || len(r.Images) != 0 || len(r.Blobs) != 0 {
		t.Fatalf("Prune with a nameless image in use: %+v %v", r, err)
	}
	if _, err := os.Stat(bp); err != nil {
		t.Fatalf("Prune removed the blob of an image in use: %v", err)
	}
	// One use of two ends: still in use.
	release1()
	if _, err := c.Remove(ctx, named); !errors.Is(err, ErrInUse) {
		t.Fatalf("Remove while one use of two is left: %v", err)
	}
	release2()
	releaseNameless()
	if in, err := c.InUse(named); err != nil || in {
		t.Fatalf("InUse after every use ended: %v %v", in, err)
	}
	if removed, err := c.Remove(ctx, "standard"); err != nil || len(removed) != 1 {
		t.Fatalf("Remove after every use ended: %v %v", removed, err)
	}
	if r, err := c.Prune(ctx); err != nil || len(r.Images) != 1 || r.Images[0] != nameless || len(r.Blobs) != 1 {
		t.Fatalf("Prune after every use ended: %+v %v", r, err)
	}
	// A gone image cannot be used, and leaves no lock file behind.
	if _, err := c.Use(ctx, named); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Use of a removed image: %v", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(c.Dir(), "locks", "use")); len(ents) != 0 {
		t.Fatalf("use locks left: %d", len(ents))
	}
}

// A use that starts while a removal holds the image waits for it, and
// then finds the image gone; a use taken on the lock file the removal
// unlinked is taken again on the new one.
func TestUseWaitsForRemoval(t *testing.T) {
	c := open(t)
	ctx := context.Background()
	key := Key([]byte("x"))
	if _, err := c.Make(ctx, key, fillWith(map[string]string{"f": "x"})); err != nil {
		t.Fatal(err)
	}
	h, _ := hexOf(key)
	release, err := c.claim(h)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Use(ctx, key)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("Use did not wait for a removal: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	RemoveTree(filepath.Join(c.Dir(), "images", h))
	release()
	select {
	case err := <-done:
		if !errors.Is(err, ErrNotFound) {
			t.Fatalf("Use after the removal: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Use still waits after the removal ended")
	}
	// Made again, it is used on a new lock file that a removal sees.
	if _, err := c.Make(ctx, key, fillWith(map[string]string{"f": "x"})); err != nil {
		t.Fatal(err)
	}
	rel, err := c.Use(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer rel()
	if _, err := c.Remove(ctx, key); !errors.Is(err, ErrInUse) {
		t.Fatalf("Remove of the image made again and in use: %v", err)
	}
}

func TestDamagedImageIsMadeAgain(t *testing.T) {
	c := open(t)
	ctx := context.Background()
	key := Key([]byte("d"))
	img, err := c.Make(ctx, key, fillWith(map[string]string{"f": "1"}))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(img.Dir, metaFile), []byte("{trunc"), 0o600)
	if _, err := c.Get(key); err == nil || errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of a damaged image: %v, want it called damaged", err)
	}
	img, err = c.Make(ctx, key, fillWith(map[string]string{"f": "2"}))
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(img.RootFS, "f")); string(b) != "2" {
		t.Fatalf("a damaged image was not made again: %q", b)
	}
}

func TestReadOnlyTreeIsRemoved(t *testing.T) {
	c := open(t)
	ctx := context.Background()
	key := Key([]byte("ro"))
	img, err := c.Make(ctx, key, fillWith(map[string]string{"usr/bin/x": "x"}))
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Join(img.RootFS, "usr/bin"), 0o555)
	os.Chmod(filepath.Join(img.RootFS, "usr"), 0o000)
	if _, err := c.Remove(ctx, key); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(img.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("image dir still there: %v", err)
	}
}

func TestKeysAreDigests(t *testing.T) {
	c := open(t)
	for _, bad := range []string{"", "sha256:", "sha256:../../x", "md5:00", "sha256:" + string(make([]byte, 64)), "sha256:ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789"} {
		if _, err := c.Get(bad); err == nil {
			t.Errorf("Get(%q) accepted", bad)
		}
		if _, err := c.BlobPath(bad); err == nil {
			t.Errorf("BlobPath(%q) accepted", bad)
		}
		if err := c.Tag("n", bad); err == nil {
			t.Errorf("Tag to %q accepted", bad)
		}
	}
}

func TestEROFS(t *testing.T) {
	if _, err := exec.LookPath("mkfs.erofs"); err != nil {
		t.Skip("mkfs.erofs is not installed (erofs-utils)")
	}
	c := open(t)
	img, err := c.Make(context.Background(), Key([]byte("e")), fillWith(map[string]string{"etc/os-release": "ID=test\n"}))
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.EROFS(context.Background(), img)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	// The erofs superblock's magic is at 1024.
	if len(b) < 1028 || b[1024] != 0xe2 || b[1025] != 0xe1 || b[1026] != 0xf5 || b[1027] != 0xe0 {
		t.Fatalf("%s is not an erofs image", p)
	}
}

// LinkTree copies a tree's directories, with their modes and times,
// and links everything else: files, hard links, symbolic links (not
// followed) and FIFOs.
func TestLinkTree(t *testing.T) {
	src := filepath.Join(t.TempDir(), "src")
	for _, d := range []string{"a/b", "c"} {
		if err := os.MkdirAll(filepath.Join(src, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(src, "a/b/f"), []byte("f"), 0o4755)
	os.Chmod(filepath.Join(src, "a/b/f"), 0o4755)
	os.Link(filepath.Join(src, "a/b/f"), filepath.Join(src, "c/hard"))
	os.Symlink("/etc/passwd", filepath.Join(src, "c/abs"))
	os.Symlink("../a", filepath.Join(src, "c/rel"))
	if err := syscall.Mkfifo(filepath.Join(src, "c/fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Join(src, "a"), 0o2750)
	old := time.Unix(1600000000, 0)
	for _, d := range []string{"a/b", "a", "c", "."} {
		os.Chtimes(filepath.Join(src, d), old, old)
	}
	dst := filepath.Join(t.TempDir(), "dst")
	if err := LinkTree(context.Background(), src, dst); err != nil {
		t.Fatal(err)
	}
	if err := LinkTree(context.Background(), src, dst); err == nil {
		t.Fatal("LinkTree into a folder that exists")
	}
	for _, n := range []string{"a/b/f", "c/hard", "c/abs", "c/rel", "c/fifo"} {
		a, err1 := os.Lstat(filepath.Join(src, n))
		b, err2 := os.Lstat(filepath.Join(dst, n))
		if err1 != nil || err2 != nil || !os.SameFile(a, b) {
			t.Errorf("%s is not linked: %v %v", n, err1, err2)
		}
	}
	for _, d := range []string{".", "a", "a/b", "c"} {
		a, _ := os.Lstat(filepath.Join(src, d))
		b, err := os.Lstat(filepath.Join(dst, d))
		if err != nil || os.SameFile(a, b) || a.Mode() != b.Mode() || !b.ModTime().Equal(old) {
			t.Errorf("directory %s: %v %v, copy %v %v (%v)", d, a.Mode(), a.ModTime(), b.Mode(), b.ModTime(), err)
		}
	}
}
