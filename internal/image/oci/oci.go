// Package oci pulls OCI and docker images, from a registry, a local OCI
// image layout or a `docker save` tarball, into the image cache: layers
// are downloaded in parallel into the cache's blobs (shared between
// images, verified by digest, one download per blob across processes)
// and applied in order, as hostile tars, to the image's root tree.
package oci

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/airlock-sandbox/airlock/internal/image/store"
	"github.com/airlock-sandbox/airlock/internal/image/untar"
)

// Default limits of an image's unpacked root tree.
const (
	DefaultMaxBytes   = 16 << 30
	DefaultMaxEntries = 1 << 20
	// DefaultParallel is how many layers download at once.
	DefaultParallel = 4
)

// Options say how an image is pulled.
type Options struct {
	// Insecure allows plain HTTP, and TLS without a verified
	// certificate, to the registry. A loopback registry (localhost,
	// 127.0.0.0/8, ::1) may use plain HTTP without it, as docker allows.
	Insecure bool
	// Platform is "os/arch[/variant]", as docker's --platform; empty
	// is linux on this machine's architecture.
	Platform string
	// Limits bound the unpacked root tree; zero fields take the
	// defaults (DefaultMaxBytes, DefaultMaxEntries).
	Limits untar.Limits
	// Keychain gives registry credentials; nil is docker's
	// (~/.docker/config.json, or $DOCKER_CONFIG/config.json, with its
	// credential helpers).
	Keychain authn.Keychain
	// Parallel is how many layers download at once; 0 is
	// DefaultParallel.
	Parallel int
}

func (o Options) limits() untar.Limits {
	l := o.Limits
	if l.Bytes <= 0 {
		l.Bytes = DefaultMaxBytes
	}
	if l.Entries <= 0 {
		l.Entries = DefaultMaxEntries
	}
	return l
}

func (o Options) platform() (v1.Platform, error) {
	if o.Platform == "" {
		return v1.Platform{OS: "linux", Architecture: runtime.GOARCH}, nil
	}
	p, err := v1.ParsePlatform(o.Platform)
	if err != nil || p.OS == "" || p.Architecture == "" {
		return v1.Platform{}, fmt.Errorf("platform %q is not OS/ARCH[/VARIANT] (e.g. linux/arm64)", o.Platform)
	}
	return *p, nil
}

// Source is a resolved image: its manifest and config are read, its
// layers not yet.
type Source struct {
	cache *store.Cache
	opts  Options
	// asked is the reference as given; ref its parsed form.
	asked string
	ref   parsedRef
	key   string
	// digestName is repo@digest of the image's own manifest, for a
	// registry image.
	digestName string
	arch       string
	config     store.Config
	layers     []layerSource
	// stats is what the layers held, once Fill has applied them.
	stats untar.Stats
}

// Key is the image's key in the cache: the digest of its manifest (for
// a multi-platform image, of the chosen platform's manifest); for a
// docker save tarball, which holds no manifest of its own, the digest
// of its config (docker's image ID). A tree made other than by root
// (see store.Owners) has a key of its own, made from that digest and
// the owners' ID, so that trees whose files belong to other host ids
// never meet in one cache.
func (s *Source) Key() string {
	owners := s.cache.Owners().ID()
	if owners == store.OwnersNative {
		return s.key
	}
	return store.Key([]byte("airlock oci image 1\n" + s.key + "\nowners " + owners + "\n"))
}

// Name is the image's canonical name (see CanonicalName).
func (s *Source) Name() string { return s.ref.name() }

// Names are the names the cache keeps the image under: its canonical
// name and, for a registry image, repo@digest of its manifest.
func (s *Source) Names() []string {
	names := []string{s.Name()}
	if s.digestName != "" && s.digestName != names[0] {
		names = append(names, s.digestName)
	}
	return names
}

// Config is what the image's config says about running it.
func (s *Source) Config() store.Config { return s.config }

// Layers are the digests of the blobs the image is made from, in order.
func (s *Source) Layers() []string {
	out := make([]string, len(s.layers))
	for i, l := range s.layers {
		out[i] = l.digest.String()
	}
	return out
}

// Resolve reads what ref names (see CanonicalName for the forms it
// takes) as far as its manifest and config, choosing the platform's
// image from a multi-platform one.
func Resolve(ctx context.Context, cache *store.Cache, ref string, opts Options) (*Source, error) {
	want, err := opts.platform()
	if err != nil {
		return nil, err
	}
	p, err := parseRef(ref, opts.Insecure)
	if err != nil {
		return nil, err
	}
	s := &Source{cache: cache, opts: opts, asked: ref, ref: p}
	var img v1.Image
	switch p.kind {
	case kindRegistry:
		img, err = s.remoteImage(ctx, want)
	case kindLayout:
		img, err = layoutImage(p.path, p.sel, want)
	default:
		img, err = archiveImage(p.path, p.sel)
	}
	if err != nil {
		return nil, err
	}
	if err := s.read(img, want); err != nil {
		return nil, fmt.Errorf("read image %s: %w", s.Name(), err)
	}
	return s, nil
}

