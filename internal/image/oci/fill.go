package oci

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/airlock-sandbox/airlock/internal/image/store"
	"github.com/airlock-sandbox/airlock/internal/image/untar"
)

// layerSource is one layer: the blob it is kept as, and how to read it.
type layerSource struct {
	// digest is the sha256 of the blob's bytes: a registry's (or
	// layout's) compressed layer, or a docker save tarball's tar.
	digest v1.Hash
	// size is the blob's length, or -1 when no manifest gives it.
	size int64
	open func() (io.ReadCloser, error)
}

// progressEvery is how often a layer's progress is reported.
const progressEvery = 100 * time.Millisecond

// Fill downloads the image's layers into the cache's blobs, several at
// once, and applies them in order to dir/rootfs: it is the fill of
// store.Cache.Make for the image's key. It starts from the longest
// chain of the image's first layers the cache holds (a copy of hard
// links), and applies only the layers after it, keeping the chain of
// each layer it applies for the next pull that begins with them. A
// cached blob is checked against its digest as it is applied; a damaged
// one is removed, downloaded again, and the tree made again.
func (s *Source) Fill(ctx context.Context, dir string, progress store.ProgressFunc) (store.Meta, error) {
	if progress == nil {
		progress = func(store.Progress) {}
	}
	for attempt := 1; ; attempt++ {
		err := s.fill(ctx, dir, progress)
		var dmg *damagedBlobError
		if !errors.As(err, &dmg) || attempt == 3 {
			if err != nil {
				return store.Meta{}, err
			}
			break
		}
		slog.Warn("image cache: a damaged blob was removed, to be downloaded again", "image", s.Name(), "blob", dmg.digest)
		progress(store.Progress{Image: s.asked, Step: "verify", Item: dmg.Error()})
		if err := s.cache.Owners().RemoveTree(ctx, filepath.Join(dir, "rootfs")); err != nil {
			return store.Meta{}, fmt.Errorf("start the unpack of %s again: %w", s.Name(), err)
		}
	}
	if st := s.stats; st.SkippedCount > 0 {
		slog.Info("image: device nodes in its layers were not made", "image", s.Name(), "count", st.SkippedCount, "first", st.Skipped)
	}
	source := s.Name()
	if s.digestName != "" {
		source = s.digestName
	} else {
		source += "@" + s.key
	}
	return store.Meta{Kind: "oci", Source: source, Arch: s.arch, Config: s.config, Blobs: s.Layers()}, nil
}

// damagedBlobError is a cached blob found damaged while it was applied:
// it was removed.
type damagedBlobError struct{ digest string }

func (e *damagedBlobError) Error() string {
	return fmt.Sprintf("the cached blob of layer %s is damaged (its digest is not that): it was removed, to be downloaded again", e.digest)
}

// chainIDs are the ids of the chains of the image's first 1, 2, ... n
// layers, as the cache's Owners apply them.
func (s *Source) chainIDs() []string {
	owners := s.cache.Owners().ID()
	digests := s.Layers()
	ids := make([]string, len(digests))
	for k := range digests {
		var b strings.Builder
		fmt.Fprintf(&b, "airlock oci layer chain 2\nowners %s\n", owners)
		for _, d := range digests[:k+1] {
			b.WriteString(d)
			b.WriteByte('\n')
		}
		ids[k] = store.Key([]byte(b.String()))
	}
	return ids
}

// fromChain makes rootfs a copy of the longest chain of the image's
// first layers that the cache holds, and returns how many layers it
// holds (0 when none: rootfs is made empty) and what they held.
func (s *Source) fromChain(ctx context.Context, rootfs string, ids []string, progress store.ProgressFunc) (int, untar.Stats, error) {
	for k := len(ids); k >= 1; k-- {
		ch, release, err := s.cache.UseChain(ctx, ids[k-1])
		if err != nil {
			if cerr := ctx.Err(); cerr != nil {
				return 0, untar.Stats{}, cerr
			}
			if !errors.Is(err, store.ErrNotFound) {
				slog.Warn("image cache: a chain of layers was not used", "image", s.Name(), "chain", ids[k-1], "err", err)
			}
			continue
		}
		err = s.cache.Owners().LinkTree(ctx, ch.RootFS, rootfs)
		release()
		if err != nil {
			if cerr := ctx.Err(); cerr != nil {
				return 0, untar.Stats{}, cerr
			}
			slog.Warn("image cache: a chain of layers could not be copied", "image", s.Name(), "chain", ids[k-1], "err", err)
			if err := s.cache.Owners().RemoveTree(ctx, rootfs); err != nil {
				return 0, untar.Stats{}, err
			}
			continue
		}
		for _, l := range s.layers[:k] {
			size := max(l.size, 0)
			progress(store.Progress{Image: s.asked, Step: "unpack", Item: l.digest.String(), Done: size, Total: size})
		}
		return k, untar.Stats{Entries: ch.Entries, Bytes: ch.Bytes, Skipped: ch.Skipped, SkippedCount: ch.SkippedCount}, nil
	}
	return 0, untar.Stats{}, os.Mkdir(rootfs, 0o755)
}

