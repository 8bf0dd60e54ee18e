package vmkernel

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
)

// SourceDir is where Debian's linux-source packages put their tarball.
const SourceDir = "/usr/src"

// SourcePackage is the Debian package airlock's kernels are built from
// (bookworm's kernel).
const SourcePackage = "linux-source-6.1"

// Source is a kernel source tarball.
type Source struct {
	Path    string `json:"path"`    // /usr/src/linux-source-6.1.tar.xz
	Package string `json:"package"` // linux-source-6.1
	Version string `json:"version"` // the package's version, or sha256:... of a tarball no package owns
}

// FindSource finds the newest linux-source tarball in dir (SourceDir
// unless testing) and its package's version. The error says what to
// install when there is none.
func FindSource(ctx context.Context, dir string) (Source, error) {
	var paths []string
	for _, pat := range []string{"linux-source-*.tar.xz", "linux-source-*.tar.bz2", "linux-source-*.tar.gz"} {
		m, err := filepath.Glob(filepath.Join(dir, pat))
		if err != nil {
			return Source{}, fmt.Errorf("look for the kernel source in %s: %w", dir, err)
		}
		paths = append(paths, m...)
	}
	if len(paths) == 0 {
		return Source{}, fmt.Errorf("no kernel source in %s: install Debian's %s (%s)", dir, SourcePackage, aptHint(SourcePackage))
	}
	slices.SortFunc(paths, func(a, b string) int { return compareVersions(packageOf(a), packageOf(b)) })
	p := paths[len(paths)-1]
	src := Source{Path: p, Package: packageOf(p)}
	out, err := exec.CommandContext(ctx, "dpkg-query", "-W", "-f=${Version}", src.Package).Output()
	if v := strings.TrimSpace(string(out)); err == nil && v != "" {
		src.Version = v
		return src, nil
	}
	// Not from a package: the tarball's content is its version.
	f, err := os.Open(p)
	if err != nil {
		return Source{}, fmt.Errorf("read the kernel source: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return Source{}, fmt.Errorf("read the kernel source %s: %w", p, err)
	}
	src.Version = "sha256:" + hex.EncodeToString(h.Sum(nil))
	return src, nil
}

// packageOf is linux-source-6.1 for /usr/src/linux-source-6.1.tar.xz.
func packageOf(path string) string {
	b := filepath.Base(path)
	return b[:strings.Index(b, ".tar.")]
}

// compareVersions orders linux-source-6.1 before linux-source-6.10.
func compareVersions(a, b string) int {
	pa, pb := strings.Split(strings.TrimPrefix(a, "linux-source-"), "."), strings.Split(strings.TrimPrefix(b, "linux-source-"), ".")
	for i := 0; i < len(pa) && i < len(pb); i++ {
		na, ea := strconv.Atoi(pa[i])
		nb, eb := strconv.Atoi(pb[i])
		if ea != nil || eb != nil {
			if c := strings.Compare(pa[i], pb[i]); c != 0 {
				return c
			}
			continue
		}
		if na != nb {
			return na - nb
		}
	}
	return len(pa) - len(pb)
}

// aptHint is how to install pkgs here: apt-get as root, else with sudo.
func aptHint(pkgs ...string) string {
	cmd := "apt-get install -y " + strings.Join(pkgs, " ")
	if os.Geteuid() != 0 {
		return "needs root: sudo " + cmd
	}
	return cmd
}

// missingTools lists what building for arch needs and is not here.
func missingTools(arch string) error {
	type need struct{ what, pkg string }
	var missing []string
	var pkgs []string
	check := func(ok bool, n need) {
		if !ok {
			missing = append(missing, n.what)
			if !slices.Contains(pkgs, n.pkg) {
				pkgs = append(pkgs, n.pkg)
			}
		}
	}
	has := func(name string) bool { _, err := exec.LookPath(name); return err == nil }
	for _, n := range []need{{"make", "make"}, {"gcc", "gcc"}, {"flex", "flex"}, {"bison", "bison"}, {"bc", "bc"}, {"xz", "xz-utils"}, {"perl", "perl"}} {
		check(has(n.what), n)
	}
	_, err := os.Stat("/usr/include/libelf.h")
	check(err == nil, need{"libelf.h", "libelf-dev"})
	if cross := crossPrefix(arch); cross != "" {
		check(has(cross+"gcc"), need{cross + "gcc", "gcc-" + strings.TrimSuffix(cross, "-")})
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("building the %s kernel needs %s (%s)", arch, strings.Join(missing, ", "), aptHint(pkgs...))
}

// crossPrefix is the CROSS_COMPILE prefix that building for arch needs on
// this machine, or "".
func crossPrefix(arch string) string {
	switch {
	case arch == "x86_64" && runtime.GOARCH != "amd64":
		return "x86_64-linux-gnu-"
	case arch == "arm64" && runtime.GOARCH != "arm64":
		return "aarch64-linux-gnu-"
	}
	return ""
}
