package vfs_test

import (
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
)

// deepScript goes, name by name, deeper than one system call's path may
// be (PATH_MAX) below the mount's root, and works there; a path a
// provider cannot take fails with ENAMETOOLONG, and the tree stays
// usable.
const deepScript = `
import errno, os
os.chdir(os.environ["DIR"])
name = "n" * 255
depth = 0
while depth < 24:
    os.mkdir(name)
    os.chdir(name)
    depth += 1
with open("f", "w") as f:
    f.write("deep")
assert open("f").read() == "deep"
os.rename("f", "g")
os.symlink("g", "l")
assert sorted(os.listdir(".")) == ["g", "l"]
assert open("l").read() == "deep"
print("deep-%d" % (depth * 256))
try:
    while True:
        os.mkdir(name)
        os.chdir(name)
        depth += 1
except OSError as x:
    assert x.errno == errno.ENAMETOOLONG, x
assert depth <= 64, depth
print("bounded")
`

// TestDeepPaths works more than PATH_MAX below each mount's root.
func TestDeepPaths(t *testing.T) {
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		for _, p := range providers {
			if p.name == "direct" {
				continue // a host file system has no bound on depth
			}
			t.Run(p.name, func(t *testing.T) {
				t.Parallel()
				cfg := airlock.Config{}
				cfg.VFS, _ = p.mount(t, t.TempDir())
				sb := box(t, lv, cfg)
				out := sh(t, sb, scriptDeadline(lv, 2*time.Minute), "mkdir -p /m/deep && DIR=/m/deep python3 -c '"+strings.ReplaceAll(deepScript, "'", `'"'"'`)+"'")
				if got := strings.Join(strings.Fields(out), " "); got != "deep-6144 bounded" {
					t.Errorf("checks passed: %q", got)
				}
			})
		}
	})
}
