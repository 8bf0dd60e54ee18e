package vm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

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
func snapshot(ctx context.Context, cacheDir string, c Config, agent []byte, rd initrd) (string, error) {
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
func openSnapshot(dir string) (*os.File, error) {
	return os.Open(filepath.Join(dir, snapState))
}
