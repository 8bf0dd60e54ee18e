package dist

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/image/store"
)

// ManifestFile is the manifest's name in a published folder.
const ManifestFile = "manifest.json"

// PublishOptions say what Publish writes.
type PublishOptions struct {
	// Version names the manifest's set of artifacts; "" is the time
	// now (UTC, RFC 3339).
	Version string
	// EROFS writes each image's erofs file too (made with mkfs.erofs
	// when the cache has none yet).
	EROFS bool
	// Progress receives "pack" reports: bytes of each artifact written.
	Progress store.ProgressFunc
}

// Published is what Publish wrote.
type Published struct {
	// Manifest is the manifest now in the folder, with what was there
	// before and was not replaced (other architectures, other names).
	Manifest *Manifest `json:"manifest"`
	// Written are the artifacts written, by name.
	Written []string `json:"written"`
	// Skipped lists, by variant, what the archive left out: device
	// nodes and sockets, which a sandbox never takes from an image.
	Skipped map[string][]string `json:"skipped,omitempty"`
}

// Publishable lists the names in cache that Publish takes by default:
// the images built here from a variant or downloaded from a mirror, and
// named as a variant may be.
func Publishable(cache *store.Cache) ([]string, error) {
	imgs, err := cache.List()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, img := range imgs {
		if img.Kind != "variant" && img.Kind != "download" {
			continue
		}
		for _, n := range img.Names {
			if CheckVariant(n) == nil {
				out = append(out, n)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// Publish writes the images that variants name in cache (Publishable's
// when variants is empty) into outDir as artifacts, with a manifest.json
// whose URLs are relative, so that any static HTTP server serving
// outDir is a mirror that Download reads, and the folder can be moved.
// Artifact files are named by their content; what the manifest held
// already stays unless replaced, so that images of several
// architectures can be published into one folder; a file that a
// replaced artifact named is removed.
//
// An image downloaded from a mirror is published as the very archive
// it came from. One built here is archived with writeArchive (see there
// for what an archive keeps).
func Publish(ctx context.Context, cache *store.Cache, outDir string, variants []string, opts PublishOptions) (*Published, error) {
	if len(variants) == 0 {
		var err error
		if variants, err = Publishable(cache); err != nil {
			return nil, err
		}
		if len(variants) == 0 {
			return nil, errors.New("the image cache holds no image built here or downloaded to publish: build one with `airlock image build` or get one with `airlock prefetch`")
		}
	}
	imgs := make([]store.Image, len(variants))
	for i, v := range variants {
		if err := CheckVariant(v); err != nil {
			return nil, err
		}
		img, err := cache.Lookup(v)
		if err != nil {
			return nil, fmt.Errorf("publish %s: %w (see `airlock image list`)", v, err)
		}
		imgs[i] = img
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return nil, fmt.Errorf("make the mirror folder %s: %w", outDir, err)
	}
	old, err := readManifestFile(outDir)
	if err != nil {
		return nil, err
	}
	m := &Manifest{Format: Format, Version: opts.Version, Artifacts: map[string]Artifact{}}
	if m.Version == "" {
		m.Version = time.Now().UTC().Format(time.RFC3339)
	}
	if old != nil {
		maps.Copy(m.Artifacts, old.Artifacts)
	}
	res := &Published{Manifest: m, Skipped: map[string][]string{}}
	for i, v := range variants {
		img := imgs[i]
		arch := img.Arch
		if arch == "" {
			arch = runtime.GOARCH
		}
		name := RootFSName(v, arch)
		a, skipped, err := publishArchive(ctx, cache, outDir, img, name, throttle(opts.Progress, v, "pack", name))
		if err != nil {
			return nil, fmt.Errorf("publish %s: %w", v, err)
		}
		if !isZeroConfig(img.Config) {
			cfg := img.Config
			a.Config = &cfg
		}
		m.Artifacts[name] = a
		res.Written = append(res.Written, name)
		if len(skipped) > 0 {
			res.Skipped[v] = skipped
		}
		if opts.EROFS {
			p, err := cache.EROFS(ctx, img)
			if err != nil {
				return nil, fmt.Errorf("publish %s: %w", v, err)
			}
			ename := EROFSName(v, arch)
			e, err := publishFile(outDir, ename, ".erofs", throttle(opts.Progress, v, "pack", ename), func(w io.Writer) error {
				f, err := os.Open(p)
				if err != nil {
					return err
				}
				defer f.Close()
				_, err = io.Copy(w, f)
				return err
			})
			if err != nil {
				return nil, fmt.Errorf("publish %s's erofs file: %w", v, err)
			}
			m.Artifacts[ename] = e
			res.Written = append(res.Written, ename)
		}
	}
	if err := m.Check(); err != nil {
		return nil, err
	}
	b, err := m.Encode()
	if err != nil {
		return nil, err
	}
	if err := writeAtomic(filepath.Join(outDir, ManifestFile), b); err != nil {
		return nil, fmt.Errorf("write the mirror's manifest: %w", err)
	}
	if old != nil {
		removeReplaced(outDir, old, m)
	}
	return res, nil
}

func isZeroConfig(c store.Config) bool {
	return len(c.Env) == 0 && c.WorkingDir == "" && c.User == "" && len(c.Entrypoint) == 0 && len(c.Cmd) == 0
}

// readManifestFile reads the manifest a folder holds already, nil when
// there is none.
func readManifestFile(dir string) (*Manifest, error) {
	p := filepath.Join(dir, ManifestFile)
	b, err := readLimited(p, MaxManifestSize)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	m, err := ParseManifest(b)
	if err != nil {
		return nil, fmt.Errorf("%s is there and is not a manifest airlock can add to (remove it, or publish into another folder): %w", p, err)
	}
	return m, nil
}

// publishArchive writes img's root tree archive into dir: the blob it
// was downloaded as, when the cache has it whole, else a new archive.
func publishArchive(ctx context.Context, cache *store.Cache, dir string, img store.Image, name string, progress func(done, total int64)) (Artifact, []string, error) {
	if img.Kind == "download" && len(img.Blobs) > 0 {
		if p, err := cache.BlobPath(img.Blobs[0]); err == nil {
			a, err := publishFile(dir, name, ".tar.zst", progress, func(w io.Writer) error {
				f, err := os.Open(p)
				if err != nil {
					return err
				}
				defer f.Close()
				_, err = io.Copy(w, f)
				return err
			})
			if err == nil && "sha256:"+a.SHA256 == img.Blobs[0] {
				return a, nil, nil
			}
			if err == nil {
				os.Remove(filepath.Join(dir, a.URL))
			}
			// No blob, or a damaged one: archive the tree instead.
		}
	}
	var st archiveStats
	a, err := publishFile(dir, name, ".tar.zst", progress, func(w io.Writer) error {
		var err error
		st, err = writeArchive(ctx, w, img.RootFS)
		return err
	})
	return a, st.Skipped, err
}

// publishFile writes an artifact with write into dir, named after name
// and the first hex digits of its sha256 (so that a cache between the
// mirror and its users never serves an old file under a new manifest),
// and returns it with a relative URL.
func publishFile(dir, name, ext string, progress func(done, total int64), write func(io.Writer) error) (Artifact, error) {
	tmp, err := os.CreateTemp(dir, "."+name+".*.tmp")
	if err != nil {
		return Artifact{}, err
	}
	defer os.Remove(tmp.Name())
	cw := &countingWriter{h: sha256.New(), progress: progress}
	if err := write(io.MultiWriter(tmp, cw)); err != nil {
		tmp.Close()
		return Artifact{}, err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return Artifact{}, err
	}
	if err := tmp.Close(); err != nil {
		return Artifact{}, err
	}
	sum := hex.EncodeToString(cw.h.Sum(nil))
	file := name + "-" + sum[:12] + ext
	if err := os.Rename(tmp.Name(), filepath.Join(dir, file)); err != nil {
		return Artifact{}, err
	}
	progress(cw.n, cw.n)
	return Artifact{URL: file, SHA256: sum, Size: cw.n}, nil
}

type countingWriter struct {
	h        hash.Hash
	n        int64
	progress func(done, total int64)
}

func (c *countingWriter) Write(p []byte) (int, error) {
	c.h.Write(p)
	c.n += int64(len(p))
	c.progress(c.n, 0)
	return len(p), nil
}

// removeReplaced removes the files of dir that the old manifest named
// and the new one does not: plain names in dir only.
func removeReplaced(dir string, old, cur *Manifest) {
	keep := map[string]bool{}
	for _, a := range cur.Artifacts {
		keep[a.URL] = true
	}
	for _, a := range old.Artifacts {
		if keep[a.URL] {
			continue
		}
		u, err := url.Parse(a.URL)
		if err != nil || u.Scheme != "" || u.Host != "" || u.Path != a.URL ||
			strings.ContainsRune(a.URL, '/') || !filepath.IsLocal(a.URL) || a.URL == ManifestFile {
			continue
		}
		os.Remove(filepath.Join(dir, a.URL))
	}
}

// writeAtomic writes a file readable by a web server, whole or not at
// all.
func writeAtomic(p string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), p)
}