// transport is the HTTP transport for registries: plain HTTP only to a
// loopback registry or when Insecure says so.
func (s *Source) transport() http.RoundTripper {
	t := remote.DefaultTransport.(*http.Transport).Clone()
	if s.opts.Insecure {
		t.TLSClientConfig = &tls.Config{InsecureSkipVerify: true}
	}
	return &schemeGuard{next: t, insecure: s.opts.Insecure}
}

func (s *Source) remoteOptions(ctx context.Context, want v1.Platform) []remote.Option {
	kc := s.opts.Keychain
	if kc == nil {
		kc = authn.DefaultKeychain
	}
	return []remote.Option{
		remote.WithContext(ctx),
		remote.WithAuthFromKeychain(kc),
		remote.WithTransport(s.transport()),
		remote.WithPlatform(want),
		remote.WithUserAgent("airlock"),
	}
}

func (s *Source) remoteImage(ctx context.Context, want v1.Platform) (v1.Image, error) {
	img, err := remote.Image(s.ref.reg, s.remoteOptions(ctx, want)...)
	if err != nil {
		return nil, registryError(s.ref.reg, err)
	}
	d, err := img.Digest()
	if err != nil {
		return nil, registryError(s.ref.reg, err)
	}
	s.digestName = repoName(s.ref.reg) + "@" + d.String()
	return img, nil
}

// registryError says what went wrong talking to a registry, and what a
// user can do about it.
func registryError(ref name.Reference, err error) error {
	reg := ref.Context().RegistryStr()
	var te *transport.Error
	if errors.As(err, &te) {
		switch te.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden:
			return fmt.Errorf("pull %s: the registry %s refused access (log in with `docker login %s`: airlock reads docker's credentials): %w", canonical(ref), reg, reg, err)
		case http.StatusNotFound:
			return fmt.Errorf("pull %s: the registry %s has no such image: %w", canonical(ref), reg, err)
		}
		return fmt.Errorf("pull %s from %s: %w", canonical(ref), reg, err)
	}
	var ge *guardError
	if errors.As(err, &ge) {
		return fmt.Errorf("pull %s: %w", canonical(ref), ge)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("pull %s from %s: %w", canonical(ref), reg, err)
	}
	return fmt.Errorf("pull %s: could not reach the registry %s (check the name, the network, or --insecure for a registry without TLS): %w", canonical(ref), reg, err)
}

