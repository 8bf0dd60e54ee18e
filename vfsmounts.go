package airlock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
	"github.com/airlock-sandbox/airlock/internal/boundary"
	"github.com/airlock-sandbox/airlock/internal/mounts"
	"github.com/airlock-sandbox/airlock/internal/vfsproto"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/vfs"
)

// sandboxVFS is a sandbox's programmable mounts, on the host: one
// provider for all of them, keyed by the paths the sandbox sees, with
// blocked paths, hooks and file events around it; and the targets the
// agent mounts, each a view of it.
type sandboxVFS struct {
	tree vfs.Provider
	// targets are the outermost mount targets, sorted.
	targets []string
	// watched are the providers whose changes from the host the
	// sandbox must see at once, by target.
	watched map[string]vfs.Watcher
	// reporting says which mounts' providers report every change the
	// sandbox does not make (those made from the config's memory
	// mounts), by target.
	reporting mounts.Flags
	// direct tells the paths of direct mounts served here, which no
	// hook sees and no event reports, as for a bound directory.
	direct mounts.Flags
	// emit reports a file event.
	emit func(Event)
	// overStream: the agent mounts them, and the host serves them over
	// its stream (startVFS); otherwise the boundary serves them.
	overStream bool
	// owned are the providers made from the config (not the caller's
	// own), which the sandbox closes when it ends: a real_fs mount's
	// directory descriptor, a memory mount's memfd.
	owned []io.Closer
}

// close releases the providers the sandbox made. v may be nil.
func (v *sandboxVFS) close() error {
	if v == nil {
		return nil
	}
	return closeAll(v.owned)
}

func closeAll(cs []io.Closer) error {
	var errs []error
	for _, c := range cs {
		if err := c.Close(); err != nil {
			errs = append(errs, fmt.Errorf("release a programmable mount's provider: %w", err))
		}
	}
	return errors.Join(errs...)
}

// buildVFS makes the providers c describes, and, with serveDirect (a
// backend that cannot bind host directories), the direct mounts as
// real_fs mounts. It returns nil when there is nothing to serve.
func buildVFS(c *Config, pol *policy.Policy, emit func(Event), serveDirect bool) (_ *sandboxVFS, err error) {
	var owned []io.Closer
	defer func() {
		if err != nil {
			closeAll(owned)
		}
	}()
	all := make(map[string]vfs.Provider, len(c.VFS.Mounts)+len(c.VFS.Providers))
	watched := map[string]vfs.Watcher{}
	// Each mount's target, and whether it is a direct one, or its
	// provider reports every change the sandbox does not make.
	direct, reporting := mounts.Flags{}, mounts.Flags{}
	if serveDirect {
		for _, t := range sortedKeys(c.VFS.DirectMounts) {
			d := c.VFS.DirectMounts[t]
			if fi, err := os.Stat(d.HostPath); err == nil && !fi.IsDir() {
				return nil, fmt.Errorf("vfs.direct_mounts[%s]: %s is a file: at the %s level direct mounts are served by airlock's file server, which mounts directories only; bind the directory that holds it (-v %s:DIR), or run at the process level, which binds files", t, d.HostPath, c.Isolation, filepath.Dir(d.HostPath))
			}
			p, err := MountSpec{Type: MountRealFS, HostPath: d.HostPath, Readonly: d.Readonly}.provider(0, &owned)
			if err != nil {
				return nil, fmt.Errorf("vfs.direct_mounts[%s]: %w", t, err)
			}
			all[t] = p
			if w, ok := p.(vfs.Watcher); ok {
				watched[t] = w
			}
			direct[t], reporting[t] = true, false
		}
	}
	for _, t := range sortedKeys(c.VFS.Mounts) {
		spec := c.VFS.Mounts[t]
		p, err := spec.provider(c.DiskMB<<20, &owned)
		if err != nil {
			return nil, fmt.Errorf("vfs.mounts[%s]: %w", t, err)
		}
		all[t] = p
		direct[t], reporting[t] = false, spec.reportsAll()
		if w, ok := p.(vfs.Watcher); ok {
			watched[t] = w
		}
	}
	for t, p := range c.VFS.Providers {
		all[t] = p
		// A caller's provider may be shared, or change on its own.
		direct[t], reporting[t] = false, false
		if w, ok := p.(vfs.Watcher); ok {
			watched[t] = w
		}
	}
	if len(all) == 0 {
		return nil, nil
	}
	v := &sandboxVFS{watched: watched, reporting: reporting, direct: direct, emit: emit, owned: owned}
	targets := make([]string, 0, len(all))
	for t := range all {
		targets = append(targets, t)
	}
	v.targets = mounts.Outermost(targets)
	var blocked []string
	for _, b := range c.VFS.BlockedPaths {
		for _, t := range v.targets {
			if mounts.Within(b, t) {
				blocked = append(blocked, b)
				break
			}
		}
	}
	tree := mounts.Block(vfs.NewMountRouter(all), blocked)
	if hooksSet(c.VFS.Hooks) {
		tree = vfs.WithHooks(tree, outside(c.VFS.Hooks, v.direct))
	}
	if pol != nil && pol.HasFileHook() {
		tree = vfs.WithHooks(tree, outside(scriptHooks(pol, c.Logger), v.direct))
	}
	v.tree = vfs.Observe(tree, v.event)
	return v, nil
}

