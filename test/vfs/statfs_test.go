//go:build linux

package vfs_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock"
)

// TestStatfs: df inside the sandbox sees each mount's own size and what
// is left of it: a memory mount its quota, a nested one its own, an
// overlay its upper's, a real_fs and a direct mount the host file system
// that holds their directory. Programs check free space before they
// write (package managers, installers); a mount that reports nothing
// makes them refuse.
func TestStatfs(t *testing.T) {
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		t.Parallel()
		dir := t.TempDir()
		real, direct := hostDir(t, dir, "real"), hostDir(t, dir, "direct")
		cfg := airlock.Config{VFS: airlock.VFSConfig{
			Mounts: map[string]airlock.MountSpec{
				"/m":       {Type: airlock.MountMemory, SizeMB: 64},
				"/m/inner": {Type: airlock.MountMemory, SizeMB: 8},
				"/r":       {Type: airlock.MountRealFS, HostPath: real},
				"/o": {Type: airlock.MountOverlay,
					Upper: &airlock.MountSpec{Type: airlock.MountMemory, SizeMB: 16},
					Lower: &airlock.MountSpec{Type: airlock.MountRealFS, HostPath: hostDir(t, dir, "lower")}},
			},
			DirectMounts: map[string]airlock.DirectMount{"/d": {HostPath: direct}},
		}}
		sb := box(t, lv, cfg)
		// %b blocks, %f free, %a available to a user, %S the size
		// they count in.
		out := sh(t, sb, scriptDeadline(lv, time.Minute), "head -c 4194304 /dev/zero > /m/f && stat -f -c '%n %b %f %a %S' /m /m/f /m/inner /o /r /d")
		got := map[string][4]uint64{}
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Fields(l)
			if len(f) != 5 {
				t.Fatalf("stat -f printed %q", l)
			}
			var v [4]uint64
			bs, _ := strconv.ParseUint(f[4], 10, 64)
			for i := range 3 {
				n, _ := strconv.ParseUint(f[i+1], 10, 64)
				v[i] = n * bs
			}
			v[3] = bs
			got[f[0]] = v
		}
		const mib = 1 << 20
		for _, c := range []struct {
			path        string
			total, free uint64
		}{
			{"/m", 64 * mib, 60 * mib},
			{"/m/f", 64 * mib, 60 * mib},
			{"/m/inner", 8 * mib, 8 * mib},
			{"/o", 16 * mib, 16 * mib},
		} {
			v := got[c.path]
			if v[0] != c.total || v[1] != c.free || v[2] != c.free {
				t.Errorf("%s: %d bytes, %d free, %d available; want %d, %d, %d", c.path, v[0], v[1], v[2], c.total, c.free, c.free)
			}
		}
		for path, host := range map[string]string{"/r": real, "/d": direct} {
			var st unix.Statfs_t
			if err := unix.Statfs(host, &st); err != nil {
				t.Fatal(err)
			}
			v := got[path]
			if want := st.Blocks * uint64(st.Frsize); v[0] != want {
				t.Errorf("%s: %d bytes, want the host file system's %d", path, v[0], want)
			}
			// Free space moves with the machine's other writers: the
			// reserve for root, the gap between free and available,
			// does not.
			if want := (st.Bfree - st.Bavail) * uint64(st.Frsize); v[1]-v[2] != want {
				t.Errorf("%s: %d free, %d available; want the host's reserve, %d, between them", path, v[1], v[2], want)
			}
		}
	})
}
