// Package vmkernel builds and finds the guest kernels of the vm
// boundary: Debian's linux-source, `make tinyconfig` and a fragment kept
// here (fragments/<arch>.config), compiled by build.sh. Kernels live in
// the cache directory under kernels/<key>/, where the key is a hash of
// what the build depends on: the source package and its version, the
// architecture, the fragment and the build script. A kernel is built once
// per key and reused.
//
// A kernel's directory holds the image (vmlinux on x86_64, which QEMU's
// microvm and Firecracker boot through its PVH entry; Image on arm64),
// its final .config as config, the build's log and manifest.json.
package vmkernel

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Arches are the architectures a guest kernel is built for.
var Arches = []string{"x86_64", "arm64"}

//go:embed fragments/x86_64.config
var fragmentX86 []byte

//go:embed fragments/arm64.config
var fragmentARM []byte

//go:embed build.sh
var buildScript []byte

// keyVersion changes when the way a key is derived changes.
const keyVersion = "airlock-kernel/1"

// kernelsDir is the folder of the cache directory that holds kernels.
const kernelsDir = "kernels"

// manifestFile is a kernel's description, written last: a directory
// without it is not a kernel.
const manifestFile = "manifest.json"

// Manifest describes a built kernel.
type Manifest struct {
	Key            string    `json:"key"`
	Arch           string    `json:"arch"`
	Source         string    `json:"source"`         // linux-source-6.1
	SourceVersion  string    `json:"source_version"` // the package's version, 6.1.192-3
	Release        string    `json:"release"`        // uname -r in the guest
	FragmentSHA256 string    `json:"fragment_sha256"`
	ScriptSHA256   string    `json:"script_sha256"`
	Image          string    `json:"image"` // the file name of the kernel image in the directory
	Size           int64     `json:"size"`
	BuildMS        int64     `json:"build_ms"`
	BuiltAt        time.Time `json:"built_at"`
}

// Kernel is a built kernel in the cache.
type Kernel struct {
	Manifest
	Dir string `json:"dir"`
	// Path is the kernel image: what QEMU's -kernel takes.
	Path string `json:"path"`
	// Current is whether it was built from this airlock's fragment and
	// build script.
	Current bool `json:"current"`
}

// EnvCacheDir names the environment variable of the cache directory
// whose kernels the vm level boots and `airlock kernel` builds, when it
// is not the image cache's.
const EnvCacheDir = "AIRLOCK_KERNEL_CACHE"

// ErrNotBuilt is returned by Find when the cache holds no kernel for the
// current fragment.
var ErrNotBuilt = errors.New("no guest kernel built")

// Fragment is the config fragment of arch.
func Fragment(arch string) ([]byte, error) {
	switch arch {
	case "x86_64":
		return fragmentX86, nil
	case "arm64":
		return fragmentARM, nil
	}
	return nil, fmt.Errorf("unknown kernel architecture %q (one of %s)", arch, strings.Join(Arches, ", "))
}

// HostArch is the kernel architecture of the machine airlock was built
// for, the default of Build and Find.
func HostArch(goarch string) string {
	if goarch == "arm64" {
		return "arm64"
	}
	return "x86_64"
}

// Key is the cache key of the kernel of arch built from src with the
// current fragment and build script.
func Key(src Source, arch string) (string, error) {
	frag, err := Fragment(arch)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\narch=%s\nsource=%s\nversion=%s\nfragment=%s\nscript=%s\n",
		keyVersion, arch, src.Package, src.Version, sum(frag), sum(buildScript))
	return hex.EncodeToString(h.Sum(nil))[:32], nil
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// current reports whether m was built from this airlock's fragment and
// build script.
func current(m Manifest) bool {
	frag, err := Fragment(m.Arch)
	return err == nil && m.FragmentSHA256 == sum(frag) && m.ScriptSHA256 == sum(buildScript)
}

// List returns the kernels in the cache directory, the current ones
// first, then by architecture and newest first.
func List(cacheDir string) ([]Kernel, error) {
	root := filepath.Join(cacheDir, kernelsDir)
	ents, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list the guest kernels: %w", err)
	}
	var out []Kernel
	for _, e := range ents {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		k, err := read(filepath.Join(root, e.Name()))
		if err != nil {
			continue // being built, or damaged: not a kernel
		}
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b Kernel) int {
		switch {
		case a.Current != b.Current:
			if a.Current {
				return -1
			}
			return 1
		case a.Arch != b.Arch:
			return strings.Compare(a.Arch, b.Arch)
		}
		return b.BuiltAt.Compare(a.BuiltAt)
	})
	return out, nil
}

// read reads the kernel in dir.
func read(dir string) (Kernel, error) {
	b, err := os.ReadFile(filepath.Join(dir, manifestFile))
	if err != nil {
		return Kernel{}, err
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return Kernel{}, fmt.Errorf("read %s: %w", filepath.Join(dir, manifestFile), err)
	}
	if m.Key != filepath.Base(dir) {
		return Kernel{}, fmt.Errorf("%s: key %q is not its directory's", filepath.Join(dir, manifestFile), m.Key)
	}
	if m.Image == "" || filepath.Base(m.Image) != m.Image {
		return Kernel{}, fmt.Errorf("%s: bad image name %q", filepath.Join(dir, manifestFile), m.Image)
	}
	p := filepath.Join(dir, m.Image)
	if _, err := os.Stat(p); err != nil {
		return Kernel{}, err
	}
	return Kernel{Manifest: m, Dir: dir, Path: p, Current: current(m)}, nil
}

// Find returns the kernel of arch built from the current fragment and
// build script: the one built from src when src is known (the
// linux-source installed here) and it is built, else the newest from
// any source version. It returns an error
// wrapping ErrNotBuilt, which says how to build one, when there is none.
func Find(cacheDir, arch string, src *Source) (Kernel, error) {
	if _, err := Fragment(arch); err != nil {
		return Kernel{}, err
	}
	if src != nil {
		key, err := Key(*src, arch)
		if err != nil {
			return Kernel{}, err
		}
		if k, err := read(filepath.Join(cacheDir, kernelsDir, key)); err == nil {
			return k, nil
		}
	}
	ks, err := List(cacheDir)
	if err != nil {
		return Kernel{}, err
	}
	for _, k := range ks {
		if k.Current && k.Arch == arch {
			return k, nil
		}
	}
	return Kernel{}, fmt.Errorf("%w for %s in %s from this airlock's config fragment (airlock kernel build --arch %s builds it)",
		ErrNotBuilt, arch, filepath.Join(cacheDir, kernelsDir), arch)
}
