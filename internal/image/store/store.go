// Package store is airlock's local image cache: finished root trees keyed
// by a hash of what defines them, the names that point at them, and the
// blobs they were made from.
//
// Layout, under the cache directory (mode 0700: an image may hold setuid
// files owned by ids that mean something only inside a sandbox, which no
// host user may reach):
//
//	images/<hex>/image.json   what the image is (Meta); written last
//	images/<hex>/rootfs/      the root tree, never changed once here
//	images/<hex>/rootfs.erofs the same tree as an erofs file, made on demand
//	names/<hex of name>.json  a name ("standard", a registry reference) and its key
//	blobs/sha256/<hex>        layers and downloads, shared between images
//	chains/<hex>/             the tree of an image's first layers (chain.json,
//	                          rootfs/ of hard links into the images made from
//	                          it), for pulls of images that begin with them
//	locks/<hex>               flock files: one maker per key at a time
//	locks/use/<hex>           flock files: shared by each sandbox running
//	                          the image, taken whole by a removal
//	tmp/                      work in progress, renamed into images/ when whole
//
// An image is made in tmp/ and renamed into images/ once whole, so a make
// that dies half-way never shows as an image; tmp/ is swept of what no
// live maker holds. Two makers of one key take turns on its lock, and the
// second finds the first's image.
//
// A sandbox that runs an image holds its use lock (Use) until it stops:
// its overlay reads the image's tree, so Remove refuses an image in use
// and Prune leaves it.
package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

const (
	dirPerm  = 0o700
	filePerm = 0o600

	imagesDir = "images"
	namesDir  = "names"
	blobsDir  = "blobs"
	locksDir  = "locks"
	useDir    = "use"
	tmpDir    = "tmp"

	metaFile  = "image.json"
	rootfsDir = "rootfs"
	erofsFile = "rootfs.erofs"

	// maxMeta bounds what is read of an image.json or a name file.
	maxMeta = 1 << 20
)

// ErrNotFound is returned for a name or key the cache does not hold.
var ErrNotFound = errors.New("not in the image cache")

// ErrInUse is returned by Remove for an image a running sandbox uses.
var ErrInUse = errors.New("in use by a running sandbox")

// Cache is an image cache in one directory.
type Cache struct {
	dir    string
	owners Owners
}

// DefaultDir is the cache directory: $AIRLOCK_CACHE_DIR, or airlock's
// folder of the user's cache directory ($XDG_CACHE_HOME, else
// ~/.cache).
func DefaultDir() (string, error) {
	if d := os.Getenv("AIRLOCK_CACHE_DIR"); d != "" {
		return filepath.Abs(d)
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("find the image cache directory (set AIRLOCK_CACHE_DIR): %w", err)
	}
	return filepath.Join(base, "airlock"), nil
}

// Open opens the cache in dir, making its folders (mode 0700) when they
// are missing. Its trees are this process's own work (Local).
func Open(dir string) (*Cache, error) { return OpenWith(dir, Local()) }

// OpenWith is Open with the cache's trees made and handled by owners.
func OpenWith(dir string, owners Owners) (*Cache, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("open the image cache %s: %w", dir, err)
	}
	if err := os.MkdirAll(abs, dirPerm); err != nil {
		return nil, fmt.Errorf("make the image cache %s: %w", abs, err)
	}
	fi, err := os.Lstat(abs)
	if err != nil {
		return nil, fmt.Errorf("open the image cache %s: %w", abs, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("the image cache %s is not a directory", abs)
	}
	// A cache made by an older version, or by hand, may be open to
	// others: its images' setuid files must not be.
	if fi.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(abs, dirPerm); err != nil {
			return nil, fmt.Errorf("make the image cache %s private: %w", abs, err)
		}
	}
	for _, sub := range []string{imagesDir, namesDir, filepath.Join(blobsDir, "sha256"), chainsDir, locksDir, filepath.Join(locksDir, useDir), tmpDir} {
		if err := os.MkdirAll(filepath.Join(abs, sub), dirPerm); err != nil {
			return nil, fmt.Errorf("make the image cache's %s: %w", sub, err)
		}
	}
	return &Cache{dir: abs, owners: owners}, nil
}

// Dir is the cache's directory.
func (c *Cache) Dir() string { return c.dir }