// fill is one attempt of Fill.
func (s *Source) fill(ctx context.Context, dir string, progress store.ProgressFunc) error {
	rootfs := filepath.Join(dir, "rootfs")
	ids := s.chainIDs()
	first, base, err := s.fromChain(ctx, rootfs, ids, progress)
	if err != nil {
		return err
	}
	u, err := s.cache.Owners().Unpacker(ctx, rootfs, untar.Options{Limits: s.opts.limits(), Base: base})
	if err != nil {
		return err
	}
	defer u.Close()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	n := len(s.layers)
	ready := make([]chan struct{}, n)
	for i := range ready {
		ready[i] = make(chan struct{})
	}
	// verified[i] says whether layer i's blob was checked against its
	// digest as it was downloaded; a cached one is checked as it is
	// applied. Written before ready[i] is closed.
	verified := make([]bool, n)
	// Workers take the layers in order, so that the first ones, which
	// are applied first, come first.
	jobs := make(chan int, n)
	for i := first; i < n; i++ {
		jobs <- i
	}
	close(jobs)
	var (
		wg      sync.WaitGroup
		errOnce sync.Once
		dlErr   error
	)
	workers := s.opts.Parallel
	if workers <= 0 {
		workers = DefaultParallel
	}
	for range min(workers, n-first) {
		wg.Go(func() {
			for i := range jobs {
				ok, err := s.fetch(ctx, s.layers[i], progress)
				if err != nil {
					errOnce.Do(func() { dlErr = err; cancel() })
					return
				}
				verified[i] = ok
				close(ready[i])
			}
		})
	}
	applyErr := s.applyAll(ctx, u, first, ids, ready, verified, progress)
	cancel()
	wg.Wait()
	if dlErr != nil {
		return dlErr
	}
	if applyErr != nil {
		return applyErr
	}
	s.stats = u.Stats()
	return nil
}

// applyAll applies each layer from first on once it is downloaded, in
// order, and keeps the chain each one but the last ends.
func (s *Source) applyAll(ctx context.Context, u store.Unpacker, first int, ids []string, ready []chan struct{}, verified []bool, progress store.ProgressFunc) error {
	for i := first; i < len(s.layers); i++ {
		l := s.layers[i]
		select {
		case <-ready[i]:
		case <-ctx.Done():
			return ctx.Err()
		}
		if err := s.apply(ctx, u, l, verified[i], progress); err != nil {
			if _, ok := errors.AsType[*damagedBlobError](err); ok {
				return err
			}
			return fmt.Errorf("unpack layer %d of %s (%s): %w", i+1, s.Name(), l.digest, err)
		}
		if i == len(s.layers)-1 {
			// The last chain is the image's own tree (see Pull).
			break
		}
		st := u.Stats()
		m := store.ChainMeta{ID: ids[i], Layers: s.Layers()[:i+1], Entries: st.Entries, Bytes: st.Bytes, Skipped: st.Skipped, SkippedCount: st.SkippedCount}
		if err := s.cache.SaveChain(ctx, m, u.Root()); err != nil {
			if cerr := ctx.Err(); cerr != nil {
				return cerr
			}
			// The pull goes on; the next one of these layers unpacks
			// them again.
			slog.Warn("image cache: a chain of layers was not kept", "image", s.Name(), "layers", i+1, "err", err)
		}
	}
	return nil
}

// apply applies one layer from its blob. A blob this pull did not
// download is checked against its digest as it is read: when it is
// damaged, it is removed and a *damagedBlobError returned, even when
// the damage made the layer fail first.
func (s *Source) apply(ctx context.Context, u store.Unpacker, l layerSource, verified bool, progress store.ProgressFunc) error {
	p, err := s.cache.BlobPath(l.digest.String())
	if err != nil {
		return err
	}
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	m := newMeter(progress, store.Progress{Image: s.asked, Step: "unpack", Item: l.digest.String(), Total: fi.Size()})
	if verified {
		if err := u.Apply(ctx, io.TeeReader(f, m)); err != nil {
			return err
		}
		m.finish()
		return nil
	}
	h := sha256.New()
	r := io.TeeReader(f, io.MultiWriter(h, m))
	applyErr := u.Apply(ctx, r)
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	// What follows the tar's end, or the point where the layer failed,
	// is part of the blob too.
	if _, err := io.Copy(io.Discard, &ctxReader{ctx: ctx, r: r}); err != nil {
		return err
	}
	if !sameDigest(h, l.digest) {
		if err := s.dropBlob(ctx, f, p, l); err != nil {
			return err
		}
		return &damagedBlobError{digest: l.digest.String()}
	}
	if applyErr != nil {
		return applyErr
	}
	m.finish()
	return nil
}

