package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"
)

const (
	chainsDir = "chains"
	chainFile = "chain.json"
)

// ChainMeta describes a chain: the root tree that the first layers of
// an image make, applied in order. A pull that finds the chain of its
// first layers starts from a copy of it (LinkTree) and applies only the
// layers after them.
type ChainMeta struct {
	// ID is "sha256:<hex>" of the layers' digests, in order, and of how
	// they were applied (the maker's choice; see oci).
	ID string `json:"id"`
	// Layers are the digests of the layers, in order.
	Layers []string `json:"layers"`
	// Entries, Bytes and Skipped are what the layers held, charged to
	// the limits of the layers applied on top.
	Entries int64    `json:"entries"`
	Bytes   int64    `json:"bytes"`
	Skipped []string `json:"skipped,omitempty"`
	// SkippedCount counts the entries not made (device nodes).
	SkippedCount int64 `json:"skipped_count,omitempty"`
	// Image, when set, is the key of the image whose root tree is the
	// chain (all its layers): the chain has no tree of its own.
	Image   string    `json:"image,omitempty"`
	Created time.Time `json:"created"`
}

// Chain is a chain found in the cache, in use until released.
type Chain struct {
	ChainMeta
	// RootFS is its root tree, which must never be changed: it shares
	// its files with the images made from it.
	RootFS string
}

// chainDir is chains/<h>.
func (c *Cache) chainDir(h string) string { return filepath.Join(c.dir, chainsDir, h) }

// readChain reads the whole chain in chains/<h>.
func (c *Cache) readChain(h string) (ChainMeta, error) {
	b, err := readSmall(filepath.Join(c.chainDir(h), chainFile))
	if errors.Is(err, fs.ErrNotExist) {
		return ChainMeta{}, fmt.Errorf("chain sha256:%s: %w", h, ErrNotFound)
	}
	if err != nil {
		return ChainMeta{}, fmt.Errorf("read chain sha256:%s: %w", h, err)
	}
	var m ChainMeta
	if err := json.Unmarshal(b, &m); err != nil || m.ID != "sha256:"+h {
		return ChainMeta{}, fmt.Errorf("chain sha256:%s is damaged: its %s does not describe it", h, chainFile)
	}
	return m, nil
}

// UseChain returns the chain id, in use until release is called: Prune
// does not remove it (nor, for a chain that is an image's tree, the
// image) meanwhile. An error wrapping ErrNotFound says the cache does
// not hold it whole.
func (c *Cache) UseChain(ctx context.Context, id string) (ch Chain, release func(), err error) {
	h, err := hexOf(id)
	if err != nil {
		return Chain{}, nil, err
	}
	releaseChain, err := c.share(ctx, h)
	if err != nil {
		return Chain{}, nil, err
	}
	m, err := c.readChain(h)
	if err != nil {
		releaseChain()
		return Chain{}, nil, err
	}
	if m.Image == "" {
		root := filepath.Join(c.chainDir(h), rootfsDir)
		if fi, err := os.Lstat(root); err != nil || !fi.IsDir() {
			releaseChain()
			return Chain{}, nil, fmt.Errorf("chain %s has no root tree: %w", id, ErrNotFound)
		}
		return Chain{ChainMeta: m, RootFS: root}, releaseChain, nil
	}
	releaseImg, err := c.Use(ctx, m.Image)
	if err != nil {
		releaseChain()
		return Chain{}, nil, fmt.Errorf("chain %s: %w", id, err)
	}
	img, err := c.Get(m.Image)
	if err != nil {
		releaseImg()
		releaseChain()
		return Chain{}, nil, fmt.Errorf("chain %s: %w", id, err)
	}
	return Chain{ChainMeta: m, RootFS: img.RootFS}, func() { releaseImg(); releaseChain() }, nil
}

// SaveChain keeps the tree at root as the chain m describes, unless the
// cache has it: a copy made of hard links (LinkTree), so root's files
// must never change afterwards, nor the chain's. With m.Image set, root
// is ignored: the chain is that image's tree, which stays its own.
func (c *Cache) SaveChain(ctx context.Context, m ChainMeta, root string) error {
	h, err := hexOf(m.ID)
	if err != nil {
		return err
	}
	if m.Image != "" {
		if _, err := hexOf(m.Image); err != nil {
			return err
		}
	}
	if _, err := c.readChain(h); err == nil {
		return nil
	}
	unlock, err := c.lock(ctx, h)
	if err != nil {
		return err
	}
	defer unlock()
	if _, err := c.readChain(h); err == nil {
		return nil
	}
	final := c.chainDir(h)
	if err := os.MkdirAll(filepath.Dir(final), dirPerm); err != nil {
		return fmt.Errorf("make the image cache's %s: %w", chainsDir, err)
	}
	// What is there is not a whole chain (its chain.json is written
	// last): nobody uses it.
	if _, err := os.Lstat(final); err == nil {
		if err := c.removeTree(final); err != nil {
			return fmt.Errorf("remove the damaged chain %s: %w", m.ID, err)
		}
	}
	work, err := c.TempDir(h[:12] + ".*")
	if err != nil {
		return fmt.Errorf("make a work folder in the image cache: %w", err)
	}
	defer c.removeTree(work)
	if m.Image == "" {
		if err := c.owners.LinkTree(ctx, root, filepath.Join(work, rootfsDir)); err != nil {
			return fmt.Errorf("keep chain %s: %w", m.ID, err)
		}
	}
	m.Created = time.Now().UTC()
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(work, chainFile), b, filePerm); err != nil {
		return fmt.Errorf("write chain %s's %s: %w", m.ID, chainFile, err)
	}
	if err := os.Rename(work, final); err != nil {
		return fmt.Errorf("put chain %s in place: %w", m.ID, err)
	}
	return os.Chmod(final, dirPerm)
}

// pruneChains removes the chains that no image left needs: one whose
// layers begin no kept image's, one whose image is gone, and what is
// not a whole chain; a chain in use stays. It returns how many went.
func (c *Cache) pruneChains(kept []Image) (int, error) {
	dir := filepath.Join(c.dir, chainsDir)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read the image cache's chains: %w", err)
	}
	keys := map[string]bool{}
	for _, img := range kept {
		keys[img.Key] = true
	}
	n := 0
	for _, e := range ents {
		h := e.Name()
		if _, err := hexOf("sha256:" + h); err != nil {
			continue
		}
		m, err := c.readChain(h)
		if err == nil {
			if m.Image != "" && keys[m.Image] {
				continue
			}
			if m.Image == "" && slices.ContainsFunc(kept, func(img Image) bool {
				return len(img.Blobs) >= len(m.Layers) && slices.Equal(img.Blobs[:len(m.Layers)], m.Layers)
			}) {
				continue
			}
		}
		release, err := c.claim(h)
		if err != nil {
			// In use, or being made.
			continue
		}
		unlock, err := c.tryLock(h)
		if err != nil {
			release()
			continue
		}
		if c.removeTree(filepath.Join(dir, h)) == nil {
			n++
		}
		unlock()
		release()
	}
	return n, nil
}
