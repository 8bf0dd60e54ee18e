package oci_test

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/airlock-sandbox/airlock/internal/image/oci"
	"github.com/airlock-sandbox/airlock/internal/image/store"
	"github.com/airlock-sandbox/airlock/internal/image/untar"
)

func TestMain(m *testing.M) {
	// No test reads the credentials of whoever runs it.
	dir, err := os.MkdirTemp("", "oci-test-docker-")
	if err != nil {
		panic(err)
	}
	os.Setenv("DOCKER_CONFIG", dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func openCache(t *testing.T) *store.Cache {
	t.Helper()
	c, err := store.Open(filepath.Join(t.TempDir(), "cache"))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// progressLog records progress reports.
type progressLog struct {
	mu  sync.Mutex
	all []store.Progress
}

func (p *progressLog) fn(r store.Progress) {
	p.mu.Lock()
	p.all = append(p.all, r)
	p.mu.Unlock()
}

// last returns the last report of step for item.
func (p *progressLog) last(step, item string) (store.Progress, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := len(p.all) - 1; i >= 0; i-- {
		if p.all[i].Step == step && p.all[i].Item == item {
			return p.all[i], true
		}
	}
	return store.Progress{}, false
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func digestOf(t testing.TB, l v1.Layer) string {
	d, err := l.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

// cacheEmpty fails t unless the cache holds no image, no blob and no
// work folder.
func cacheEmpty(t *testing.T, c *store.Cache) {
	t.Helper()
	for _, sub := range []string{"images", "blobs/sha256", "tmp"} {
		ents, err := os.ReadDir(filepath.Join(c.Dir(), sub))
		if err != nil {
			t.Fatal(err)
		}
		if len(ents) != 0 {
			t.Errorf("the cache's %s holds %d entries after a failed pull", sub, len(ents))
		}
	}
}

func TestPullByTagAndDigest(t *testing.T) {
	ctx := ctxT(t)
	reg := startRegistry(t, registryOptions{})
	cfg := v1.Config{
		Env:        []string{"PATH=/usr/local/bin:/usr/bin:/bin", "GREETING=hello there"},
		WorkingDir: "/srv/app",
		User:       "1000:1000",
		Entrypoint: []string{"/bin/sh", "-c"},
		Cmd:        []string{"echo $GREETING"},
	}
	l := layerOf(t, file{name: "srv/app/", typ: tar.TypeDir}, file{name: "srv/app/main.sh", body: "echo hi\n", mode: 0o755}, file{name: "etc/os-release", body: "ID=test\n"})
	img := imageOf(t, cfg, l)
	digest := reg.Push(t, "team/app:1.0", img)

	c := openCache(t)
	var prog progressLog
	ref := reg.Host + "/team/app:1.0"
	got, err := oci.Pull(ctx, c, ref, oci.Options{}, prog.fn)
	if err != nil {
		t.Fatal(err)
	}
	if got.Key != digest || got.Kind != "oci" || got.Arch != runtime.GOARCH {
		t.Fatalf("image %+v, want key %s", got.Meta, digest)
	}
	if readFile(t, filepath.Join(got.RootFS, "srv/app/main.sh")) != "echo hi\n" || readFile(t, filepath.Join(got.RootFS, "etc/os-release")) != "ID=test\n" {
		t.Fatal("the root tree does not hold the layer's files")
	}
	want := store.Config{Env: cfg.Env, WorkingDir: cfg.WorkingDir, User: cfg.User, Entrypoint: cfg.Entrypoint, Cmd: cfg.Cmd}
	if fmt.Sprint(got.Config) != fmt.Sprint(want) {
		t.Fatalf("config %+v, want %+v", got.Config, want)
	}
	byDigest := reg.Host + "/team/app@" + digest
	if !slices.Equal(got.Names, []string{ref, byDigest}) {
		t.Fatalf("names %v, want %s and %s", got.Names, ref, byDigest)
	}
	if !slices.Equal(got.Blobs, []string{digestOf(t, l)}) || got.Source != byDigest {
		t.Fatalf("blobs %v source %s", got.Blobs, got.Source)
	}
	for _, step := range []string{"download", "unpack"} {
		p, ok := prog.last(step, digestOf(t, l))
		if !ok || p.Done != p.Total || p.Total == 0 || p.Image != ref {
			t.Fatalf("last %s progress %+v (%v), want it whole", step, p, ok)
		}
	}
	// The name, completed as it would be offline, finds the image.
	if n, err := oci.CanonicalName(ref); err != nil || n != ref {
		t.Fatalf("canonical name %q %v", n, err)
	}
	if img, err := c.Lookup(ref); err != nil || img.Key != digest {
		t.Fatalf("lookup %s: %v", ref, err)
	}
	if reg.BlobGets(digestOf(t, l)) != 1 {
		t.Fatalf("the layer was downloaded %d times", reg.BlobGets(digestOf(t, l)))
	}

	// By digest, into another cache: the same image.
	c2 := openCache(t)
	got2, err := oci.Pull(ctx, c2, byDigest, oci.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got2.Key != digest || !slices.Equal(got2.Names, []string{byDigest}) {
		t.Fatalf("by digest: key %s names %v", got2.Key, got2.Names)
	}
	// And again into the first: nothing is downloaded.
	if _, err := oci.Pull(ctx, c, byDigest, oci.Options{}, nil); err != nil {
		t.Fatal(err)
	}
	if n := reg.BlobGets(digestOf(t, l)); n != 2 {
		t.Fatalf("the layer was downloaded %d times, want 2 (once per cache)", n)
	}
}

func TestPullWithAuth(t *testing.T) {
	ctx := ctxT(t)
	reg := startRegistry(t, registryOptions{auth: true})
	reg.Push(t, "private/app:1", imageOf(t, v1.Config{Cmd: []string{"true"}}, layerOf(t, file{name: "secret-app", body: "x"})))
	ref := reg.Host + "/private/app:1"

	c := openCache(t)
	_, err := oci.Pull(ctx, c, ref, oci.Options{}, nil)
	if err == nil || !strings.Contains(err.Error(), "refused access") || !strings.Contains(err.Error(), "docker login "+reg.Host) {
		t.Fatalf("a pull without credentials: %v, want a refusal that says to log in", err)
	}
	cacheEmpty(t, c)

	reg.dockerConfig(t)
	img, err := oci.Pull(ctx, c, ref, oci.Options{}, nil)
	if err != nil {
		t.Fatalf("with ~/.docker/config.json credentials: %v", err)
	}
	if readFile(t, filepath.Join(img.RootFS, "secret-app")) != "x" {
		t.Fatal("the root tree lacks the layer's file")
	}
}

func TestMultiLayerWhiteouts(t *testing.T) {
	ctx := ctxT(t)
	reg := startRegistry(t, registryOptions{})
	img := imageOf(t, v1.Config{},
		layerOf(t, file{name: "etc/a/x", body: "x"}, file{name: "etc/a/y", body: "y"}, file{name: "etc/b/z", body: "z"},
			file{name: "etc/c", body: "c"}, file{name: "usr/lib/gone/deep", body: "d"}),
		layerOf(t, file{name: "etc/a/", typ: tar.TypeDir}, file{name: "etc/a/.wh..wh..opq"}, file{name: "etc/a/new", body: "n"},
			file{name: "etc/.wh.c"}),
		layerOf(t, file{name: "etc/b/.wh.z"}, file{name: "usr/lib/.wh.gone"}, file{name: "etc/c", body: "back"}),
	)
	reg.Push(t, "layers:1", img)
	got, err := oci.Pull(ctx, openCache(t), reg.Host+"/layers:1", oci.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var tree []string
	filepath.WalkDir(got.RootFS, func(p string, d fs.DirEntry, err error) error {
		rel, _ := filepath.Rel(got.RootFS, p)
		if !d.IsDir() {
			tree = append(tree, rel)
		}
		return err
	})
	if strings.Join(tree, " ") != "etc/a/new etc/c" || readFile(t, filepath.Join(got.RootFS, "etc/c")) != "back" {
		t.Fatalf("files after three layers: %v", tree)
	}
	if len(got.Blobs) != 3 {
		t.Fatalf("blobs %v", got.Blobs)
	}
}

func TestSharedLayersDownloadOnce(t *testing.T) {
	ctx := ctxT(t)
	reg := startRegistry(t, registryOptions{})
	base := layerOf(t, file{name: "usr/lib/big", size: 4 << 20})
	la, lb := layerOf(t, file{name: "a", body: "a"}), layerOf(t, file{name: "b", body: "b"})
	reg.Push(t, "a:1", imageOf(t, v1.Config{}, base, la))
	reg.Push(t, "b:1", imageOf(t, v1.Config{}, base, lb))
	c := openCache(t)
	for _, r := range []string{"a:1", "b:1"} {
		if _, err := oci.Pull(ctx, c, reg.Host+"/"+r, oci.Options{}, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range []v1.Layer{base, la, lb} {
		if n := reg.BlobGets(digestOf(t, l)); n != 1 {
			t.Errorf("layer %s was downloaded %d times, want once", digestOf(t, l), n)
		}
	}
}

func TestConcurrentPullsDownloadOnce(t *testing.T) {
	ctx := ctxT(t)
	reg := startRegistry(t, registryOptions{})
	base := layerOf(t, file{name: "usr/lib/big", size: 8 << 20})
	own := layerOf(t, file{name: "app", body: "app"})
	other := layerOf(t, file{name: "other", body: "other"})
	reg.Push(t, "app:1", imageOf(t, v1.Config{}, base, own))
	reg.Push(t, "other:1", imageOf(t, v1.Config{}, base, other))
	dir := filepath.Join(t.TempDir(), "cache")
	// Each puller opens the cache as another process would.
	refs := []string{"app:1", "app:1", "app:1", "other:1"}
	imgs := make([]store.Image, len(refs))
	errs := make([]error, len(refs))
	var wg sync.WaitGroup
	for i, r := range refs {
		wg.Go(func() {
			c, err := store.Open(dir)
			if err != nil {
				errs[i] = err
				return
			}
			imgs[i], errs[i] = oci.Pull(ctx, c, reg.Host+"/"+r, oci.Options{}, nil)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("pull %d of %s: %v", i, refs[i], err)
		}
	}
	if imgs[0].Key != imgs[1].Key || imgs[0].RootFS != imgs[2].RootFS || imgs[3].Key == imgs[0].Key {
		t.Fatalf("keys %s %s %s %s", imgs[0].Key, imgs[1].Key, imgs[2].Key, imgs[3].Key)
	}
	for _, l := range []v1.Layer{base, own, other} {
		if n := reg.BlobGets(digestOf(t, l)); n != 1 {
			t.Errorf("layer %s was downloaded %d times by concurrent pulls, want once", digestOf(t, l), n)
		}
	}
}

func TestUnreachableRegistry(t *testing.T) {
	ctx := ctxT(t)
	// A port nothing listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	c := openCache(t)
	_, err = oci.Pull(ctx, c, addr+"/nothing:1", oci.Options{}, nil)
	if err == nil {
		t.Fatal("a pull from a registry that is not there succeeded")
	}
	for _, want := range []string{addr + "/v2/", "connection refused", "could not reach the registry " + addr} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	cacheEmpty(t, c)
	if _, err := c.Lookup(addr + "/nothing:1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("lookup after a failed pull: %v", err)
	}
}

func TestMissingImage(t *testing.T) {
	reg := startRegistry(t, registryOptions{})
	_, err := oci.Pull(ctxT(t), openCache(t), reg.Host+"/nope:1", oci.Options{}, nil)
	if err == nil || !strings.Contains(err.Error(), "no such image") {
		t.Fatalf("a pull of an image the registry lacks: %v", err)
	}
}

func TestPlatforms(t *testing.T) {
	ctx := ctxT(t)
	reg := startRegistry(t, registryOptions{})
	other := "arm64"
	if runtime.GOARCH == "arm64" {
		other = "amd64"
	}
	mk := func(arch string) v1.Image {
		img := imageOf(t, v1.Config{Env: []string{"ARCH=" + arch}}, layerOf(t, file{name: "arch", body: arch}))
		cf, _ := img.ConfigFile()
		cf = cf.DeepCopy()
		cf.Architecture = arch
		img, err := mutate.ConfigFile(img, cf)
		if err != nil {
			t.Fatal(err)
		}
		return img
	}
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: mk(runtime.GOARCH), Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: runtime.GOARCH}}},
		mutate.IndexAddendum{Add: mk(other), Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: other}}},
	)
	reg.PushIndex(t, "multi:1", idx)
	c := openCache(t)
	host, err := oci.Pull(ctx, c, reg.Host+"/multi:1", oci.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if readFile(t, filepath.Join(host.RootFS, "arch")) != runtime.GOARCH || host.Arch != runtime.GOARCH {
		t.Fatalf("default platform gave %s", host.Arch)
	}
	alt, err := oci.Pull(ctx, openCache(t), reg.Host+"/multi:1", oci.Options{Platform: "linux/" + other}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if readFile(t, filepath.Join(alt.RootFS, "arch")) != other || alt.Key == host.Key {
		t.Fatalf("--platform linux/%s gave %s", other, alt.Arch)
	}
	// A single-platform image for another architecture is refused.
	reg.Push(t, "single:1", mk(other))
	if _, err := oci.Pull(ctx, c, reg.Host+"/single:1", oci.Options{}, nil); err == nil || !strings.Contains(err.Error(), "--platform") {
		t.Fatalf("an image for %s: %v", other, err)
	}
	if _, err := oci.Pull(ctx, c, reg.Host+"/multi:1", oci.Options{Platform: "nonsense"}, nil); err == nil {
		t.Fatal("a platform that is not OS/ARCH was taken")
	}
}

func TestLocalLayoutAndArchive(t *testing.T) {
	ctx := ctxT(t)
	img := imageOf(t, v1.Config{Cmd: []string{"local"}}, layerOf(t, file{name: "from", body: "local"}))
	other := imageOf(t, v1.Config{}, layerOf(t, file{name: "from", body: "other"}))
	dir := filepath.Join(t.TempDir(), "layout")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	for tag, im := range map[string]v1.Image{"v1": img, "other": other} {
		if err := p.AppendImage(im, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": tag})); err != nil {
			t.Fatal(err)
		}
	}
	c := openCache(t)
	digest, _ := img.Digest()
	for _, ref := range []string{"oci:" + dir + ":v1", dir + ":v1", dir + "@" + digest.String()} {
		got, err := oci.Pull(ctx, c, ref, oci.Options{}, nil)
		if err != nil {
			t.Fatalf("pull %s: %v", ref, err)
		}
		if readFile(t, filepath.Join(got.RootFS, "from")) != "local" || got.Key != digest.String() || got.Config.Cmd[0] != "local" {
			t.Fatalf("pull %s: key %s", ref, got.Key)
		}
	}
	if _, err := oci.Pull(ctx, c, "oci:"+dir, oci.Options{}, nil); err == nil || !strings.Contains(err.Error(), "holds 2 images") {
		t.Fatalf("a layout of two images without a tag: %v", err)
	}
	if _, err := oci.Pull(ctx, c, "oci:"+dir+":v9", oci.Options{}, nil); err == nil || !strings.Contains(err.Error(), "no image \"v9\"") {
		t.Fatalf("a layout without the tag: %v", err)
	}

	// A docker save tarball, as docker writes it (manifest.json, layers
	// as tars).
	tag, err := name.NewTag("example.com/saved:2")
	if err != nil {
		t.Fatal(err)
	}
	tarPath := filepath.Join(t.TempDir(), "saved.tar")
	if err := tarball.WriteToFile(tarPath, tag, img); err != nil {
		t.Fatal(err)
	}
	got, err := oci.Pull(ctx, c, tarPath, oci.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := img.ConfigName()
	if readFile(t, filepath.Join(got.RootFS, "from")) != "local" || got.Key != id.String() || !slices.Contains(got.Names, "docker-archive:"+tarPath) {
		t.Fatalf("docker save tarball: key %s names %v", got.Key, got.Names)
	}
	if _, err := oci.Pull(ctx, c, "docker-archive:"+tarPath+":example.com/saved:2", oci.Options{}, nil); err != nil {
		t.Fatalf("docker-archive:PATH:TAG: %v", err)
	}
	if _, err := oci.Pull(ctx, c, "oci:"+tarPath, oci.Options{}, nil); err == nil {
		t.Fatal("a tarball taken as a layout")
	}
}

// Hostile images: each is refused with nothing cached, or contained.
func TestHostileImages(t *testing.T) {
	ctx := ctxT(t)
	reg := startRegistry(t, registryOptions{})
	outside := t.TempDir()
	for _, tc := range []struct {
		name    string
		layers  [][]file
		limits  untar.Limits
		refused string
	}{
		{name: "dotdot", refused: "leaves the image root", layers: [][]file{{{name: "../../../../tmp/pwned", body: "x"}}}},
		{name: "absolute symlink then write", refused: "escapes", layers: [][]file{
			{{name: "etc", typ: tar.TypeSymlink, link: outside}},
			{{name: "etc/pwned", body: "x"}},
		}},
		{name: "hard link to outside", refused: "leaves the image root", layers: [][]file{{{name: "hl", typ: tar.TypeLink, link: "../../../../../etc/passwd"}}}},
		{name: "tar bomb", refused: "more than 1048576 bytes", limits: untar.Limits{Bytes: 1 << 20}, layers: [][]file{
			{{name: "a", body: "small"}},
			{{name: "bomb", size: 4 << 20}},
		}},
		{name: "device nodes", layers: [][]file{{{name: "dev/sda", typ: tar.TypeBlock}, {name: "dev/kmem", typ: tar.TypeChar}, {name: "ok", body: "ok"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ls []v1.Layer
			for _, l := range tc.layers {
				ls = append(ls, layerOf(t, l...))
			}
			repo := "hostile/" + strings.ReplaceAll(tc.name, " ", "-") + ":1"
			reg.Push(t, repo, imageOf(t, v1.Config{}, ls...))
			c := openCache(t)
			img, err := oci.Pull(ctx, c, reg.Host+"/"+repo, oci.Options{Limits: tc.limits}, nil)
			if ents, _ := os.ReadDir(outside); len(ents) != 0 {
				t.Fatalf("the image wrote outside its root: %v", ents)
			}
			if tc.refused == "" {
				if err != nil {
					t.Fatal(err)
				}
				for _, n := range []string{"dev/sda", "dev/kmem"} {
					if _, err := os.Lstat(filepath.Join(img.RootFS, n)); !errors.Is(err, fs.ErrNotExist) {
						t.Fatalf("%s was made: %v", n, err)
					}
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.refused) {
				t.Fatalf("pull: %v, want a refusal naming %q", err, tc.refused)
			}
			if ents, _ := os.ReadDir(filepath.Join(c.Dir(), "images")); len(ents) != 0 {
				t.Fatal("a refused image is in the cache")
			}
			if ents, _ := os.ReadDir(filepath.Join(c.Dir(), "tmp")); len(ents) != 0 {
				t.Fatal("a refused image left its work folder")
			}
		})
	}
}

func TestCorruptBlobRefetched(t *testing.T) {
	ctx := ctxT(t)
	reg := startRegistry(t, registryOptions{})
	l := layerOf(t, file{name: "f", body: "good"})
	reg.Push(t, "x:1", imageOf(t, v1.Config{}, l))
	c := openCache(t)
	img, err := oci.Pull(ctx, c, reg.Host+"/x:1", oci.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Damage the blob and drop the image: the next pull notices and
	// downloads it again.
	bp, _ := c.BlobPath(digestOf(t, l))
	b, _ := os.ReadFile(bp)
	b[len(b)/2] ^= 0xff
	os.WriteFile(bp, b, 0o600)
	if _, err := c.Remove(ctx, img.Key); err != nil {
		t.Fatal(err)
	}
	img, err = oci.Pull(ctx, c, reg.Host+"/x:1", oci.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if readFile(t, filepath.Join(img.RootFS, "f")) != "good" || reg.BlobGets(digestOf(t, l)) != 2 {
		t.Fatalf("after damage: %d downloads", reg.BlobGets(digestOf(t, l)))
	}
}

func TestBadReferences(t *testing.T) {
	for _, ref := range []string{"", "UPPER/case:1", "a:b:c:d", "oci:/does/not/exist"} {
		if _, err := oci.Pull(context.Background(), openCache(t), ref, oci.Options{}, nil); err == nil {
			t.Errorf("%q was taken", ref)
		}
	}
	for ref, want := range map[string]string{
		"python:3.12-slim":   "docker.io/library/python:3.12-slim",
		"busybox":            "docker.io/library/busybox:latest",
		"ghcr.io/org/img:v1": "ghcr.io/org/img:v1",
		"localhost:5000/a/b@sha256:" + strings.Repeat("ab", 32): "localhost:5000/a/b@sha256:" + strings.Repeat("ab", 32),
	} {
		if got, err := oci.CanonicalName(ref); err != nil || got != want {
			t.Errorf("CanonicalName(%q) = %q, %v; want %q", ref, got, err, want)
		}
	}
}