// dropBlob removes the damaged blob at p that f has open, unless p is
// another file by now (one downloaded again meanwhile).
func (s *Source) dropBlob(ctx context.Context, f *os.File, p string, l layerSource) error {
	unlock, err := s.cache.Lock(ctx, l.digest.String())
	if err != nil {
		return err
	}
	defer unlock()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	pi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !os.SameFile(fi, pi) {
		return nil
	}
	if err := os.Remove(p); err != nil {
		return fmt.Errorf("remove the damaged blob of layer %s: %w", l.digest, err)
	}
	return nil
}

func sameDigest(h hash.Hash, d v1.Hash) bool {
	return hex.EncodeToString(h.Sum(nil)) == d.Hex
}

// fetch puts the layer's blob in the cache, unless one of its size is
// there already, and reports whether it checked the blob's digest (a
// cached one is checked as it is applied, which reads it anyway). One
// process downloads a blob at a time (the cache's lock for its
// digest); the download goes to <blob>.part and is renamed into place
// only once its digest is right, so a partial one is never used.
func (s *Source) fetch(ctx context.Context, l layerSource, progress store.ProgressFunc) (bool, error) {
	digest := l.digest.String()
	p, err := s.cache.BlobPath(digest)
	if err != nil {
		return false, err
	}
	report := store.Progress{Image: s.asked, Step: "download", Item: digest, Total: max(l.size, 0)}
	unlock, err := s.cache.Lock(ctx, digest)
	if err != nil {
		return false, err
	}
	defer unlock()
	if present(p, l) {
		report.Done = report.Total
		progress(report)
		return false, nil
	}
	rc, err := l.open()
	if err != nil {
		return false, s.downloadError(l, err)
	}
	defer rc.Close()
	part := p + ".part"
	f, err := os.OpenFile(part, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return false, fmt.Errorf("store layer %s: %w", digest, err)
	}
	defer os.Remove(part)
	limit := l.size
	if limit < 0 {
		limit = maxBlob(s.opts.limits())
	}
	h := sha256.New()
	m := newMeter(progress, report)
	n, err := io.Copy(io.MultiWriter(f, h, m), io.LimitReader(&ctxReader{ctx: ctx, r: rc}, limit+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return false, s.downloadError(l, err)
	}
	switch {
	case n > limit && l.size >= 0:
		return false, fmt.Errorf("download layer %s: the registry sent more than the %d bytes its manifest gives", digest, l.size)
	case n > limit:
		return false, &untar.LimitError{What: "bytes", Limit: s.opts.limits().Bytes}
	case l.size >= 0 && n != l.size:
		return false, fmt.Errorf("download layer %s: the registry sent %d bytes, its manifest gives %d", digest, n, l.size)
	case !sameDigest(h, l.digest):
		return false, fmt.Errorf("download layer %s: what the registry sent has another digest, sha256:%x; nothing was kept", digest, h.Sum(nil))
	}
	m.finish()
	if err := os.Rename(part, p); err != nil {
		return false, fmt.Errorf("store layer %s: %w", digest, err)
	}
	return true, nil
}

// present reports whether the cache holds a blob for the layer that may
// be whole: a regular file of the size the manifest gives. What else is
// there (a link, a file of another size) is removed, to be downloaded
// again.
func present(p string, l layerSource) bool {
	fi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return false
	}
	if err != nil || !fi.Mode().IsRegular() || l.size >= 0 && fi.Size() != l.size {
		os.Remove(p)
		return false
	}
	return true
}

func (s *Source) downloadError(l layerSource, err error) error {
	if s.ref.kind == kindRegistry {
		return fmt.Errorf("download layer %s: %w", l.digest, registryError(s.ref.reg, err))
	}
	return fmt.Errorf("read layer %s from %s: %w", l.digest, s.ref.path, err)
}

// meter reports the bytes written through it, at most every
// progressEvery.
type meter struct {
	fn   store.ProgressFunc
	p    store.Progress
	last time.Time
}

func newMeter(fn store.ProgressFunc, p store.Progress) *meter {
	m := &meter{fn: fn, p: p, last: time.Now()}
	fn(p)
	return m
}

func (m *meter) Write(b []byte) (int, error) {
	m.p.Done += int64(len(b))
	if now := time.Now(); now.Sub(m.last) >= progressEvery {
		m.last = now
		m.fn(m.p)
	}
	return len(b), nil
}

func (m *meter) finish() {
	if m.p.Total == 0 {
		m.p.Total = m.p.Done
	}
	m.fn(m.p)
}

// ctxReader stops reading once ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
