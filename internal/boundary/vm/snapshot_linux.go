package vm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/flock"
	"github.com/airlock-sandbox/airlock/internal/vmkernel"
)

// A snapshot is a machine saved while its agent waits for its boot
// configuration, before anything of a sandbox is in it: no id, no
// network address, no file, no command has run. Every sandbox whose
// machine is the same (kernel, agent, memory, CPUs, disks, devices)
// restores it instead of booting, and its agent then gets the boot that
// makes it that sandbox (identity, clock, RNG seed, network address,
// mounts). Sandboxes whose root is an image attached as a disk use
// snapshots (their direct mounts are served by the host); those with 9p
// shares boot (see snapshottable).

// snapshotVersion changes when what a snapshot holds does.
const snapshotVersion = "airlock-vm-snapshot/2"

// snapshotsDir is the folder of the cache that keeps them.
const snapshotsDir = "vm-snapshots"

// A cache keeps the snapshotsKept snapshots used last (a new airlock,
// kernel or image makes new ones, and each is tens of MiB), and never
// removes one used within snapshotInUse, nor a save that may still be
// under way. A removed snapshot costs one more boot the next time.
const (
	snapshotsKept = 8
	snapshotInUse = time.Hour
)

// Files of a snapshot's directory.
const (
	snapState  = "state"
	snapInitrd = "initrd.cpio"
)

// snapshotKey names the machine c, booted from the ramdisk rd with this
// agent: what QEMU is given, the ramdisk's bytes (the agent, and the
// host's /etc entries a default root copies), and the identity (size,
// time) of every other file it reads.
func snapshotKey(c Config, agent []byte, rd initrd) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s\nmem %d\ncpus %d\nkvm %t\nnet %t\ncmdline %q\n", snapshotVersion, c.MemoryMB, c.CPUs, c.KVM, c.Network, c.CommandLine)
	ramdisk := sha256.New()
	if err := rd.writeTo(ramdisk, agent); err != nil {
		return "", err
	}
	fmt.Fprintf(h, "ramdisk %x\n", ramdisk.Sum(nil))
	files := []string{c.QEMU, c.Kernel}
	for _, d := range c.Disks {
		fmt.Fprintf(h, "disk %q %t\n", d.Serial, d.Readonly)
		files = append(files, d.Path)
	}
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "file %q %d %d\n", f, fi.Size(), fi.ModTime().UnixNano())
	}
	return hex.EncodeToString(h.Sum(nil))[:32], nil
}