// scriptHooks asks the policy script's on_file about each change: writes
// and creations, truncations, removals and both names of a rename. A
// script that fails denies (EACCES), and its error is logged.
func scriptHooks(pol *policy.Policy, log *slog.Logger) vfs.Hooks {
	ask := func(ctx context.Context, op, p string, size int64) error {
		errno, err := pol.FileDecision(ctx, op, p, size)
		if err != nil {
			log.Warn("policy script on_file failed: denied", "op", op, "path", p, "err", err)
		}
		if errno != 0 {
			return errno
		}
		return nil
	}
	return vfs.Hooks{
		BeforeOpen: func(ctx context.Context, p string, flags int) error {
			switch {
			case flags&os.O_CREATE != 0:
				return ask(ctx, policy.FileOpCreate, p, 0)
			case flags&(os.O_WRONLY|os.O_RDWR) != 0:
				return ask(ctx, policy.FileOpOpen, p, 0)
			}
			return nil
		},
		BeforeWrite: func(ctx context.Context, p string, off int64, n int) error {
			if n == 0 {
				return ask(ctx, policy.FileOpTruncate, p, off)
			}
			return ask(ctx, policy.FileOpWrite, p, int64(n))
		},
		BeforeRemove: func(ctx context.Context, p string) error { return ask(ctx, policy.FileOpRemove, p, 0) },
		BeforeRename: func(ctx context.Context, from, to string) error {
			if err := ask(ctx, policy.FileOpRename, from, 0); err != nil {
				return err
			}
			return ask(ctx, policy.FileOpRename, to, 0)
		},
	}
}

// hooksSet reports whether h has any hook.
func hooksSet(h vfs.Hooks) bool {
	return h.BeforeOpen != nil || h.BeforeWrite != nil || h.AfterWrite != nil || h.BeforeRemove != nil || h.BeforeRename != nil
}

// outside is h for every path but those in direct mounts, which no hook
// sees.
func outside(h vfs.Hooks, direct mounts.Flags) vfs.Hooks {
	if !direct.Any() {
		return h
	}
	in := direct.At
	out := h
	if f := h.BeforeOpen; f != nil {
		out.BeforeOpen = func(ctx context.Context, p string, flags int) error {
			if in(p) {
				return nil
			}
			return f(ctx, p, flags)
		}
	}
	if f := h.BeforeWrite; f != nil {
		out.BeforeWrite = func(ctx context.Context, p string, off int64, n int) error {
			if in(p) {
				return nil
			}
			return f(ctx, p, off, n)
		}
	}
	if f := h.AfterWrite; f != nil {
		out.AfterWrite = func(ctx context.Context, p string, n int) {
			if !in(p) {
				f(ctx, p, n)
			}
		}
	}
	if f := h.BeforeRemove; f != nil {
		out.BeforeRemove = func(ctx context.Context, p string) error {
			if in(p) {
				return nil
			}
			return f(ctx, p)
		}
	}
	if f := h.BeforeRename; f != nil {
		// A rename between a direct mount and another mount fails
		// (EXDEV): both names are in one, or neither is.
		out.BeforeRename = func(ctx context.Context, from, to string) error {
			if in(from) && in(to) {
				return nil
			}
			return f(ctx, from, to)
		}
	}
	return out
}

func (v *sandboxVFS) event(e vfs.Event) {
	if v.emit == nil {
		return
	}
	if v.direct.At(e.Path) {
		return
	}
	v.emit(Event{Type: EventFile, File: &FileEvent{Op: e.Op, Path: e.Path, To: e.To, Size: e.Size, Blocked: e.Blocked, Reason: e.Reason}})
}

// reportsAll reports whether the provider m makes tells its watchers
// of every change the sandbox's mount does not make: a memory mount
// (only the sandbox and the host's file API reach it), and overlays and
// read-only views of such. A host directory changes behind its back.
func (m MountSpec) reportsAll() bool {
	switch m.Type {
	case MountMemory:
		return true
	case MountOverlay:
		return m.Upper != nil && m.Lower != nil && m.Upper.reportsAll() && m.Lower.reportsAll()
	}
	return false
}