// Owners is how the cache's trees are made and handled.
func (c *Cache) Owners() Owners { return c.owners }

// removeTree removes a tree of the cache, whoever its files belong to.
func (c *Cache) removeTree(dir string) error {
	return c.owners.RemoveTree(context.Background(), dir)
}

// BlobPath is where the blob with digest ("sha256:<hex>") is kept.
func (c *Cache) BlobPath(digest string) (string, error) {
	hexd, err := hexOf(digest)
	if err != nil {
		return "", err
	}
	return filepath.Join(c.dir, blobsDir, "sha256", hexd), nil
}

// TempDir makes a new work folder under the cache's tmp/, on the same
// filesystem as its images, for a download or a build to rename from.
// The caller removes it (RemoveTree) when it is done with it.
func (c *Cache) TempDir(pattern string) (string, error) {
	return os.MkdirTemp(filepath.Join(c.dir, tmpDir), pattern)
}

// Config is what an image says about how to run it, as an OCI image's
// config does.
type Config struct {
	Env        []string `json:"env,omitempty"`
	WorkingDir string   `json:"working_dir,omitempty"`
	User       string   `json:"user,omitempty"`
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
}

// Meta is what the cache knows of an image.
type Meta struct {
	// Key is "sha256:<hex>" of what defines the image: a variant's
	// package list, suite and architecture; an OCI manifest's digest; a
	// downloaded artifact's sha256.
	Key string `json:"key"`
	// Kind is how it was made: "variant", "oci" or "download".
	Kind string `json:"kind"`
	// Source says where from: a variant's suite and mirror, a
	// registry reference with its digest, a URL.
	Source string `json:"source,omitempty"`
	// Arch is the architecture, as Go names it.
	Arch string `json:"arch,omitempty"`
	// Size is the root tree's size in bytes, Files its entries.
	Size  int64 `json:"size"`
	Files int64 `json:"files"`
	// Created is when it was made here.
	Created time.Time `json:"created"`
	Config  Config    `json:"config"`
	// Blobs are the digests of the blobs it was made from, which Prune
	// keeps while the image is here.
	Blobs []string `json:"blobs,omitempty"`
	// Owners is the ID of the Owners that made its tree: whose its
	// files are on the host (none: an image made before it was kept).
	Owners string `json:"owners,omitempty"`
}

// Image is a finished image in the cache.
type Image struct {
	Meta
	// Names are the names that point at it.
	Names []string `json:"names,omitempty"`
	// Dir is its folder; RootFS its root tree.
	Dir    string `json:"dir"`
	RootFS string `json:"rootfs"`
}

// Key returns the key for the bytes that define an image.
func Key(definition []byte) string {
	sum := sha256.Sum256(definition)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// hexOf checks that key is "sha256:" and 64 lower-case hex digits, and
// returns the digits: a key becomes a file name, so nothing else may.
func hexOf(key string) (string, error) {
	h, ok := strings.CutPrefix(key, "sha256:")
	if !ok || len(h) != 64 {
		return "", fmt.Errorf("%q is not a sha256 digest (sha256:<64 hex digits>)", key)
	}
	for _, r := range h {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
			return "", fmt.Errorf("%q is not a sha256 digest (sha256:<64 hex digits>)", key)
		}
	}
	return h, nil
}

// Get returns the finished image with key.
func (c *Cache) Get(key string) (Image, error) {
	h, err := hexOf(key)
	if err != nil {
		return Image{}, err
	}
	img, err := c.read(h)
	if err != nil {
		return Image{}, err
	}
	img.Names = c.namesOf(key)
	return img, nil
}

// read reads the image in images/<h>, which is finished when its
// image.json is whole and names it and its root tree is there.
func (c *Cache) read(h string) (Image, error) {
	dir := filepath.Join(c.dir, imagesDir, h)
	b, err := readSmall(filepath.Join(dir, metaFile))
	if errors.Is(err, fs.ErrNotExist) {
		return Image{}, fmt.Errorf("image sha256:%s: %w", h, ErrNotFound)
	}
	if err != nil {
		return Image{}, fmt.Errorf("read image sha256:%s: %w", h, err)
	}
	var m Meta
	if err := json.Unmarshal(b, &m); err != nil || m.Key != "sha256:"+h {
		return Image{}, fmt.Errorf("image sha256:%s is damaged (its %s does not describe it): remove it with `airlock image rm sha256:%s` and get it again", h, metaFile, h)
	}
	root := filepath.Join(dir, rootfsDir)
	if fi, err := os.Lstat(root); err != nil || !fi.IsDir() {
		return Image{}, fmt.Errorf("image sha256:%s is damaged (its root tree is missing): remove it with `airlock image rm sha256:%s` and get it again", h, h)
	}
	return Image{Meta: m, Dir: dir, RootFS: root}, nil
}

