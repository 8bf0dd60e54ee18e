package dist

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/image/fetch"
	"github.com/airlock-sandbox/airlock/internal/image/store"
	"github.com/airlock-sandbox/airlock/internal/image/untar"
)

const (
	// unpackRatio bounds a root tree's bytes by its archive's: real
	// trees compress 3 to 5 times with zstd; a bomb compresses far more.
	unpackRatio    = 20
	minUnpackBytes = 1 << 30
	maxUnpackBytes = 64 << 30
	// maxUnpackEntries bounds a root tree's entries (Debian's standard
	// variant has some 30,000).
	maxUnpackEntries = 4 << 20
	// progressEvery throttles progress reports.
	progressEvery = 100 * time.Millisecond
)

// Client downloads images from one manifest.
type Client struct {
	// Manifest is the manifest's URL: http, https or file.
	Manifest string
	// Fetcher gets the manifest and the artifacts; nil means one with
	// the defaults.
	Fetcher *fetch.Fetcher
	// Arch is the architecture of the images to get, as Go names it;
	// "" is this machine's.
	Arch string
	// EROFS gets a variant's erofs file too, when the manifest has one,
	// so that the vm level need not pack one here.
	EROFS bool
}

// Configured returns a Client for the manifest that
// $AIRLOCK_IMAGE_MANIFEST or airlock's config file names (see
// ConfiguredManifest), or ErrNoManifest.
func Configured() (*Client, error) {
	u, err := ConfiguredManifest()
	if err != nil {
		return nil, err
	}
	return &Client{Manifest: u}, nil
}

// Download gets variant from the configured manifest into cache: see
// Client.Download.
func Download(ctx context.Context, cache *store.Cache, variant string, progress store.ProgressFunc) (store.Image, error) {
	c, err := Configured()
	if err != nil {
		return store.Image{}, err
	}
	return c.Download(ctx, cache, variant, progress)
}

func (c *Client) fetcher() *fetch.Fetcher {
	if c.Fetcher != nil {
		return c.Fetcher
	}
	return &fetch.Fetcher{}
}

func (c *Client) arch() string {
	if c.Arch != "" {
		return c.Arch
	}
	return runtime.GOARCH
}

// LoadManifest gets and checks the manifest.
func (c *Client) LoadManifest(ctx context.Context) (*Manifest, error) {
	if _, err := c.base(); err != nil {
		return nil, err
	}
	b, err := c.fetcher().Get(ctx, c.Manifest, MaxManifestSize)
	if err != nil {
		return nil, fmt.Errorf("get the image manifest: %w", err)
	}
	m, err := ParseManifest(b)
	if err != nil {
		return nil, fmt.Errorf("the image manifest %s: %w", c.Manifest, err)
	}
	return m, nil
}

func (c *Client) base() (*url.URL, error) {
	u, err := url.Parse(c.Manifest)
	if err != nil {
		return nil, fmt.Errorf("the image manifest's URL %q: %w", c.Manifest, err)
	}
	switch u.Scheme {
	case "http", "https", "file":
	default:
		return nil, fmt.Errorf("the image manifest's URL %q: use an http, https or file URL", c.Manifest)
	}
	return u, nil
}

// resolve returns an artifact's URL, resolved against the manifest's. A
// manifest from the network may not name local files.
func (c *Client) resolve(a Artifact) (string, error) {
	base, err := c.base()
	if err != nil {
		return "", err
	}
	ref, err := url.Parse(a.URL)
	if err != nil {
		return "", err
	}
	u := base.ResolveReference(ref)
	if u.Scheme == "file" && base.Scheme != "file" {
		return "", fmt.Errorf("the manifest %s names the local file %s: only a manifest that is itself a local file may", c.Manifest, u)
	}
	return u.String(), nil
}

// artifact returns the artifact for variant's root tree, or an error
// that lists the variants the manifest has.
func (c *Client) artifact(m *Manifest, variant string) (Artifact, error) {
	arch := c.arch()
	if a, ok := m.Artifacts[RootFSName(variant, arch)]; ok {
		return a, nil
	}
	var archs []string
	for name := range m.Artifacts {
		if a, ok := strings.CutPrefix(name, RootFSName(variant, "")); ok {
			archs = append(archs, a)
		}
	}
	if len(archs) > 0 {
		slices.Sort(archs)
		return Artifact{}, fmt.Errorf("the image manifest %s has variant %q for %s, not for %s", c.Manifest, variant, strings.Join(archs, ", "), arch)
	}
	known := m.Variants(arch)
	if len(known) == 0 {
		return Artifact{}, fmt.Errorf("the image manifest %s has no variant %q, nor any other for %s", c.Manifest, variant, arch)
	}
	return Artifact{}, fmt.Errorf("the image manifest %s has no variant %q; it has %s", c.Manifest, variant, strings.Join(known, ", "))
}

