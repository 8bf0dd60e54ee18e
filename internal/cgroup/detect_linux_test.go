//go:build linux

package cgroup

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseMountinfo(t *testing.T) {
	in := `25 30 0:22 / /sys/fs/cgroup rw,nosuid shared:9 - tmpfs tmpfs ro,mode=755
26 25 0:23 / /sys/fs/cgroup/unified rw,nosuid shared:10 - cgroup2 cgroup2 rw,nsdelegate
27 25 0:24 /docker/1 /sys/fs/cgroup/cpu,cpuacct rw shared:11 master:3 - cgroup cgroup rw,cpu,cpuacct
28 25 0:25 / /mnt/with\040space rw - cgroup cgroup rw,memory
`
	got, err := parseMountinfo(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 {
		t.Fatalf("got %d mounts, want 4", len(got))
	}
	if m := got[1]; m.fstype != "cgroup2" || m.point != "/sys/fs/cgroup/unified" || m.root != "/" {
		t.Errorf("cgroup2 mount = %+v", m)
	}
	if m := got[2]; m.root != "/docker/1" || !slices.Equal(m.superOpts, []string{"rw", "cpu", "cpuacct"}) {
		t.Errorf("cpu mount = %+v", m)
	}
	if m := got[3]; m.point != "/mnt/with space" {
		t.Errorf("escaped mount point = %q", m.point)
	}
	if _, err := parseMountinfo(strings.NewReader("1 2 3\n")); err == nil {
		t.Error("malformed line parsed without error")
	}
}

// TestLibPath checks that the library's way of addressing a controller
// (<parent of mount>/<controller>/<path>) lands in the real mount for
// co-mounted hierarchies too.
func TestLibPath(t *testing.T) {
	for _, m := range []v1Mount{
		{"cpu", "/sys/fs/cgroup/cpu"},
		{"cpu", "/sys/fs/cgroup/cpu,cpuacct"},
		{"cpuacct", "/sys/fs/cgroup/cpu,cpuacct"},
		{"memory", "/cgroup/mem"},
	} {
		lib := filepath.Join(filepath.Dir(m.dir), m.controller, m.libPath("airlock/x/user"))
		if want := filepath.Join(m.dir, "airlock/x/user"); lib != want {
			t.Errorf("%+v: library path %s, want %s", m, lib, want)
		}
	}
}

// fakeSys writes a mountinfo and a /proc/self/cgroup for detect.
func fakeSys(t *testing.T, mountinfo, cgroup string) sysFiles {
	t.Helper()
	dir := t.TempDir()
	f := sysFiles{mountinfo: filepath.Join(dir, "mountinfo"), cgroup: filepath.Join(dir, "cgroup")}
	writeFile(t, f.mountinfo, mountinfo)
	writeFile(t, f.cgroup, cgroup)
	return f
}

// fakeV2 creates a directory that looks like a cgroup2 root offering ctrls.
func fakeV2(t *testing.T, ctrls string) string {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "cgroup.controllers"), ctrls)
	writeFile(t, filepath.Join(dir, "cgroup.subtree_control"), "")
	writeFile(t, filepath.Join(dir, "cgroup.procs"), "")
	return dir
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestDetectFakeV2(t *testing.T) {
	root := fakeV2(t, "cpuset cpu io memory hugetlb pids rdma misc")
	sys := fakeSys(t, "30 1 0:26 / "+root+" rw - cgroup2 cgroup2 rw\n", "0::/\n")
	lay := detect(sys)
	if !lay.info.Writable || lay.info.Version != V2 || lay.info.Base != root || lay.info.Reason != "" {
		t.Fatalf("detect = %+v, want writable V2 at %s", lay.info, root)
	}
	if !slices.Equal(withoutFreezer(lay.info.Controllers), needed) {
		t.Errorf("controllers = %v, want %v", lay.info.Controllers, needed)
	}
	if got, want := lay.roots(), []string{filepath.Join(root, "airlock")}; !slices.Equal(got, want) {
		t.Errorf("roots = %v, want %v", got, want)
	}
}

func TestDetectFakeV2MissingController(t *testing.T) {
	root := fakeV2(t, "cpu memory")
	sys := fakeSys(t, "30 1 0:26 / "+root+" rw - cgroup2 cgroup2 rw\n", "0::/\n")
	info := detect(sys).info
	if info.Writable || info.Version != V2 || !strings.Contains(info.Reason, "pids") {
		t.Fatalf("detect = %+v, want not writable V2 with a reason naming pids", info)
	}
}

// TestDetectFakeHybrid mimics this kind of machine for a user who cannot
// write the v1 hierarchies (they do not exist, which root cannot bypass).
func TestDetectFakeHybrid(t *testing.T) {
	unified := fakeV2(t, "")
	missing := filepath.Join(t.TempDir(), "missing")
	sys := fakeSys(t, strings.Join([]string{
		"30 1 0:26 / " + unified + " rw - cgroup2 cgroup2 rw",
		"31 1 0:27 / " + missing + "/memory rw - cgroup cgroup rw,memory",
		"32 1 0:28 / " + missing + "/pids rw - cgroup cgroup rw,pids",
		"33 1 0:29 / " + missing + "/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct",
	}, "\n")+"\n", "4:memory:/\n0::/\n")
	info := detect(sys).info
	if info.Writable || info.Version != V1 {
		t.Fatalf("detect = %+v, want not writable V1", info)
	}
	for _, want := range []string{"cgroup v1 memory hierarchy " + missing + "/memory is not writable", "offers none of memory, pids, cpu", "run airlock as root"} {
		if !strings.Contains(info.Reason, want) {
			t.Errorf("reason %q lacks %q", info.Reason, want)
		}
	}
	if !slices.Equal(withoutFreezer(info.Controllers), needed) {
		t.Errorf("controllers = %v, want %v", info.Controllers, needed)
	}
}

func TestDetectNoCgroups(t *testing.T) {
	info := detect(fakeSys(t, "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n", "")).info
	if info.Writable || info.Reason == "" {
		t.Fatalf("detect = %+v, want not writable with a reason", info)
	}
}

// withoutFreezer is ctrls less the freezer, which is there when the
// kernel offers one.
func withoutFreezer(ctrls []string) []string {
	return slices.DeleteFunc(slices.Clone(ctrls), func(c string) bool { return c == "freezer" })
}