// Make returns the image with key, making it first with fill when the
// cache does not hold it. fill gets a new, empty folder and must leave
// the image's root tree in its rootfs/ subfolder, returning what it
// knows of it (Kind, Source, Config, Blobs, Arch; Key, Size, Files and
// Created are set here). Only one maker of a key runs at a time, in
// this process or any other; one that waited finds the image made.
func (c *Cache) Make(ctx context.Context, key string, fill func(ctx context.Context, dir string) (Meta, error)) (Image, error) {
	h, err := hexOf(key)
	if err != nil {
		return Image{}, err
	}
	if img, err := c.Get(key); err == nil {
		return img, nil
	}
	unlock, err := c.lock(ctx, h)
	if err != nil {
		return Image{}, err
	}
	defer unlock()
	if img, err := c.Get(key); err == nil {
		return img, nil
	}
	final := filepath.Join(c.dir, imagesDir, h)
	// What is there is not a finished image (a folder left by hand, or
	// damaged): it goes, under the lock.
	if _, err := os.Lstat(final); err == nil {
		if err := c.removeTree(final); err != nil {
			return Image{}, fmt.Errorf("remove the damaged image sha256:%s: %w", h, err)
		}
	}
	work, err := c.TempDir(h[:12] + ".*")
	if err != nil {
		return Image{}, fmt.Errorf("make a work folder in the image cache: %w", err)
	}
	defer c.removeTree(work)
	m, err := fill(ctx, work)
	if err != nil {
		return Image{}, err
	}
	if err := ctx.Err(); err != nil {
		return Image{}, err
	}
	root := filepath.Join(work, rootfsDir)
	if fi, err := os.Lstat(root); err != nil || !fi.IsDir() {
		return Image{}, fmt.Errorf("making image %s left no root tree", key)
	}
	m.Key = key
	m.Created = time.Now().UTC()
	m.Owners = c.owners.ID()
	if m.Size, m.Files, err = c.owners.Usage(ctx, root); err != nil {
		return Image{}, fmt.Errorf("measure image %s: %w", key, err)
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return Image{}, err
	}
	if err := os.WriteFile(filepath.Join(work, metaFile), b, filePerm); err != nil {
		return Image{}, fmt.Errorf("write image %s's %s: %w", key, metaFile, err)
	}
	if err := os.Rename(work, final); err != nil {
		return Image{}, fmt.Errorf("put image %s in place: %w", key, err)
	}
	if err := os.Chmod(final, dirPerm); err != nil {
		return Image{}, err
	}
	return c.Get(key)
}

// nameFile is what names/<hex of name>.json holds.
type nameFile struct {
	Name    string    `json:"name"`
	Key     string    `json:"key"`
	Updated time.Time `json:"updated"`
}

func (c *Cache) namePath(name string) string {
	sum := sha256.Sum256([]byte(name))
	return filepath.Join(c.dir, namesDir, hex.EncodeToString(sum[:])+".json")
}

