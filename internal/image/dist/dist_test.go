package dist_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/image/dist"
	"github.com/airlock-sandbox/airlock/internal/image/fetch"
	"github.com/airlock-sandbox/airlock/internal/image/store"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func openCache(t *testing.T, dir string) *store.Cache {
	t.Helper()
	c, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func fastFetcher() *fetch.Fetcher {
	return &fetch.Fetcher{Backoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond, Stall: 5 * time.Second}
}

// mirror serves a published folder with Go's static file server, as
// any web server would, counting the requests for each path; before
// lets a test answer a request itself (return true).
type mirror struct {
	*httptest.Server
	mu     sync.Mutex
	counts map[string]int
	ranges []string
	before func(n int, w http.ResponseWriter, r *http.Request) bool
}

func serve(t *testing.T, dir string) *mirror {
	m := &mirror{counts: map[string]int{}}
	files := http.FileServer(http.Dir(dir))
	m.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.mu.Lock()
		m.counts[r.URL.Path]++
		n := m.counts[r.URL.Path] - 1
		if r.Header.Get("Range") != "" {
			m.ranges = append(m.ranges, r.URL.Path+" "+r.Header.Get("Range"))
		}
		before := m.before
		m.mu.Unlock()
		if before != nil && before(n, w, r) {
			return
		}
		files.ServeHTTP(w, r)
	}))
	t.Cleanup(m.Close)
	return m
}

func (m *mirror) count(path string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.counts[path]
}

// publishTree makes an image of makeTree's tree named tiny in a cache
// of its own and publishes it into a new folder.
func publishTree(t *testing.T) (src store.Image, out string, res *dist.Published) {
	t.Helper()
	c := openCache(t, t.TempDir())
	src = makeImage(t, c, "tiny", store.Config{Env: []string{"PATH=/bin", "LANG=C.UTF-8"}, WorkingDir: "/home/user", Cmd: []string{"/bin/sh"}}, makeTree)
	out = t.TempDir()
	res, err := dist.Publish(testCtx(t), c, out, nil, dist.PublishOptions{Version: "test-1"})
	if err != nil {
		t.Fatal(err)
	}
	return src, out, res
}

func archiveName() string { return dist.RootFSName("tiny", runtime.GOARCH) }