// Download returns variant's image, getting it from the manifest into
// cache when the cache does not hold the manifest's version of it: the
// archive is downloaded into the cache's blobs (resumed, retried, and
// checked against the manifest's sha256 and size before it is used;
// one download of a blob at a time across processes), unpacked as a
// hostile tar into a new image, and the variant's name is pointed at
// it.
func (c *Client) Download(ctx context.Context, cache *store.Cache, variant string, progress store.ProgressFunc) (store.Image, error) {
	imgs, err := c.Prefetch(ctx, cache, []string{variant}, progress)
	if err != nil {
		return store.Image{}, err
	}
	return imgs[0], nil
}

// Prefetch downloads each of variants as Download does, reading the
// manifest once.
func (c *Client) Prefetch(ctx context.Context, cache *store.Cache, variants []string, progress store.ProgressFunc) ([]store.Image, error) {
	if progress == nil {
		progress = func(store.Progress) {}
	}
	for _, v := range variants {
		if err := CheckVariant(v); err != nil {
			return nil, err
		}
	}
	for _, v := range variants {
		progress(store.Progress{Image: v, Step: "resolve", Item: c.Manifest})
	}
	m, err := c.LoadManifest(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]store.Image, 0, len(variants))
	for _, v := range variants {
		img, err := c.get(ctx, cache, m, v, progress)
		if err != nil {
			return out, err
		}
		out = append(out, img)
	}
	return out, nil
}

// imageKey is the cache key of the image an artifact makes: its
// archive, the config the manifest gives it, and whose its files are on
// the host (owners, the cache's store.Owners ID; said only when it is
// not root's).
func imageKey(a Artifact, owners string) string {
	if owners == store.OwnersNative {
		owners = ""
	}
	b, _ := json.Marshal(struct {
		Kind   string        `json:"kind"`
		SHA256 string        `json:"sha256"`
		Config *store.Config `json:"config,omitempty"`
		Owners string        `json:"owners,omitempty"`
	}{"download", a.SHA256, a.Config, owners})
	return store.Key(b)
}

func (c *Client) get(ctx context.Context, cache *store.Cache, m *Manifest, variant string, progress store.ProgressFunc) (store.Image, error) {
	a, err := c.artifact(m, variant)
	if err != nil {
		return store.Image{}, err
	}
	src, err := c.resolve(a)
	if err != nil {
		return store.Image{}, err
	}
	key := imageKey(a, cache.Owners().ID())
	var erofs *fetch.Want
	if e, ok := m.Artifacts[EROFSName(variant, c.arch())]; ok && c.EROFS {
		u, err := c.resolve(e)
		if err != nil {
			return store.Image{}, err
		}
		erofs = &fetch.Want{URL: u, SHA256: e.SHA256, Size: e.Size}
	}
	img, err := cache.Get(key)
	if err != nil {
		img, err = c.make(ctx, cache, m, variant, a, src, key, erofs, progress)
		if err != nil {
			return store.Image{}, err
		}
	} else if erofs != nil {
		if err := c.addEROFS(ctx, cache, img, variant, *erofs, progress); err != nil {
			return store.Image{}, err
		}
	}
	if err := cache.Tag(variant, key); err != nil {
		return store.Image{}, err
	}
	img.Names = append(img.Names, variant)
	slices.Sort(img.Names)
	img.Names = slices.Compact(img.Names)
	progress(store.Progress{Image: variant, Step: "done", Done: a.Size, Total: a.Size})
	return img, nil
}