// snapshot returns the directory of the saved machine c (its state and
// the initial ramdisk it booted from), saving it first when the cache
// has none: a boot of c with no guest code but the agent, stopped once
// the agent has opened its port, saved by QEMU, and ended.
func snapshot(ctx context.Context, cacheDir string, c Config, agent []byte, rd initrd, log *slog.Logger) (string, error) {
	key, err := snapshotKey(c, agent, rd)
	if err != nil {
		return "", err
	}
	root := filepath.Join(cacheDir, snapshotsDir)
	dir := filepath.Join(root, key)
	if _, err := os.Stat(filepath.Join(dir, snapState)); err == nil {
		return dir, nil
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return "", err
	}
	unlock, err := vmkernel.Lock(ctx, filepath.Join(root, key+".lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := os.Stat(filepath.Join(dir, snapState)); err == nil {
		return dir, nil
	}
	tmp, err := os.MkdirTemp(root, key+".part-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	sockets, err := os.MkdirTemp("", "airlock-vm-save-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(sockets)
	c.Dir, c.Initrd, c.Jail, c.Incoming, c.MayRun = sockets, filepath.Join(tmp, snapInitrd), Jail{UID: -1, GID: -1}, nil, true
	if err := rd.write(c.Initrd, agent); err != nil {
		return "", err
	}
	if err := save(ctx, c, filepath.Join(tmp, snapState)); err != nil {
		return "", fmt.Errorf("save the VM's snapshot: %w", err)
	}
	// The ramdisk restored machines load (and overwrite with the saved
	// memory) is the one this machine booted, kept beside its state.
	if err := os.Rename(tmp, dir); err != nil {
		return "", err
	}
	// A new snapshot is when old ones go: those of an earlier agent or
	// kernel are never used again. What cannot be removed now is tried
	// again at the next save; the new snapshot is good either way.
	if _, err := pruneSnapshots(root, time.Now()); err != nil && log != nil {
		log.Warn("vm: remove unused snapshots from the cache", "dir", root, "err", err)
	}
	return dir, nil
}

// save boots c, waits for its agent to open the port, and saves the
// stopped machine to path.
func save(ctx context.Context, c Config, path string) error {
	m, err := Start(ctx, c)
	if err != nil {
		return err
	}
	defer m.Close()
	conn, err := m.AcceptAgent(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := waitPortOpen(ctx, m); err != nil {
		return err
	}
	if _, err := m.QMP.Execute(ctx, "stop", nil); err != nil {
		return err
	}
	// QEMU 7.2 saves to a file only through a program (file: URIs came
	// later); MayRun lets it start one, and nothing but airlock's agent
	// has run in this guest.
	if _, err := m.QMP.Execute(ctx, "migrate", map[string]any{"uri": "exec:cat > " + shellQuote(path)}); err != nil {
		return err
	}
	for {
		raw, err := m.QMP.Execute(ctx, "query-migrate", nil)
		if err != nil {
			return err
		}
		var st struct {
			Status    string `json:"status"`
			ErrorDesc string `json:"error-desc"`
		}
		if err := json.Unmarshal(raw, &st); err != nil {
			return err
		}
		switch st.Status {
		case "completed":
			return nil
		case "failed", "cancelled":
			return fmt.Errorf("QEMU's migration to %s %s: %s", path, st.Status, st.ErrorDesc)
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-m.Done():
			return m.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// waitPortOpen waits until the guest has opened the agent's port.
func waitPortOpen(ctx context.Context, m *Machine) error {
	for {
		select {
		case ev, ok := <-m.QMP.Events():
			if !ok {
				// QEMU ended, most likely: say how.
				select {
				case <-m.Done():
					return m.Err()
				case <-time.After(time.Second):
				}
				return errors.New("QEMU's monitor closed before the agent opened its port")
			}
			if ev.Event != "VSERPORT_CHANGE" {
				continue
			}
			var d struct {
				ID   string `json:"id"`
				Open bool   `json:"open"`
			}
			if json.Unmarshal(ev.Data, &d) == nil && d.ID == agentPortID && d.Open {
				return nil
			}
		case <-m.Done():
			return m.Err()
		case <-ctx.Done():
			return fmt.Errorf("the agent never opened its port: %w", context.Cause(ctx))
		}
	}
}

// Resume waits until a machine started from a snapshot has restored it,
// and lets it run.
func (m *Machine) Resume(ctx context.Context) error {
	for {
		st, err := m.QMP.QueryStatus(ctx)
		if err != nil {
			return fmt.Errorf("restore the VM: %w", err)
		}
		switch st.Status {
		case "paused", "postmigrate", "prelaunch":
			if _, err := m.QMP.Execute(ctx, "cont", nil); err != nil {
				return fmt.Errorf("resume the restored VM: %w", err)
			}
			return nil
		case "running":
			return nil
		case "inmigrate":
		default:
			return fmt.Errorf("restore the VM: QEMU is %q", st.Status)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("restore the VM: %w", context.Cause(ctx))
		case <-m.Done():
			return m.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// shellQuote quotes s for sh.
func shellQuote(s string) string {
	out := []byte{'\''}
	for i := range len(s) {
		if s[i] == '\'' {
			out = append(out, []byte(`'\''`)...)
			continue
		}
		out = append(out, s[i])
	}
	return string(append(out, '\''))
}

// openSnapshot opens a snapshot's saved state for a restore.
//
// The file is locked shared until it is closed, which pruneSnapshots
// waits for; the caller closes it once QEMU has read the snapshot and its
// ramdisk. A snapshot removed before the lock was taken is not opened.
// Opening marks it used.
func openSnapshot(dir string) (*os.File, error) {
	f, err := os.Open(filepath.Join(dir, snapState))
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	err = unix.Flock(int(f.Fd()), unix.LOCK_SH)
	if err == nil {
		err = unix.Fstat(int(f.Fd()), &st)
	}
	if err == nil && st.Nlink == 0 {
		err = fmt.Errorf("VM snapshot %s: removed as unused", dir)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	now := time.Now()
	_ = os.Chtimes(f.Name(), now, now)
	return f, nil
}

// pruneSnapshots removes from root, the cache's folder of snapshots,
// every snapshot but the snapshotsKept used last and those used within
// snapshotInUse of now (a snapshot's state file's time is its last
// use), and what saves that did not finish left there longer ago than
// that. A snapshot being restored (see openSnapshot) stays. It returns
// the keys removed.
func pruneSnapshots(root string, now time.Time) ([]string, error) {
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, err
	}
	type snap struct {
		key  string
		used time.Time
	}
	var snaps []snap
	var errs []error
	for _, e := range ents {
		name := e.Name()
		if key, ok := strings.CutSuffix(name, ".lock"); ok && !e.IsDir() {
			// The lock of a save that never finished, unless one is
			// under way.
			if _, err := os.Stat(filepath.Join(root, key)); errors.Is(err, os.ErrNotExist) {
				errs = append(errs, removeStaleLock(filepath.Join(root, name), now))
			}
			continue
		}
		if !e.IsDir() {
			continue
		}
		if strings.Contains(name, ".part-") {
			if fi, err := e.Info(); err == nil && now.Sub(fi.ModTime()) > snapshotInUse {
				errs = append(errs, os.RemoveAll(filepath.Join(root, name)))
			}
			continue
		}
		fi, err := os.Stat(filepath.Join(root, name, snapState))
		if err != nil {
			continue
		}
		snaps = append(snaps, snap{name, fi.ModTime()})
	}
	slices.SortFunc(snaps, func(a, b snap) int { return b.used.Compare(a.used) })
	var removed []string
	for i, s := range snaps {
		if i < snapshotsKept || now.Sub(s.used) <= snapshotInUse {
			continue
		}
		ok, err := removeSnapshot(root, s.key, now)
		if ok {
			removed = append(removed, s.key)
		}
		errs = append(errs, err)
	}
	return removed, errors.Join(errs...)
}

// removeStaleLock removes the lock file path when nothing holds it and it
// was made longer than snapshotInUse before now.
func removeStaleLock(path string, now time.Time) error {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer flock.Release(f)
	if fi, err := f.Stat(); err != nil || now.Sub(fi.ModTime()) <= snapshotInUse {
		return nil
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// removeSnapshot removes the snapshot key of root unless a restore holds
// it or it was used within snapshotInUse of now. It reports whether it
// did.
func removeSnapshot(root, key string, now time.Time) (bool, error) {
	dir := filepath.Join(root, key)
	f, err := os.Open(filepath.Join(dir, snapState))
	if err != nil {
		return false, nil // gone already
	}
	defer flock.Release(f)
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return false, nil // being restored
	}
	// Used since it was listed?
	if fi, err := f.Stat(); err != nil || now.Sub(fi.ModTime()) <= snapshotInUse {
		return false, nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return false, err
	}
	// Its lock only serves a save, which a saved snapshot needs no more.
	_ = os.Remove(filepath.Join(root, key+".lock"))
	return true, nil
}
