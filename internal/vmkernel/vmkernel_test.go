package vmkernel

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestFragments checks that every fragment line is an option, a
// "not set" line, a comment or blank, and that both fragments ask for
// what the vm boundary needs.
func TestFragments(t *testing.T) {
	opt := regexp.MustCompile(`^(CONFIG_[A-Z0-9_]+=(y|n|m|[0-9]+|"[^"]*")|# CONFIG_[A-Z0-9_]+ is not set)$`)
	needs := []string{
		"CONFIG_VIRTIO_MMIO=y", "CONFIG_VIRTIO_BLK=y", "CONFIG_VIRTIO_NET=y", "CONFIG_VIRTIO_CONSOLE=y",
		"CONFIG_VIRTIO_VSOCKETS=y", "CONFIG_FUSE_FS=y", "CONFIG_OVERLAY_FS=y", "CONFIG_9P_FS=y",
		"CONFIG_NET_9P_VIRTIO=y", "CONFIG_EROFS_FS=y", "CONFIG_EXT4_FS=y", "CONFIG_TMPFS=y",
		"CONFIG_DEVTMPFS=y", "CONFIG_CGROUPS=y", "CONFIG_SECCOMP_FILTER=y", "CONFIG_SECURITY_LANDLOCK=y",
	}
	for _, arch := range Arches {
		frag, err := Fragment(arch)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		sc := bufio.NewScanner(bytes.NewReader(frag))
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			switch {
			case line == "", strings.HasPrefix(line, "# ") && !strings.HasPrefix(line, "# CONFIG_"):
				continue
			case !opt.MatchString(line):
				t.Errorf("%s.config:%d: not an option line: %q", arch, n, line)
				continue
			}
			name := strings.TrimPrefix(line, "# ")
			name, _, _ = strings.Cut(name, "=")
			name, _, _ = strings.Cut(name, " ")
			if seen[name] {
				t.Errorf("%s.config:%d: %s set twice", arch, n, name)
			}
			seen[name] = true
		}
		for _, want := range needs {
			if !bytes.Contains(frag, []byte("\n"+want+"\n")) {
				t.Errorf("%s.config lacks %s", arch, want)
			}
		}
	}
	if x86, _ := Fragment("x86_64"); !bytes.Contains(x86, []byte("\nCONFIG_PVH=y\n")) {
		t.Error("x86_64.config lacks the PVH entry (CONFIG_PVH=y) that microvm and Firecracker boot")
	}
	if _, err := Fragment("riscv64"); err == nil {
		t.Error("Fragment(riscv64): no error")
	}
}

// TestKey checks that the key follows each input.
func TestKey(t *testing.T) {
	src := Source{Package: "linux-source-6.1", Version: "6.1.192-3"}
	k1, err := Key(src, "x86_64")
	if err != nil {
		t.Fatal(err)
	}
	if k, _ := Key(src, "x86_64"); k != k1 {
		t.Errorf("Key is not stable: %s, %s", k1, k)
	}
	other := src
	other.Version = "6.1.192-4"
	for _, k := range []func() (string, error){
		func() (string, error) { return Key(other, "x86_64") },
		func() (string, error) { return Key(src, "arm64") },
	} {
		if k2, _ := k(); k2 == k1 {
			t.Errorf("different inputs, same key %s", k1)
		}
	}
	if len(k1) != 32 {
		t.Errorf("key %q: want 32 hex digits", k1)
	}
}