// Tag points name at the image with key, in place of what it pointed at.
func (c *Cache) Tag(name, key string) error {
	if name == "" {
		return errors.New("an image name may not be empty")
	}
	if _, err := hexOf(key); err != nil {
		return err
	}
	b, err := json.Marshal(nameFile{Name: name, Key: key, Updated: time.Now().UTC()})
	if err != nil {
		return err
	}
	p := c.namePath(name)
	tmp, err := os.CreateTemp(filepath.Dir(p), ".name.*")
	if err != nil {
		return fmt.Errorf("name image %s %q: %w", key, name, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("name image %s %q: %w", key, name, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("name image %s %q: %w", key, name, err)
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		return fmt.Errorf("name image %s %q: %w", key, name, err)
	}
	return nil
}

// readName returns the key name points at.
func (c *Cache) readName(p string) (nameFile, error) {
	b, err := readSmall(p)
	if err != nil {
		return nameFile{}, err
	}
	var n nameFile
	if err := json.Unmarshal(b, &n); err != nil {
		return nameFile{}, fmt.Errorf("%s is damaged: %w", p, err)
	}
	if _, err := hexOf(n.Key); err != nil {
		return nameFile{}, fmt.Errorf("%s is damaged: %w", p, err)
	}
	return n, nil
}

// Lookup returns the image name points at: a name given to Tag, or a
// key itself.
func (c *Cache) Lookup(name string) (Image, error) {
	if _, err := hexOf(name); err == nil {
		return c.Get(name)
	}
	n, err := c.readName(c.namePath(name))
	if errors.Is(err, fs.ErrNotExist) {
		return Image{}, fmt.Errorf("image %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return Image{}, err
	}
	if n.Name != name {
		return Image{}, fmt.Errorf("image %q: %w", name, ErrNotFound)
	}
	return c.Get(n.Key)
}

// names returns every name file's content.
func (c *Cache) names() ([]nameFile, error) {
	ents, err := os.ReadDir(filepath.Join(c.dir, namesDir))
	if err != nil {
		return nil, fmt.Errorf("read the image cache's names: %w", err)
	}
	var out []nameFile
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		n, err := c.readName(filepath.Join(c.dir, namesDir, e.Name()))
		if err != nil {
			continue
		}
		out = append(out, n)
	}
	return out, nil
}

func (c *Cache) namesOf(key string) []string {
	all, _ := c.names()
	var out []string
	for _, n := range all {
		if n.Key == key {
			out = append(out, n.Name)
		}
	}
	slices.Sort(out)
	return out
}

// List returns every finished image, newest first.
func (c *Cache) List() ([]Image, error) {
	ents, err := os.ReadDir(filepath.Join(c.dir, imagesDir))
	if err != nil {
		return nil, fmt.Errorf("read the image cache: %w", err)
	}
	names, err := c.names()
	if err != nil {
		return nil, err
	}
	var out []Image
	for _, e := range ents {
		if _, err := hexOf("sha256:" + e.Name()); err != nil {
			continue
		}
		img, err := c.read(e.Name())
		if err != nil {
			continue
		}
		for _, n := range names {
			if n.Key == img.Key {
				img.Names = append(img.Names, n.Name)
			}
		}
		slices.Sort(img.Names)
		out = append(out, img)
	}
	slices.SortFunc(out, func(a, b Image) int { return b.Created.Compare(a.Created) })
	return out, nil
}

// Remove removes a name, or an image by its key with every name that
// points at it; an image whose last name goes is removed too. It
// returns the keys of the images it removed. An image that a running
// sandbox uses (see Use) is not removed, nor are its names: the error
// wraps ErrInUse.
func (c *Cache) Remove(ctx context.Context, nameOrKey string) ([]string, error) {
	key := nameOrKey
	var names []string
	if _, err := hexOf(nameOrKey); err != nil {
		n, err := c.readName(c.namePath(nameOrKey))
		if errors.Is(err, fs.ErrNotExist) || err == nil && n.Name != nameOrKey {
			return nil, fmt.Errorf("image %q: %w (see `airlock image list`)", nameOrKey, ErrNotFound)
		}
		if err != nil {
			return nil, err
		}
		if slices.ContainsFunc(c.namesOf(n.Key), func(o string) bool { return o != nameOrKey }) {
			// Another name keeps the image.
			if err := os.Remove(c.namePath(nameOrKey)); err != nil {
				return nil, fmt.Errorf("remove image name %q: %w", nameOrKey, err)
			}
			return nil, nil
		}
		key, names = n.Key, []string{nameOrKey}
	} else {
		names = c.namesOf(key)
	}
	h, _ := hexOf(key)
	dir := filepath.Join(c.dir, imagesDir, h)
	removeNames := func() error {
		for _, n := range names {
			if err := os.Remove(c.namePath(n)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("remove image name %q: %w", n, err)
			}
		}
		return nil
	}
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := removeNames(); err != nil {
			return nil, err
		}
		if key == nameOrKey {
			return nil, fmt.Errorf("image %s: %w (see `airlock image list`)", key, ErrNotFound)
		}
		return nil, nil
	}
	release, err := c.claim(h)
	if errors.Is(err, ErrInUse) {
		what := key
		if key != nameOrKey {
			what = fmt.Sprintf("%q (%s)", nameOrKey, key)
		}
		return nil, fmt.Errorf("image %s is %w; stop it first", what, err)
	}
	if err != nil {
		return nil, err
	}
	defer release()
	unlock, err := c.lock(ctx, h)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := removeNames(); err != nil {
		return nil, err
	}
	if err := c.removeTree(dir); err != nil {
		return nil, fmt.Errorf("remove image %s: %w", key, err)
	}
	return []string{key}, nil
}

// Use marks the image with key as used by a running sandbox until
// release is called, or the process ends: Remove refuses it and Prune
// leaves it meanwhile. Any number of sandboxes use an image at once. It
// waits while a removal of the image runs, and returns an error wrapping
// ErrNotFound when the cache does not hold the image (any more). The
// lock's descriptor is closed on exec, so no process a sandbox starts
// holds it.
func (c *Cache) Use(ctx context.Context, key string) (release func(), err error) {
	h, err := hexOf(key)
	if err != nil {
		return nil, err
	}
	release, err = c.share(ctx, h)
	if err != nil {
		return nil, err
	}
	if _, err := c.read(h); err != nil {
		release()
		// The lock file of an image that is not here goes, unless
		// another holds it.
		if r, cerr := c.claim(h); cerr == nil {
			r()
		}
		return nil, err
	}
	return release, nil
}

// InUse reports whether a running sandbox uses the image with key.
func (c *Cache) InUse(key string) (bool, error) {
	h, err := hexOf(key)
	if err != nil {
		return false, err
	}
	release, err := c.claim(h)
	if errors.Is(err, ErrInUse) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	release()
	return false, nil
}

// PruneReport is what Prune removed.
type PruneReport struct {
	Images []string `json:"images"`
	Blobs  []string `json:"blobs"`
	// Chains counts the chains of layers removed; what they free is
	// not in Freed, since they share their files with images.
	Chains int   `json:"chains"`
	Temp   int   `json:"temp"`
	Freed  int64 `json:"freed"`
}

// Prune removes images that no name points at and no running sandbox
// uses, blobs that no image left was made from, chains of layers that
// no image left begins with, and work folders no live maker holds.
func (c *Cache) Prune(ctx context.Context) (PruneReport, error) {
	var r PruneReport
	imgs, err := c.List()
	if err != nil {
		return r, err
	}
	keep := map[string]bool{}
	var kept []Image
	for _, img := range imgs {
		if len(img.Names) == 0 {
			size := img.Size
			removed, err := c.Remove(ctx, img.Key)
			switch {
			case errors.Is(err, ErrInUse):
				// A running sandbox's: it stays, with its blobs.
			case err != nil:
				return r, err
			case len(removed) > 0:
				r.Images = append(r.Images, img.Key)
				r.Freed += size
				continue
			default:
				continue
			}
		}
		kept = append(kept, img)
		for _, b := range img.Blobs {
			keep[b] = true
		}
	}
	if r.Chains, err = c.pruneChains(kept); err != nil {
		return r, err
	}
	blobs := filepath.Join(c.dir, blobsDir, "sha256")
	ents, err := os.ReadDir(blobs)
	if err != nil {
		return r, fmt.Errorf("read the image cache's blobs: %w", err)
	}
	for _, e := range ents {
		d := "sha256:" + e.Name()
		if keep[d] {
			continue
		}
		if _, err := hexOf(d); err != nil {
			// A partial download (<hex>.part) is removed only when
			// nothing is downloading it.
			h, _, _ := strings.Cut(e.Name(), ".")
			unlock, err := c.tryLock(h)
			if err != nil {
				continue
			}
			err = os.Remove(filepath.Join(blobs, e.Name()))
			unlock()
			if err == nil {
				r.Temp++
			}
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		if err := os.Remove(filepath.Join(blobs, e.Name())); err == nil {
			r.Blobs = append(r.Blobs, d)
			r.Freed += fi.Size()
		}
	}
	n, err := c.sweepTemp()
	r.Temp += n
	return r, err
}

// sweepTemp removes the work folders under tmp/ whose maker is gone: a
// folder's key lock is free (its first 12 hex digits name the key).
func (c *Cache) sweepTemp() (int, error) {
	dir := filepath.Join(c.dir, tmpDir)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("read the image cache's work folders: %w", err)
	}
	n := 0
	for _, e := range ents {
		prefix, _, _ := strings.Cut(e.Name(), ".")
		held, err := c.heldPrefix(prefix)
		if err != nil || held {
			continue
		}
		fi, err := e.Info()
		// A folder made a moment ago may not have its lock yet.
		if err != nil || time.Since(fi.ModTime()) < time.Minute {
			continue
		}
		if c.removeTree(filepath.Join(dir, e.Name())) == nil {
			n++
		}
	}
	return n, nil
}

// heldPrefix reports whether a lock whose name starts with prefix is
// held now.
func (c *Cache) heldPrefix(prefix string) (bool, error) {
	if prefix == "" {
		return false, nil
	}
	ents, err := os.ReadDir(filepath.Join(c.dir, locksDir))
	if err != nil {
		return false, err
	}
	for _, e := range ents {
		if e.IsDir() || !strings.HasPrefix(e.Name(), prefix) {
			continue
		}
		unlock, err := c.tryLock(e.Name())
		if err != nil {
			return true, nil
		}
		unlock()
	}
	return false, nil
}

// Lock takes the cache's lock for key (a digest): a downloader of a blob
// takes it so that two do not fetch one blob at once. It waits until the
// lock is free or ctx ends.
func (c *Cache) Lock(ctx context.Context, key string) (unlock func(), err error) {
	h, err := hexOf(key)
	if err != nil {
		return nil, err
	}
	return c.lock(ctx, h)
}

// EROFS returns the path of the image's root tree packed as an erofs
// file, which the vm level attaches as a disk, making it with
// mkfs.erofs the first time.
func (c *Cache) EROFS(ctx context.Context, img Image) (string, error) {
	h, err := hexOf(img.Key)
	if err != nil {
		return "", err
	}
	p := filepath.Join(img.Dir, erofsFile)
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	unlock, err := c.lock(ctx, h)
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	if err := c.makeEROFS(ctx, img.RootFS, p); err != nil {
		return "", fmt.Errorf("pack image %s as erofs: %w", img.Key, err)
	}
	return p, nil
}

// readSmall reads a file of at most maxMeta bytes, not through a
// symbolic link.
func readSmall(p string) ([]byte, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|oNoFollow, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() || fi.Size() > maxMeta {
		return nil, fmt.Errorf("%s is not a regular file of at most %d bytes", p, maxMeta)
	}
	b := make([]byte, fi.Size())
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, err
	}
	return b, nil
}

