package doctor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestIDsCheck(t *testing.T) {
	const passwd = "root:x:0:0::/root:/bin/sh\nalice:x:1000:1000::/home/alice:/bin/sh\n"
	if c := idsCheck(t.TempDir(), 0, noBinaries); c.Status != OK || !strings.Contains(c.Detail, "65536") {
		t.Errorf("root: %+v", c)
	}
	// A helper that is there but not set-uid: a reinstall fixes it.
	root := fakeTree(t, map[string]string{"etc/passwd": passwd, "usr/bin/newuidmap": "", "usr/bin/newgidmap": "",
		"etc/subuid": "alice:100000:65536\n", "etc/subgid": "alice:100000:65536\n"})
	if c := idsCheck(root, 1000, allBinaries); c.Status != Warn || !strings.Contains(c.Detail, "neither set-uid root") || !strings.Contains(c.Detail, "one uid and one gid") {
		t.Errorf("helpers not set-uid: %+v", c)
	}
	// No helpers: the package that has them.
	root = fakeTree(t, map[string]string{"etc/passwd": passwd, "etc/subuid": "alice:100000:65536\n", "etc/subgid": "alice:100000:65536\n"})
	if c := idsCheck(root, 1000, noBinaries); c.Status != Warn || !strings.Contains(c.Detail, "newuidmap is not installed") || !strings.Contains(c.Fix, "apt-get install uidmap") {
		t.Errorf("no helpers: %+v", c)
	}
	if os.Geteuid() != 0 {
		return // set-uid root helpers need root to make
	}
	helpers := func(root string) {
		for _, h := range []string{"newuidmap", "newgidmap"} {
			p := filepath.Join(root, "usr/bin", h)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, nil, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(p, os.ModeSetuid|0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	// No range for the user: the usermod that gives one, by name.
	root = fakeTree(t, map[string]string{"etc/passwd": passwd, "etc/subuid": "bob:100000:65536\n", "etc/subgid": ""})
	helpers(root)
	if c := idsCheck(root, 1000, allBinaries); c.Status != Warn || !strings.Contains(c.Detail, "grants user alice no subordinate ids") ||
		c.Fix != "usermod --add-subuids 165536-231071 --add-subgids 165536-231071 alice (as root)" {
		t.Errorf("no range: %+v", c)
	}
	root = fakeTree(t, map[string]string{"etc/passwd": passwd, "etc/subuid": "alice:100000:65536\n", "etc/subgid": "alice:300000:65536\n"})
	helpers(root)
	if c := idsCheck(root, 1000, allBinaries); c.Status != OK || !strings.Contains(c.Detail, "uids 100000-165535 and gids 300000-365535") || !strings.Contains(c.Detail, "share") {
		t.Errorf("ranges and helpers: %+v", c)
	}
}