// make downloads the artifact and unpacks it into a new image.
func (c *Client) make(ctx context.Context, cache *store.Cache, m *Manifest, variant string, a Artifact, src, key string, erofs *fetch.Want, progress store.ProgressFunc) (store.Image, error) {
	want := fetch.Want{URL: src, SHA256: a.SHA256, Size: a.Size}
	blob, err := c.fetcher().Blob(ctx, cache, want, throttle(progress, variant, "download", RootFSName(variant, c.arch())))
	if err != nil {
		return store.Image{}, fmt.Errorf("download image %s: %w", variant, err)
	}
	defer blob.Close()
	blobs := []string{want.Digest()}
	var erofsPath string
	if erofs != nil {
		f, err := c.fetcher().Blob(ctx, cache, *erofs, throttle(progress, variant, "download", EROFSName(variant, c.arch())))
		if err != nil {
			return store.Image{}, fmt.Errorf("download image %s's erofs file: %w", variant, err)
		}
		f.Close()
		if erofsPath, err = cache.BlobPath(erofs.Digest()); err != nil {
			return store.Image{}, err
		}
		blobs = append(blobs, erofs.Digest())
	}
	var cfg store.Config
	if a.Config != nil {
		cfg = *a.Config
	}
	return cache.Make(ctx, key, func(ctx context.Context, dir string) (store.Meta, error) {
		root := filepath.Join(dir, "rootfs")
		if err := os.Mkdir(root, 0o755); err != nil {
			return store.Meta{}, err
		}
		limit := min(max(a.Size*unpackRatio, minUnpackBytes), maxUnpackBytes)
		u, err := cache.Owners().Unpacker(ctx, root, untar.Options{
			Limits: untar.Limits{Bytes: limit, Entries: maxUnpackEntries},
		})
		if err != nil {
			return store.Meta{}, err
		}
		defer u.Close()
		r := &countingReader{r: blob, report: throttle(progress, variant, "unpack", RootFSName(variant, c.arch())), total: a.Size}
		if err := u.Apply(ctx, r); err != nil {
			return store.Meta{}, fmt.Errorf("unpack image %s from %s: %w", variant, src, err)
		}
		r.report(a.Size, a.Size)
		if erofsPath != "" {
			// The erofs file is the blob itself, under a second name:
			// it takes no more room.
			if err := os.Link(erofsPath, filepath.Join(dir, erofsFile)); err != nil {
				return store.Meta{}, fmt.Errorf("put image %s's erofs file in place: %w", variant, err)
			}
		}
		return store.Meta{
			Kind:   "download",
			Source: fmt.Sprintf("%s (manifest %s, version %s)", src, c.Manifest, m.Version),
			Arch:   c.arch(),
			Config: cfg,
			Blobs:  blobs,
		}, nil
	})
}

// erofsFile is the name of an image's erofs file in its folder, where
// store.Cache.EROFS finds it.
const erofsFile = "rootfs.erofs"

// addEROFS gives an image that the cache holds without one the erofs
// file the manifest has for it.
func (c *Client) addEROFS(ctx context.Context, cache *store.Cache, img store.Image, variant string, want fetch.Want, progress store.ProgressFunc) error {
	dst := filepath.Join(img.Dir, erofsFile)
	if _, err := os.Lstat(dst); err == nil {
		return nil
	}
	f, err := c.fetcher().Blob(ctx, cache, want, throttle(progress, variant, "download", EROFSName(variant, c.arch())))
	if err != nil {
		return fmt.Errorf("download image %s's erofs file: %w", variant, err)
	}
	f.Close()
	blob, err := cache.BlobPath(want.Digest())
	if err != nil {
		return err
	}
	// The image's lock: its maker and store's packer take it too.
	unlock, err := cache.Lock(ctx, img.Key)
	if err != nil {
		return err
	}
	defer unlock()
	if _, err := os.Lstat(dst); err == nil {
		return nil
	}
	tmp := dst + ".link"
	os.Remove(tmp)
	if err := os.Link(blob, tmp); err != nil {
		return fmt.Errorf("put image %s's erofs file in place: %w", variant, err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("put image %s's erofs file in place: %w", variant, err)
	}
	return nil
}

// countingReader reports the bytes read through it.
type countingReader struct {
	r      io.Reader
	n      int64
	total  int64
	report func(done, total int64)
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if n > 0 {
		c.report(c.n, c.total)
	}
	return n, err
}

// throttle returns a byte counter's report as store.Progress, at most
// every progressEvery, and always the first and the last.
func throttle(progress store.ProgressFunc, image, step, item string) func(done, total int64) {
	if progress == nil {
		return func(int64, int64) {}
	}
	var mu sync.Mutex
	var last time.Time
	return func(done, total int64) {
		mu.Lock()
		now := time.Now()
		send := last.IsZero() || total > 0 && done >= total || now.Sub(last) >= progressEvery
		if send {
			last = now
		}
		mu.Unlock()
		if send {
			progress(store.Progress{Image: image, Step: step, Item: item, Done: done, Total: total})
		}
	}
}
