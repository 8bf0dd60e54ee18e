package vfs_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
)

// TestEscape plants links out of a real_fs and a direct mount's host
// directory, and tries every path form from inside: none reaches the
// host's file beside the directory.
func TestEscape(t *testing.T) {
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		top := t.TempDir()
		os.Chmod(top, 0o755)
		outside := filepath.Join(top, "outside")
		if err := os.MkdirAll(outside, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("HOST-SECRET"), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"real", "direct"} {
			d := hostDir(t, top, name)
			for link, target := range map[string]string{"rel": "../outside", "abs": outside, "root": "/", "up": "../.."} {
				if err := os.Symlink(target, filepath.Join(d, link)); err != nil {
					t.Fatal(err)
				}
			}
		}
		sb := box(t, lv, airlock.Config{VFS: airlock.VFSConfig{
			Mounts:       map[string]airlock.MountSpec{"/r": {Type: airlock.MountRealFS, HostPath: filepath.Join(top, "real")}},
			DirectMounts: map[string]airlock.DirectMount{"/d": {HostPath: filepath.Join(top, "direct")}},
		}})
		var tries []string
		for _, m := range []string{"/r", "/d"} {
			tries = append(tries, m+"/rel/secret", m+"/abs/secret", m+"/root"+outside+"/secret", m+"/up"+outside+"/secret",
				m+"/../outside/secret", m+"/../../"+outside+"/secret", m+"/./../"+filepath.Base(top)+"/outside/secret")
		}
		script := "for p in " + strings.Join(tries, " ") + "; do cat \"$p\" 2>/dev/null; done; " +
			// Links made inside resolve inside too.
			"ln -s " + outside + " /r/mine && cat /r/mine/secret 2>/dev/null; " +
			"ln -s ../../.. /d/mine && cat /d/mine" + outside + "/secret 2>/dev/null; " +
			"cd /r && cd .. && ls " + outside + " 2>/dev/null; true"
		if out := sh(t, sb, scriptDeadline(lv, time.Minute), script); strings.Contains(out, "HOST-SECRET") || strings.Contains(out, "secret") {
			t.Errorf("a path out of a mount reached the host's file: %q", out)
		}
		// The links made inside are in the host directories as links,
		// which the host does not follow on the sandbox's behalf.
		if fi, err := os.Lstat(filepath.Join(top, "real", "mine")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("the link made in real_fs: %v %v", fi, err)
		}
	})
}