// Usage returns the bytes (as du counts them: blocks in use) and the
// entries under root, not following symbolic links.
func Usage(root string) (size, files int64, err error) {
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		files++
		size += diskUsage(fi)
		return nil
	})
	return size, files, err
}

// RemoveTree removes dir and everything under it, making read-only
// folders writable first, as an image's may be.
func RemoveTree(dir string) error {
	if err := os.RemoveAll(dir); err == nil {
		return nil
	}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, dirPerm)
		}
		return nil
	})
	return os.RemoveAll(dir)
}

// Progress is a report of work on an image, for a progress bar or an
// image.progress notification.
type Progress struct {
	// Image is the image's name as asked for.
	Image string `json:"image"`
	// Step is what is being done: "resolve", "download", "unpack",
	// "build", "verify", "pack" or "done".
	Step string `json:"step"`
	// Item is what the step works on: a layer's digest, a file, a
	// package.
	Item string `json:"item,omitempty"`
	// Done of Total bytes, or of items when Unit is "items"; Total is
	// 0 when not known.
	Done  int64 `json:"done"`
	Total int64 `json:"total,omitempty"`
	// Unit is "" for bytes, "items" for a count (packages).
	Unit string `json:"unit,omitempty"`
}

// ProgressFunc receives Progress reports. It is called from the
// goroutine doing the work, maybe from several at once, and must not
// block.
type ProgressFunc func(Progress)