// layoutImage picks the image sel names in the OCI image layout at dir:
// the manifest whose org.opencontainers.image.ref.name is the tag, the
// one with the digest, or the only one there.
func layoutImage(dir, sel string, want v1.Platform) (v1.Image, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("open the OCI image layout %s: %w", dir, err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return nil, fmt.Errorf("read the OCI image layout %s: %w", dir, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("read the OCI image layout %s: %w", dir, err)
	}
	var found []v1.Descriptor
	var known []string
	for _, d := range im.Manifests {
		tag := d.Annotations["org.opencontainers.image.ref.name"]
		if tag != "" {
			known = append(known, tag)
		}
		if sel == "" || sel == tag || sel == d.Digest.String() {
			found = append(found, d)
		}
	}
	switch {
	case len(found) == 0 && sel != "":
		return nil, fmt.Errorf("the OCI image layout %s has no image %q (it has: %s)", dir, sel, strings.Join(known, ", "))
	case len(found) == 0:
		return nil, fmt.Errorf("the OCI image layout %s holds no image", dir)
	case len(found) > 1:
		return nil, fmt.Errorf("the OCI image layout %s holds %d images: name one, as oci:%s:TAG or oci:%s@DIGEST (tags: %s)", dir, len(found), dir, dir, strings.Join(known, ", "))
	}
	d := found[0]
	if d.MediaType.IsIndex() {
		child, err := idx.ImageIndex(d.Digest)
		if err != nil {
			return nil, fmt.Errorf("read the OCI image layout %s: %w", dir, err)
		}
		return platformImage(child, want)
	}
	return idx.Image(d.Digest)
}

// platformImage picks want's image from a multi-platform index.
func platformImage(idx v1.ImageIndex, want v1.Platform) (v1.Image, error) {
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	var have []string
	for _, d := range im.Manifests {
		if d.Platform == nil {
			continue
		}
		have = append(have, d.Platform.String())
		if d.MediaType.IsImage() && d.Platform.Satisfies(want) {
			return idx.Image(d.Digest)
		}
	}
	return nil, fmt.Errorf("no image for %s (there are: %s)", want.String(), strings.Join(have, ", "))
}

// archiveImage reads the image in a `docker save` tarball: the one
// tagged sel, or the only one.
func archiveImage(path, sel string) (v1.Image, error) {
	var tag *name.Tag
	if sel != "" {
		t, err := name.NewTag(sel)
		if err != nil {
			return nil, fmt.Errorf("%q is not a tag: %w", sel, err)
		}
		tag = &t
	}
	img, err := tarball.ImageFromPath(path, tag)
	if err != nil {
		return nil, fmt.Errorf("read the docker save tarball %s: %w", path, err)
	}
	return img, nil
}

// read takes the image's key, config and layers.
func (s *Source) read(img v1.Image, want v1.Platform) error {
	cfg, err := img.ConfigFile()
	if err != nil {
		return fmt.Errorf("read its config: %w", err)
	}
	if cfg.OS != "" && cfg.OS != want.OS || cfg.Architecture != "" && cfg.Architecture != want.Architecture {
		return fmt.Errorf("it is for %s/%s, not %s (choose another platform with --platform)", cfg.OS, cfg.Architecture, want.String())
	}
	s.arch = cfg.Architecture
	s.config = store.Config{
		Env:        cfg.Config.Env,
		WorkingDir: cfg.Config.WorkingDir,
		User:       cfg.Config.User,
		Entrypoint: cfg.Config.Entrypoint,
		Cmd:        cfg.Config.Cmd,
	}
	layers, err := img.Layers()
	if err != nil {
		return fmt.Errorf("list its layers: %w", err)
	}
	if s.ref.kind == kindArchive {
		// A docker save tarball's layers are (usually) uncompressed
		// tars, with no manifest: the blob is the tar, named by its
		// diff ID, and the key is the config's digest.
		h, err := img.ConfigName()
		if err != nil {
			return err
		}
		s.key = h.String()
		for _, l := range layers {
			d, err := l.DiffID()
			if err != nil {
				return err
			}
			s.layers = append(s.layers, layerSource{digest: d, size: -1, open: l.Uncompressed})
		}
		return s.checkSizes()
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	s.key = d.String()
	for _, l := range layers {
		mt, err := l.MediaType()
		if err != nil {
			return err
		}
		if !mt.IsDistributable() {
			// Foreign layers live elsewhere than the registry, and
			// only Windows images have them.
			return fmt.Errorf("it has a non-distributable layer (%s), which only Windows images use", mt)
		}
		d, err := l.Digest()
		if err != nil {
			return err
		}
		size, err := l.Size()
		if err != nil {
			return err
		}
		s.layers = append(s.layers, layerSource{digest: d, size: size, open: l.Compressed})
	}
	return s.checkSizes()
}

// checkSizes refuses an image whose layers, as its manifest gives their
// sizes, are more than the limit before they are even unpacked.
func (s *Source) checkSizes() error {
	lim := s.opts.limits()
	var sum int64
	for _, l := range s.layers {
		sum += max(l.size, 0)
	}
	if sum > maxBlob(lim) {
		return &untar.LimitError{What: "bytes", Limit: lim.Bytes}
	}
	if slices.ContainsFunc(s.layers, func(l layerSource) bool { return l.digest.Algorithm != "sha256" }) {
		return errors.New("it has a layer whose digest is not sha256")
	}
	return nil
}

// maxBlob is the most bytes a layer's blob may hold under lim: its
// contents, and a tar header and padding per entry.
func maxBlob(lim untar.Limits) int64 {
	return lim.Bytes + lim.Entries*1024 + 1024
}

// Pull gets the image ref names into cache, unless it is there already,
// and names it (Names). progress, which may be nil, receives reports
// while it works.
func Pull(ctx context.Context, cache *store.Cache, ref string, opts Options, progress store.ProgressFunc) (store.Image, error) {
	if progress == nil {
		progress = func(store.Progress) {}
	}
	progress(store.Progress{Image: ref, Step: "resolve"})
	src, err := Resolve(ctx, cache, ref, opts)
	if err != nil {
		return store.Image{}, err
	}
	filled := false
	img, err := cache.Make(ctx, src.Key(), func(ctx context.Context, dir string) (store.Meta, error) {
		filled = true
		return src.Fill(ctx, dir, progress)
	})
	if err != nil {
		return store.Image{}, err
	}
	if ids := src.chainIDs(); filled && len(ids) > 0 {
		// The image's tree is the chain of all its layers, for an
		// image that begins with them.
		st := src.stats
		m := store.ChainMeta{ID: ids[len(ids)-1], Layers: src.Layers(), Image: img.Key, Entries: st.Entries, Bytes: st.Bytes, Skipped: st.Skipped, SkippedCount: st.SkippedCount}
		if err := cache.SaveChain(ctx, m, ""); err != nil {
			slog.Warn("image cache: the chain of an image's layers was not kept", "image", src.Name(), "err", err)
		}
	}
	for _, n := range src.Names() {
		if err := cache.Tag(n, img.Key); err != nil {
			return store.Image{}, err
		}
	}
	progress(store.Progress{Image: ref, Step: "done"})
	return cache.Get(img.Key)
}
