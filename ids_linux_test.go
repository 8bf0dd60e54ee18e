package airlock_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock"
)

// TestIDsRootFSOverlay gives a sandbox, as root, a prepared root that is
// an overlay mount, as containerd's overlayfs snapshotter makes: the
// kernel cannot idmap an overlay, so its layers are idmapped one by one.
// The sandbox still maps a range of ids of its own, the owners of its
// files are kept, and the layers' whiteouts and opaque directories hide
// what they hide. The layers are unchanged after the sandbox writes.
func TestIDsRootFSOverlay(t *testing.T) {
	t.Parallel()
	if !isRoot() {
		t.Skip("mounting an overlay takes root")
	}
	lower := toolRootFS(t, "sh", "id", "stat", "cat", "ls")
	for _, f := range []string{"gone", "opq/old", "kept"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(lower, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(lower, f), []byte("lower\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mid, upper, work, merged := t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()
	// mid: a layer that removes /gone, replaces /opq whole and adds a
	// file of uid 1000.
	if err := unix.Mknod(filepath.Join(mid, "gone"), unix.S_IFCHR, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(mid, "opq"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(filepath.Join(mid, "opq"), "trusted.overlay.opaque", []byte("y"), 0); err != nil {
		t.Skipf("no trusted xattrs here: %v", err)
	}
	for f, uid := range map[string]int{"opq/new": 0, "owned": 1000} {
		p := filepath.Join(mid, f)
		if err := os.WriteFile(p, []byte("mid\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	// upper: the container's writable layer, as containerd mounts it.
	if err := os.WriteFile(filepath.Join(upper, "written"), []byte("upper\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	opts := fmt.Sprintf("lowerdir=%s:%s,upperdir=%s,workdir=%s", mid, lower, upper, work)
	if err := unix.Mount("overlay", merged, "overlay", 0, opts); err != nil {
		t.Fatalf("mount an overlay: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(merged, unix.MNT_DETACH) })

	eachIsolation(t, func(t *testing.T, lv airlock.Isolation) {
		ctx := testCtx(t, time.Minute)
		sb := newSandbox(t, airlock.Config{Isolation: lv, RootFS: merged})
		got := mustRun(t, ctx, sb, "stat -c '%u:%g %n' /owned /kept /written; ls /opq; test -e /gone || echo hidden; echo changed > /kept && cat /kept")
		want := "1000:1000 /owned\n0:0 /kept\n0:0 /written\nnew\nhidden\nchanged\n"
		if got != want {
			t.Errorf("the overlay root, inside:\n%s\nwant:\n%s", got, want)
		}
		if lv == airlock.IsolationProcess {
			if mapped := mappedIDs(t, mustRun(t, ctx, sb, "cat /proc/self/uid_map")); mapped < 65536 {
				t.Errorf("the sandbox on an overlay root maps %d ids, want 65,536; notes: %q", mapped, sb.Notes())
			}
			if notesMention(sb.Notes(), "root in the sandbox is root on the host") {
				t.Errorf("the overlay root ran without an idmapped mount: %q", sb.Notes())
			}
		}
		if b, err := os.ReadFile(filepath.Join(lower, "kept")); err != nil || string(b) != "lower\n" {
			t.Errorf("the lower layer's file after the sandbox wrote it: %q, %v", b, err)
		}
		if _, err := os.Stat(filepath.Join(upper, "kept")); err == nil {
			t.Errorf("the sandbox's write reached the overlay's upper directory")
		}
	})
}