// provider makes the provider m describes; memory mounts hold at most
// defaultBytes unless they say. Each provider it makes that holds
// something to release is added to owned.
func (m MountSpec) provider(defaultBytes int64, owned *[]io.Closer) (vfs.Provider, error) {
	var p vfs.Provider
	switch m.Type {
	case MountMemory:
		size := m.SizeMB << 20
		if size == 0 {
			size = defaultBytes
		}
		mem := vfs.NewMemory(vfs.MemoryOptions{MaxBytes: size})
		*owned = append(*owned, mem)
		p = mem
	case MountRealFS:
		r, err := vfs.NewRealFS(m.HostPath)
		if err != nil {
			return nil, err
		}
		if c, ok := r.(io.Closer); ok {
			*owned = append(*owned, c)
		}
		p = r
	case MountOverlay:
		upper, err := m.Upper.provider(defaultBytes, owned)
		if err != nil {
			return nil, fmt.Errorf("upper: %w", err)
		}
		lower, err := m.Lower.provider(defaultBytes, owned)
		if err != nil {
			return nil, fmt.Errorf("lower: %w", err)
		}
		p = vfs.NewOverlay(upper, lower)
	default:
		return nil, fmt.Errorf("unknown mount type %q", m.Type)
	}
	if m.Readonly {
		p = vfs.NewReadonly(p)
	}
	return p, nil
}

// boot tells the agent which mounts to prepare, and has them served
// over its stream once it has (startVFS).
func (v *sandboxVFS) boot(b *agentproto.Boot) {
	if v != nil {
		b.Root.VFS = v.targets
		v.overStream = true
	}
}

// mounts are the mounts, for a boundary that serves them itself.
func (v *sandboxVFS) mounts() []boundary.Mount {
	if v == nil {
		return nil
	}
	ms := make([]boundary.Mount, 0, len(v.targets))
	for _, t := range v.targets {
		ms = append(ms, boundary.Mount{Target: t, Provider: v.view(t)})
	}
	return ms
}

// view is the provider the agent's mount at target serves: the tree
// beneath target, with the host's changes of the providers inside it.
func (v *sandboxVFS) view(target string) vfs.Provider {
	w := &watchedView{Provider: mounts.Sub(v.tree, target), target: target, reporting: v.reporting.Within(target)}
	for t, src := range v.watched {
		if mounts.Within(t, target) {
			w.sources = append(w.sources, watchSource{w: src, at: t})
		}
	}
	return w
}

// watchedView is a mount's provider that passes on the host's changes of
// the providers inside it, as paths of the mount.
type watchedView struct {
	vfs.Provider
	target    string
	sources   []watchSource
	reporting mounts.Flags
}

// Reporting says which paths of the mount change only as the sandbox
// sees or is told (see vfsfuse and vfsproto, which ask for it).
func (w *watchedView) Reporting() mounts.Flags { return w.reporting }

type watchSource struct {
	w  vfs.Watcher
	at string // the source's root, as a sandbox path
}

func (w *watchedView) Watch(fn func(string)) func() {
	stops := make([]func(), 0, len(w.sources))
	for _, s := range w.sources {
		stops = append(stops, s.w.Watch(func(p string) {
			rel := strings.TrimPrefix(path.Join(s.at, p), w.target)
			if rel == "" {
				rel = "/"
			}
			fn(rel)
		}))
	}
	return func() {
		for _, stop := range stops {
			stop()
		}
	}
}

// vfsAttachTimeout bounds the agent's mount of one programmable mount.
const vfsAttachTimeout = 30 * time.Second

// startVFS has the agent mount each programmable mount, over a stream
// of its own, and serves it until the sandbox ends. It returns once all
// are mounted.
func (s *Sandbox) startVFS(ctx context.Context) error {
	if s.vfs == nil || !s.vfs.overStream {
		return nil
	}
	life, cancel := context.WithCancel(context.Background())
	go func() {
		<-s.closed
		cancel()
	}()
	for _, t := range s.vfs.targets {
		conn, err := s.sess.OpenStream()
		if err != nil {
			return s.channelErr(fmt.Errorf("mount %s: open stream to sandbox agent: %w", t, err))
		}
		c := agentproto.NewConn(conn)
		if err := c.Write(agentproto.Request{Op: agentproto.OpVFS, Path: t}); err != nil {
			conn.Close()
			return s.channelErr(fmt.Errorf("mount %s: %w", t, err))
		}
		deadline := time.Now().Add(vfsAttachTimeout)
		if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
			deadline = d
		}
		_ = conn.SetReadDeadline(deadline)
		var m agentproto.Msg
		err = c.Read(&m)
		_ = conn.SetReadDeadline(time.Time{})
		if err == nil && m.K == agentproto.KErr && m.Err != nil {
			err = m.Err
		}
		if err != nil {
			conn.Close()
			return fmt.Errorf("mount %s in the sandbox: %w", t, err)
		}
		view := s.vfs.view(t)
		go func() {
			defer conn.Close()
			err := vfsproto.NewServer(view, vfsproto.ServerOptions{Logger: s.log.With("mount", t)}).Serve(life, conn)
			if err != nil && !errors.Is(err, context.Canceled) {
				s.log.Debug("programmable mount ended", "mount", t, "err", err)
			}
		}()
	}
	return nil
}
