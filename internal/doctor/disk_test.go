package doctor

import (
	"errors"
	"strings"
	"testing"
)

func TestDiskCheck(t *testing.T) {
	have := func(string) (string, error) { return "/usr/sbin/mkfs.ext4", nil }
	none := func(string) (string, error) { return "", errors.New("not found") }
	full := map[string]string{"dev/loop-control": "", "proc/filesystems": "nodev\ttmpfs\n\text4\n"}
	for _, c := range []struct {
		name     string
		files    map[string]string
		uid      int
		lookPath func(string) (string, error)
		status   Status
		says     string
	}{
		{"root with everything", full, 0, have, OK, "ext4 file under $AIRLOCK_HOME/disks"},
		{"unprivileged", full, 1000, have, Warn, "run airlock as root"},
		{"no loop devices", map[string]string{"proc/filesystems": "\text4\n"}, 0, have, Warn, "modprobe loop"},
		{"no ext4", map[string]string{"dev/loop-control": "", "proc/filesystems": "nodev\ttmpfs\n"}, 0, have, Warn, "modprobe ext4"},
		{"no mkfs.ext4", full, 0, none, Warn, "e2fsprogs"},
	} {
		got := diskCheck(fakeTree(t, c.files), c.uid, c.lookPath)
		if got.Status != c.status || !strings.Contains(got.Detail+" "+got.Fix, c.says) {
			t.Errorf("%s: %+v, want %s saying %q", c.name, got, c.status, c.says)
		}
		if got.Status == Warn && !strings.Contains(got.Detail, "half of --memory") {
			t.Errorf("%s: %q does not say what the limit is", c.name, got.Detail)
		}
	}
}
