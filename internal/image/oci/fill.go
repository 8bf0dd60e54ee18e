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
// store.Cache.Make for the image's key.
func (s *Source) Fill(ctx context.Context, dir string, progress store.ProgressFunc) (store.Meta, error) {
	if progress == nil {
		progress = func(store.Progress) {}
	}
	rootfs := filepath.Join(dir, "rootfs")
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		return store.Meta{}, err
	}
	u, err := untar.New(rootfs, untar.Options{Limits: s.opts.limits(), KeepOwners: keepOwners()})
	if err != nil {
		return store.Meta{}, err
	}
	defer u.Close()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	n := len(s.layers)
	ready := make([]chan struct{}, n)
	for i := range ready {
		ready[i] = make(chan struct{})
	}
	// Workers take the layers in order, so that the first ones, which
	// are applied first, come first.
	jobs := make(chan int, n)
	for i := range n {
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
	for range min(workers, n) {
		wg.Go(func() {
			for i := range jobs {
				if err := s.fetch(ctx, s.layers[i], progress); err != nil {
					errOnce.Do(func() { dlErr = err; cancel() })
					return
				}
				close(ready[i])
			}
		})
	}
	applyErr := s.applyAll(ctx, u, ready, progress)
	cancel()
	wg.Wait()
	if dlErr != nil {
		return store.Meta{}, dlErr
	}
	if applyErr != nil {
		return store.Meta{}, applyErr
	}
	if st := u.Stats(); st.SkippedCount > 0 {
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

// applyAll applies each layer once it is downloaded, in order.
func (s *Source) applyAll(ctx context.Context, u *untar.Unpacker, ready []chan struct{}, progress store.ProgressFunc) error {
	for i, l := range s.layers {
		select {
		case <-ready[i]:
		case <-ctx.Done():
			return ctx.Err()
		}
		if err := s.apply(ctx, u, l, progress); err != nil {
			return fmt.Errorf("unpack layer %d of %s (%s): %w", i+1, s.Name(), l.digest, err)
		}
	}
	return nil
}

// apply applies one layer from its blob, checking the blob's digest as
// it reads it.
func (s *Source) apply(ctx context.Context, u *untar.Unpacker, l layerSource, progress store.ProgressFunc) error {
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
	h := sha256.New()
	m := newMeter(progress, store.Progress{Image: s.asked, Step: "unpack", Item: l.digest.String(), Total: fi.Size()})
	r := io.TeeReader(f, io.MultiWriter(h, m))
	if err := u.Apply(ctx, r); err != nil {
		return err
	}
	// What follows the tar's end is part of the blob too.
	if _, err := io.Copy(io.Discard, r); err != nil {
		return err
	}
	m.finish()
	if !sameDigest(h, l.digest) {
		os.Remove(p)
		return fmt.Errorf("its blob in the image cache changed while it was read; it was removed: pull again")
	}
	return nil
}

func sameDigest(h hash.Hash, d v1.Hash) bool {
	return hex.EncodeToString(h.Sum(nil)) == d.Hex
}

// fetch puts the layer's blob in the cache, unless a whole one is there
// already. One process downloads a blob at a time (the cache's lock for
// its digest); the download goes to <blob>.part and is renamed into
// place only once its digest is right, so a partial one is never used.
func (s *Source) fetch(ctx context.Context, l layerSource, progress store.ProgressFunc) error {
	digest := l.digest.String()
	p, err := s.cache.BlobPath(digest)
	if err != nil {
		return err
	}
	report := store.Progress{Image: s.asked, Step: "download", Item: digest, Total: max(l.size, 0)}
	unlock, err := s.cache.Lock(ctx, digest)
	if err != nil {
		return err
	}
	defer unlock()
	ok, err := s.verify(ctx, p, l, progress)
	if err != nil {
		return err
	}
	if ok {
		report.Done = report.Total
		progress(report)
		return nil
	}
	rc, err := l.open()
	if err != nil {
		return s.downloadError(l, err)
	}
	defer rc.Close()
	part := p + ".part"
	f, err := os.OpenFile(part, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("store layer %s: %w", digest, err)
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
		return s.downloadError(l, err)
	}
	switch {
	case n > limit && l.size >= 0:
		return fmt.Errorf("download layer %s: the registry sent more than the %d bytes its manifest gives", digest, l.size)
	case n > limit:
		return &untar.LimitError{What: "bytes", Limit: s.opts.limits().Bytes}
	case l.size >= 0 && n != l.size:
		return fmt.Errorf("download layer %s: the registry sent %d bytes, its manifest gives %d", digest, n, l.size)
	case !sameDigest(h, l.digest):
		return fmt.Errorf("download layer %s: what the registry sent has another digest, sha256:%x; nothing was kept", digest, h.Sum(nil))
	}
	m.finish()
	if err := os.Rename(part, p); err != nil {
		return fmt.Errorf("store layer %s: %w", digest, err)
	}
	return nil
}

// verify reports whether the cache holds the blob whole: of the size the
// manifest gives and with its digest. A damaged one is removed, to be
// downloaded again.
func (s *Source) verify(ctx context.Context, p string, l layerSource, progress store.ProgressFunc) (bool, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		// A link or worse where a blob should be: it goes.
		os.Remove(p)
		return false, nil
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return false, err
	}
	if !fi.Mode().IsRegular() || l.size >= 0 && fi.Size() != l.size {
		os.Remove(p)
		return false, nil
	}
	h := sha256.New()
	m := newMeter(progress, store.Progress{Image: s.asked, Step: "verify", Item: l.digest.String(), Total: fi.Size()})
	if _, err := io.Copy(io.MultiWriter(h, m), &ctxReader{ctx: ctx, r: f}); err != nil {
		return false, err
	}
	if !sameDigest(h, l.digest) {
		slog.Warn("image cache: a damaged blob was removed, to be downloaded again", "blob", l.digest.String())
		os.Remove(p)
		return false, nil
	}
	return true, nil
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