// Publish, serve the folder with a static file server, download into a
// fresh cache: the same tree, owners, modes, links and contents, and
// the same config. The server answers 503 once and drops the archive
// half-way once: the download retries and resumes.
func TestPublishServeDownload(t *testing.T) {
	src, out, res := publishTree(t)
	if res.Manifest.Version != "test-1" || len(res.Written) != 1 || res.Written[0] != archiveName() {
		t.Fatalf("Publish wrote %+v", res)
	}
	if isRoot() && (len(res.Skipped["tiny"]) != 1 || res.Skipped["tiny"][0] != "/null") {
		t.Errorf("Publish skipped %v, want the device node /null", res.Skipped)
	}
	a := res.Manifest.Artifacts[archiveName()]
	if strings.Contains(a.URL, "/") || !strings.HasSuffix(a.URL, ".tar.zst") {
		t.Errorf("the archive's URL %q is not a relative file name", a.URL)
	}
	m := serve(t, out)
	archivePath := "/" + a.URL
	m.before = func(n int, w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path != archivePath {
			return false
		}
		switch n {
		case 0:
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return true
		case 1:
			w.Header().Set("Content-Length", strconv.FormatInt(a.Size, 10))
			f, _ := os.Open(filepath.Join(out, a.URL))
			io.CopyN(w, f, a.Size/2)
			f.Close()
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}
		return false
	}
	c := openCache(t, t.TempDir())
	var mu sync.Mutex
	steps := map[string]int{}
	cl := &dist.Client{Manifest: m.URL + "/manifest.json", Fetcher: fastFetcher()}
	img, err := cl.Download(testCtx(t), c, "tiny", func(p store.Progress) {
		mu.Lock()
		steps[p.Step]++
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	sameTree(t, src.RootFS, img.RootFS)
	if !reflect.DeepEqual(img.Config, src.Config) {
		t.Errorf("the downloaded image's config is %+v, want %+v", img.Config, src.Config)
	}
	if img.Kind != "download" || img.Arch != runtime.GOARCH || len(img.Blobs) != 1 || img.Blobs[0] != "sha256:"+a.SHA256 {
		t.Errorf("the downloaded image is %+v", img.Meta)
	}
	if got, err := c.Lookup("tiny"); err != nil || got.Key != img.Key {
		t.Errorf("the name tiny points at %v (%v), want %s", got.Key, err, img.Key)
	}
	if n := m.count(archivePath); n != 3 {
		t.Errorf("%d requests for the archive, want 3 (a 503, a dropped one, a resumed one)", n)
	}
	if len(m.ranges) != 1 || !strings.HasPrefix(m.ranges[0], archivePath+" bytes=") || strings.HasSuffix(m.ranges[0], "=0-") {
		t.Errorf("range requests %q, want one that resumes the archive", m.ranges)
	}
	for _, step := range []string{"resolve", "download", "unpack", "done"} {
		if steps[step] == 0 {
			t.Errorf("no %q progress report (got %v)", step, steps)
		}
	}
	// A second download of what the cache holds asks for the manifest
	// only.
	if _, err := cl.Download(testCtx(t), c, "tiny", nil); err != nil {
		t.Fatal(err)
	}
	if n := m.count(archivePath); n != 3 {
		t.Errorf("the archive was asked for again (%d requests) though the image is cached", n)
	}
	// Published again from where it was downloaded: the very archive.
	out2 := t.TempDir()
	res2, err := dist.Publish(testCtx(t), c, out2, []string{"tiny"}, dist.PublishOptions{Version: "test-2"})
	if err != nil {
		t.Fatal(err)
	}
	if got := res2.Manifest.Artifacts[archiveName()]; got.SHA256 != a.SHA256 || !reflect.DeepEqual(got.Config, a.Config) {
		t.Errorf("a downloaded image republished as %+v, want the archive it came from %+v", got, a)
	}
}

// The same tree published twice gives the same archive, byte for byte.
func TestPublishReproducible(t *testing.T) {
	c := openCache(t, t.TempDir())
	makeImage(t, c, "tiny", store.Config{}, makeTree)
	var sums []string
	for range 2 {
		res, err := dist.Publish(testCtx(t), c, t.TempDir(), []string{"tiny"}, dist.PublishOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sums = append(sums, res.Manifest.Artifacts[archiveName()].SHA256)
	}
	if sums[0] != sums[1] {
		t.Fatalf("two archives of one tree differ: %s, %s", sums[0], sums[1])
	}
}

// Publishing into a folder adds to its manifest; an artifact replaced
// takes its old file with it.
func TestPublishAddsToManifest(t *testing.T) {
	c := openCache(t, t.TempDir())
	makeImage(t, c, "one", store.Config{}, func(t *testing.T, root string) {
		os.WriteFile(filepath.Join(root, "f"), []byte("1"), 0o644)
	})
	out := t.TempDir()
	res, err := dist.Publish(testCtx(t), c, out, []string{"one"}, dist.PublishOptions{})
	if err != nil {
		t.Fatal(err)
	}
	first := res.Manifest.Artifacts[dist.RootFSName("one", runtime.GOARCH)].URL
	// Another architecture's artifact, as a publish on another machine
	// would add it.
	m := res.Manifest
	m.Artifacts[dist.RootFSName("one", "riscv64")] = dist.Artifact{URL: "elsewhere.tar.zst", SHA256: strings.Repeat("a", 64), Size: 10}
	b, _ := m.Encode()
	os.WriteFile(filepath.Join(out, dist.ManifestFile), b, 0o644)
	// The variant rebuilt with other content, published again.
	img, _ := c.Lookup("one")
	if _, err := c.Remove(testCtx(t), img.Key); err != nil {
		t.Fatal(err)
	}
	makeImage(t, c, "one", store.Config{}, func(t *testing.T, root string) {
		os.WriteFile(filepath.Join(root, "f"), []byte("2"), 0o644)
		os.WriteFile(filepath.Join(root, "g"), []byte("3"), 0o644)
	})
	res, err = dist.Publish(testCtx(t), c, out, nil, dist.PublishOptions{})
	if err != nil {
		t.Fatal(err)
	}
	second := res.Manifest.Artifacts[dist.RootFSName("one", runtime.GOARCH)].URL
	if second == first {
		t.Fatalf("the new archive has the old one's name %s", first)
	}
	if _, ok := res.Manifest.Artifacts[dist.RootFSName("one", "riscv64")]; !ok {
		t.Error("the other architecture's artifact was dropped")
	}
	if _, err := os.Stat(filepath.Join(out, first)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the replaced archive %s is still there: %v", first, err)
	}
	if _, err := os.Stat(filepath.Join(out, second)); err != nil {
		t.Error(err)
	}
}

// Two downloads of one uncached variant at once, from two handles on
// one cache as two processes would have: one download, both succeed.
func TestConcurrentDownloadsOnce(t *testing.T) {
	_, out, res := publishTree(t)
	m := serve(t, out)
	archivePath := "/" + res.Manifest.Artifacts[archiveName()].URL
	m.before = func(n int, w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path == archivePath {
			time.Sleep(300 * time.Millisecond) // the other is waiting by now
		}
		return false
	}
	dir := t.TempDir()
	var wg sync.WaitGroup
	keys := make([]string, 2)
	for i := range 2 {
		c := openCache(t, dir)
		wg.Go(func() {
			cl := &dist.Client{Manifest: m.URL + "/manifest.json", Fetcher: fastFetcher()}
			img, err := cl.Download(testCtx(t), c, "tiny", nil)
			if err != nil {
				t.Error(err)
				return
			}
			keys[i] = img.Key
		})
	}
	wg.Wait()
	if keys[0] == "" || keys[0] != keys[1] {
		t.Fatalf("the downloads gave images %q", keys)
	}
	if n := m.count(archivePath); n != 1 {
		t.Fatalf("the archive was downloaded %d times, want once", n)
	}
	imgs, _ := openCache(t, dir).List()
	if len(imgs) != 1 {
		t.Fatalf("%d images in the cache, want 1", len(imgs))
	}
}

// A manifest whose checksum is not the archive's: refused with the URL,
// the expected and the actual sha256, and nothing is cached.
func TestDownloadChecksumMismatch(t *testing.T) {
	_, out, res := publishTree(t)
	a := res.Manifest.Artifacts[archiveName()]
	bad := sha256.Sum256([]byte("not it"))
	a.SHA256 = hex.EncodeToString(bad[:])
	res.Manifest.Artifacts[archiveName()] = a
	b, _ := res.Manifest.Encode()
	os.WriteFile(filepath.Join(out, dist.ManifestFile), b, 0o644)
	m := serve(t, out)
	dir := t.TempDir()
	c := openCache(t, dir)
	_, err := (&dist.Client{Manifest: m.URL + "/manifest.json", Fetcher: fastFetcher()}).Download(testCtx(t), c, "tiny", nil)
	if err == nil {
		t.Fatal("a download with the wrong checksum was accepted")
	}
	real := sha256File(t, filepath.Join(out, a.URL))
	for _, s := range []string{m.URL + "/" + a.URL, a.SHA256, real} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("the error %q does not say %s", err, s)
		}
	}
	if imgs, _ := c.List(); len(imgs) != 0 {
		t.Errorf("images were cached: %v", imgs)
	}
	if _, err := c.Lookup("tiny"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the name was made: %v", err)
	}
	blobs, _ := os.ReadDir(filepath.Join(dir, "blobs", "sha256"))
	if len(blobs) != 0 {
		t.Errorf("blobs were kept: %v", blobs)
	}
}

func sha256File(t *testing.T, p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// A variant the manifest does not have: the error lists those it has.
func TestUnknownVariant(t *testing.T) {
	c := openCache(t, t.TempDir())
	makeImage(t, c, "alpha", store.Config{}, func(t *testing.T, root string) { os.WriteFile(filepath.Join(root, "a"), nil, 0o644) })
	makeImage(t, c, "beta", store.Config{}, func(t *testing.T, root string) { os.WriteFile(filepath.Join(root, "b"), nil, 0o644) })
	out := t.TempDir()
	if _, err := dist.Publish(testCtx(t), c, out, nil, dist.PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	m := serve(t, out)
	cl := &dist.Client{Manifest: m.URL + "/manifest.json", Fetcher: fastFetcher()}
	_, err := cl.Download(testCtx(t), openCache(t, t.TempDir()), "gamma", nil)
	if err == nil || !strings.Contains(err.Error(), `no variant "gamma"`) || !strings.Contains(err.Error(), "alpha, beta") {
		t.Fatalf("Download of an unknown variant: %v, want the known ones listed", err)
	}
	cl.Arch = "riscv64"
	_, err = cl.Download(testCtx(t), openCache(t, t.TempDir()), "alpha", nil)
	if err == nil || !strings.Contains(err.Error(), runtime.GOARCH) || !strings.Contains(err.Error(), "not for riscv64") {
		t.Fatalf("Download for another architecture: %v", err)
	}
	if _, err := cl.Download(testCtx(t), openCache(t, t.TempDir()), "../x", nil); err == nil {
		t.Fatal("a variant named ../x was taken")
	}
}

// An unreachable manifest: the error names the URL and the cause.
func TestUnreachableManifest(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := "http://" + l.Addr().String() + "/manifest.json"
	l.Close()
	f := fastFetcher()
	f.Attempts = 2
	_, err = (&dist.Client{Manifest: u, Fetcher: f}).Download(testCtx(t), openCache(t, t.TempDir()), "standard", nil)
	if err == nil || !strings.Contains(err.Error(), u) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Download: %v, want the URL and the cause", err)
	}
}

// A damaged blob is found by its hash and fetched again; a damaged
// image is made again from the blob.
func TestDamagedCacheFetchedAgain(t *testing.T) {
	src, out, res := publishTree(t)
	a := res.Manifest.Artifacts[archiveName()]
	m := serve(t, out)
	dir := t.TempDir()
	c := openCache(t, dir)
	cl := &dist.Client{Manifest: m.URL + "/manifest.json", Fetcher: fastFetcher()}
	img, err := cl.Download(testCtx(t), c, "tiny", nil)
	if err != nil {
		t.Fatal(err)
	}
	// The image's record damaged: made again, from the blob the cache
	// has (checked by its hash), with no new download.
	if err := os.WriteFile(filepath.Join(img.Dir, "image.json"), []byte("{garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	img, err = cl.Download(testCtx(t), c, "tiny", nil)
	if err != nil {
		t.Fatal(err)
	}
	sameTree(t, src.RootFS, img.RootFS)
	if n := m.count("/" + a.URL); n != 1 {
		t.Fatalf("%d downloads of the archive, want 1", n)
	}
	// The blob damaged and the image gone: the blob is fetched again.
	blob, _ := c.BlobPath("sha256:" + a.SHA256)
	b, _ := os.ReadFile(blob)
	b[len(b)/2] ^= 0xff
	os.WriteFile(blob, b, 0o600)
	if _, err := c.Remove(testCtx(t), img.Key); err != nil {
		t.Fatal(err)
	}
	img, err = cl.Download(testCtx(t), c, "tiny", nil)
	if err != nil {
		t.Fatal(err)
	}
	sameTree(t, src.RootFS, img.RootFS)
	if n := m.count("/" + a.URL); n != 2 {
		t.Fatalf("%d downloads of the archive, want the damaged blob fetched again", n)
	}
}

// The manifest may be a file, named by $AIRLOCK_IMAGE_MANIFEST or by
// the config file: a published folder then serves without a server.
func TestManifestFromFile(t *testing.T) {
	src, out, _ := publishTree(t)
	t.Setenv(dist.EnvManifest, filepath.Join(out, dist.ManifestFile))
	img, err := dist.Download(testCtx(t), openCache(t, t.TempDir()), "tiny", nil)
	if err != nil {
		t.Fatal(err)
	}
	sameTree(t, src.RootFS, img.RootFS)

	// The config file, with a path relative to its folder.
	cfgHome := t.TempDir()
	t.Setenv(dist.EnvManifest, "")
	t.Setenv("XDG_CONFIG_HOME", cfgHome)
	if _, err := dist.ConfiguredManifest(); !errors.Is(err, dist.ErrNoManifest) {
		t.Fatalf("ConfiguredManifest with nothing set: %v, want ErrNoManifest", err)
	}
	os.MkdirAll(filepath.Join(cfgHome, "airlock"), 0o755)
	rel, _ := filepath.Rel(filepath.Join(cfgHome, "airlock"), filepath.Join(out, dist.ManifestFile))
	os.WriteFile(filepath.Join(cfgHome, "airlock", "config.json"), []byte(`{"other_setting": 1, "image_manifest": "`+rel+`"}`), 0o644)
	u, err := dist.ConfiguredManifest()
	if err != nil || u != "file://"+filepath.Join(out, dist.ManifestFile) {
		t.Fatalf("ConfiguredManifest = %q, %v", u, err)
	}
	if _, err := dist.Download(testCtx(t), openCache(t, t.TempDir()), "tiny", nil); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(cfgHome, "airlock", "config.json"), []byte(`{"image_manifest": 3}`), 0o644)
	if _, err := dist.ConfiguredManifest(); err == nil || !strings.Contains(err.Error(), "image_manifest") {
		t.Fatalf("a config with a number for the manifest: %v", err)
	}
}

// A manifest from the network may not name files on this machine.
func TestRemoteManifestNamesNoFiles(t *testing.T) {
	_, out, res := publishTree(t)
	a := res.Manifest.Artifacts[archiveName()]
	a.URL = "file://" + filepath.Join(out, a.URL)
	res.Manifest.Artifacts[archiveName()] = a
	b, _ := res.Manifest.Encode()
	os.WriteFile(filepath.Join(out, dist.ManifestFile), b, 0o644)
	m := serve(t, out)
	_, err := (&dist.Client{Manifest: m.URL + "/manifest.json", Fetcher: fastFetcher()}).Download(testCtx(t), openCache(t, t.TempDir()), "tiny", nil)
	if err == nil || !strings.Contains(err.Error(), "local file") {
		t.Fatalf("Download: %v, want a file URL in a remote manifest refused", err)
	}
}

// With EROFS, Publish writes each image's erofs file, and a Client that
// asks for it gets it into the image, checked like the archive.
func TestPublishDownloadEROFS(t *testing.T) {
	if _, err := exec.LookPath("mkfs.erofs"); err != nil {
		t.Skip("mkfs.erofs is not installed (Debian: erofs-utils)")
	}
	c := openCache(t, t.TempDir())
	makeImage(t, c, "tiny", store.Config{}, makeTree)
	out := t.TempDir()
	res, err := dist.Publish(testCtx(t), c, out, nil, dist.PublishOptions{EROFS: true})
	if err != nil {
		t.Fatal(err)
	}
	e, ok := res.Manifest.Artifacts[dist.EROFSName("tiny", runtime.GOARCH)]
	if !ok || !strings.HasSuffix(e.URL, ".erofs") {
		t.Fatalf("no erofs artifact published: %+v", res.Manifest.Artifacts)
	}
	m := serve(t, out)
	cl := &dist.Client{Manifest: m.URL + "/manifest.json", Fetcher: fastFetcher(), EROFS: true}
	img, err := cl.Download(testCtx(t), openCache(t, t.TempDir()), "tiny", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := sha256File(t, filepath.Join(img.Dir, "rootfs.erofs")); got != e.SHA256 {
		t.Fatalf("the image's erofs file has sha256 %s, want the published %s", got, e.SHA256)
	}
	if len(img.Blobs) != 2 || img.Blobs[1] != "sha256:"+e.SHA256 {
		t.Errorf("the image's blobs %v do not keep the erofs file", img.Blobs)
	}
	// Without asking, it is not downloaded.
	cl.EROFS = false
	before := m.count("/" + e.URL)
	img, err = cl.Download(testCtx(t), openCache(t, t.TempDir()), "tiny", nil)
	if err != nil {
		t.Fatal(err)
	}
	if m.count("/"+e.URL) != before {
		t.Error("the erofs file was downloaded though not asked for")
	}
	if _, err := os.Stat(filepath.Join(img.Dir, "rootfs.erofs")); err == nil {
		t.Error("an erofs file is in an image that did not ask for one")
	}
	// Asked for later, it is added to the image the cache holds.
	cl.EROFS = true
	c2, _ := store.Open(filepath.Dir(filepath.Dir(img.Dir)))
	again, err := cl.Download(testCtx(t), c2, "tiny", nil)
	if err != nil {
		t.Fatal(err)
	}
	if again.Key != img.Key {
		t.Fatalf("the image was made again (%s, was %s)", again.Key, img.Key)
	}
	if got := sha256File(t, filepath.Join(img.Dir, "rootfs.erofs")); got != e.SHA256 {
		t.Fatalf("the added erofs file has sha256 %s, want %s", got, e.SHA256)
	}
	if p, err := c2.EROFS(testCtx(t), again); err != nil || p != filepath.Join(img.Dir, "rootfs.erofs") {
		t.Errorf("the cache's EROFS gives %s, %v", p, err)
	}
}