// fakeKernel puts a kernel with manifest m (key and sums filled in when
// empty) into the cache at dir.
func fakeKernel(t *testing.T, dir string, src Source, m Manifest) Kernel {
	t.Helper()
	if m.Key == "" {
		m.Key, _ = Key(src, m.Arch)
	}
	if m.FragmentSHA256 == "" {
		frag, _ := Fragment(m.Arch)
		m.FragmentSHA256 = sum(frag)
	}
	if m.ScriptSHA256 == "" {
		m.ScriptSHA256 = sum(buildScript)
	}
	m.Source, m.SourceVersion, m.Image = src.Package, src.Version, "vmlinux"
	kd := filepath.Join(dir, kernelsDir, m.Key)
	if err := os.MkdirAll(kd, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(kd, "vmlinux"), []byte("ELF"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(m)
	if err := os.WriteFile(filepath.Join(kd, manifestFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	k, err := read(kd)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestFindList checks which kernel Find picks and what List shows.
func TestFindList(t *testing.T) {
	dir := t.TempDir()
	if _, err := Find(dir, "x86_64", nil); !errors.Is(err, ErrNotBuilt) {
		t.Fatalf("Find in an empty cache: %v, want ErrNotBuilt", err)
	}
	old := Source{Package: "linux-source-6.1", Version: "6.1.100-1"}
	cur := Source{Package: "linux-source-6.1", Version: "6.1.192-3"}
	now := time.Now().UTC()
	a := fakeKernel(t, dir, old, Manifest{Arch: "x86_64", BuiltAt: now.Add(-time.Hour)})
	b := fakeKernel(t, dir, cur, Manifest{Arch: "x86_64", BuiltAt: now.Add(-2 * time.Hour)})
	stale := fakeKernel(t, dir, cur, Manifest{Key: strings.Repeat("ab", 16), Arch: "x86_64", FragmentSHA256: "00", BuiltAt: now})
	// Being built: no manifest yet.
	if err := os.MkdirAll(filepath.Join(dir, kernelsDir, strings.Repeat("cd", 16)), 0o755); err != nil {
		t.Fatal(err)
	}

	if k, err := Find(dir, "x86_64", &cur); err != nil || k.Key != b.Key {
		t.Errorf("Find with the source installed: %v %v, want %s", k.Key, err, b.Key)
	}
	if k, err := Find(dir, "x86_64", nil); err != nil || k.Key != a.Key {
		t.Errorf("Find without a source: %v %v, want the newest, %s", k.Key, err, a.Key)
	}
	newer := Source{Package: "linux-source-6.1", Version: "6.1.200-1"}
	if k, err := Find(dir, "x86_64", &newer); err != nil || k.Key != a.Key {
		t.Errorf("Find with an unbuilt source: %v %v, want the newest built, %s", k.Key, err, a.Key)
	}
	if _, err := Find(dir, "arm64", nil); !errors.Is(err, ErrNotBuilt) || !strings.Contains(err.Error(), "airlock kernel build --arch arm64") {
		t.Errorf("Find arm64: %v", err)
	}
	ks, err := List(dir)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, k := range ks {
		keys = append(keys, k.Key)
	}
	if want := []string{a.Key, b.Key, stale.Key}; strings.Join(keys, " ") != strings.Join(want, " ") {
		t.Errorf("List = %v, want %v", keys, want)
	}
	if len(ks) == 3 && (ks[2].Current || !ks[0].Current) {
		t.Errorf("Current: %v %v %v", ks[0].Current, ks[1].Current, ks[2].Current)
	}
}

// TestFindSource checks the choice of tarball and what a missing one
// says.
func TestFindSource(t *testing.T) {
	dir := t.TempDir()
	_, err := FindSource(t.Context(), dir)
	if err == nil || !strings.Contains(err.Error(), "apt-get install -y linux-source-6.1") {
		t.Errorf("no source: %v", err)
	}
	for _, name := range []string{"linux-source-6.1.tar.xz", "linux-source-6.10.tar.xz", "linux-source-6.9.tar.xz"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	src, err := FindSource(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if src.Package != "linux-source-6.10" {
		t.Errorf("package %s, want the newest, linux-source-6.10", src.Package)
	}
	if src.Version == "" {
		t.Error("no version")
	}
}

func TestCommandLine(t *testing.T) {
	khz, err := tscKHz(strings.NewReader("processor\t: 0\nmodel name\t: Xeon\ncpu MHz\t\t: 2300.000\n"))
	if err != nil || khz != 2300000 {
		t.Errorf("tscKHz = %d, %v; want 2300000", khz, err)
	}
	if _, err := tscKHz(strings.NewReader("processor\t: 0\n")); err == nil {
		t.Error("tscKHz without cpu MHz: no error")
	}
	if got, want := CommandLine(khz, "quiet"), "console=ttyS0 panic=-1 reboot=t no_timer_check tsc_early_khz=2300000 quiet"; got != want {
		t.Errorf("CommandLine = %q, want %q", got, want)
	}
}
