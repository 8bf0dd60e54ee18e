// Package dist distributes airlock's images: it downloads a variant's
// root tree from a manifest into the image cache (Download), and writes
// the images built here, with a manifest, into a folder that any static
// HTTP server can serve as a team's mirror (Publish).
//
// A manifest is JSON:
//
//	{
//	  "format": 1,
//	  "version": "2026-11-25T10:00:00Z",
//	  "artifacts": {
//	    "rootfs-standard-amd64": {
//	      "url": "rootfs-standard-amd64-3f2a9c1d7b4e.tar.zst",
//	      "sha256": "3f2a9c1d7b4e...",
//	      "size": 31457280,
//	      "config": {"env": ["PATH=/usr/local/bin:/usr/bin:/bin"]}
//	    },
//	    "erofs-standard-amd64": {"url": "...", "sha256": "...", "size": 98566144}
//	  }
//	}
//
// "rootfs-VARIANT-ARCH" is the variant's root tree as a tar compressed
// with zstd; "erofs-VARIANT-ARCH", when there, the same tree as an erofs
// file (the vm level's disk). ARCH is as Go names it (amd64, arm64). A
// url is absolute or relative to the manifest's own URL. Other names
// ("kernel-amd64") may be there for other parts of airlock.
package dist

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/image/store"
	"github.com/airlock-sandbox/airlock/internal/strictjson"
)

const (
	// Format is the manifest format this airlock reads and writes. A
	// manifest with a higher one needs a newer airlock; what a newer
	// format adds is refused here, not silently ignored.
	Format = 1

	// MaxManifestSize bounds a manifest's bytes.
	MaxManifestSize = 4 << 20
	// maxArtifacts bounds a manifest's artifacts.
	maxArtifacts = 4096
	// maxArtifactSize bounds one artifact's bytes (1 TiB).
	maxArtifactSize = 1 << 40
	maxURL          = 4096
	maxName         = 128
	maxVersion      = 128
	// maxConfigItems bounds the entries of each list in an artifact's
	// config.
	maxConfigItems = 1024
)

// Manifest lists the artifacts a mirror serves.
type Manifest struct {
	// Format is the manifest's format; 0 is read as 1.
	Format int `json:"format,omitempty"`
	// Version names this set of artifacts (a release, a date).
	Version string `json:"version"`
	// Artifacts by name: "rootfs-VARIANT-ARCH", "erofs-VARIANT-ARCH".
	Artifacts map[string]Artifact `json:"artifacts"`
}

// Artifact is one file a mirror serves.
type Artifact struct {
	// URL is absolute (http, https; file only in a local manifest), or
	// relative to the manifest's URL.
	URL string `json:"url"`
	// SHA256 is the file's sha256, 64 lower-case hex digits.
	SHA256 string `json:"sha256"`
	// Size is the file's length in bytes.
	Size int64 `json:"size"`
	// Config is how to run the image, for a root tree.
	Config *store.Config `json:"config,omitempty"`
}

// RootFSName is the name of a variant's root tree archive for arch.
func RootFSName(variant, arch string) string { return "rootfs-" + variant + "-" + arch }

// EROFSName is the name of a variant's erofs file for arch.
func EROFSName(variant, arch string) string { return "erofs-" + variant + "-" + arch }

// ParseManifest decodes and checks a manifest. Members it does not know
// are refused and named (a "sha265" in a manifest written by hand is a
// mistake to say, not to skip), as is everything out of bounds.
func ParseManifest(data []byte) (*Manifest, error) {
	if len(data) > MaxManifestSize {
		return nil, fmt.Errorf("the manifest has %d bytes, more than the %d it may have", len(data), MaxManifestSize)
	}
	var m Manifest
	if err := strictjson.Decode(data, &m); err != nil {
		return nil, fmt.Errorf("the manifest is not valid: %w", err)
	}
	if err := m.Check(); err != nil {
		return nil, err
	}
	if m.Format == 0 {
		m.Format = Format
	}
	return &m, nil
}

// Check checks what a manifest holds.
func (m *Manifest) Check() error {
	if m.Format < 0 || m.Format > Format {
		return fmt.Errorf("the manifest's format is %d, and this airlock reads format %d: upgrade airlock", m.Format, Format)
	}
	if m.Version == "" || len(m.Version) > maxVersion || !printable(m.Version) {
		return fmt.Errorf("the manifest's version must be 1 to %d printable characters", maxVersion)
	}
	if len(m.Artifacts) == 0 {
		return fmt.Errorf("the manifest lists no artifacts")
	}
	if len(m.Artifacts) > maxArtifacts {
		return fmt.Errorf("the manifest lists %d artifacts, more than the %d it may", len(m.Artifacts), maxArtifacts)
	}
	for _, name := range slices.Sorted(maps.Keys(m.Artifacts)) {
		if err := checkName(name, maxName); err != nil {
			return fmt.Errorf("the manifest's artifact %s: %w", quote(name), err)
		}
		if err := m.Artifacts[name].check(); err != nil {
			return fmt.Errorf("the manifest's artifact %s: %w", name, err)
		}
	}
	return nil
}

func (a Artifact) check() error {
	if a.URL == "" || len(a.URL) > maxURL {
		return fmt.Errorf("its url must have 1 to %d bytes", maxURL)
	}
	u, err := url.Parse(a.URL)
	if err != nil {
		return fmt.Errorf("its url: %w", err)
	}
	switch u.Scheme {
	case "", "http", "https", "file":
	default:
		return fmt.Errorf("its url %s has the scheme %q: airlock downloads over http, https or from files", quote(a.URL), u.Scheme)
	}
	if len(a.SHA256) != 64 || strings.Trim(a.SHA256, "0123456789abcdef") != "" {
		return fmt.Errorf("its sha256 %s is not 64 lower-case hex digits", quote(a.SHA256))
	}
	if a.Size <= 0 || a.Size > maxArtifactSize {
		return fmt.Errorf("its size %d is not between 1 and %d bytes", a.Size, int64(maxArtifactSize))
	}
	if c := a.Config; c != nil {
		for what, list := range map[string][]string{"env": c.Env, "entrypoint": c.Entrypoint, "cmd": c.Cmd} {
			if len(list) > maxConfigItems {
				return fmt.Errorf("its config's %s has %d entries, more than the %d it may", what, len(list), maxConfigItems)
			}
		}
		for _, e := range c.Env {
			if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
				return fmt.Errorf("its config's env entry %s is not NAME=VALUE", quote(e))
			}
		}
	}
	return nil
}

// Encode returns the manifest as indented JSON.
func (m *Manifest) Encode() ([]byte, error) {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Variants lists the variants the manifest has a root tree of for arch.
func (m *Manifest) Variants(arch string) []string {
	var out []string
	for name := range m.Artifacts {
		rest, ok := strings.CutPrefix(name, "rootfs-")
		if !ok {
			continue
		}
		if v, ok := strings.CutSuffix(rest, "-"+arch); ok && v != "" {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return out
}

// checkName checks a variant's or an artifact's name: it becomes part of
// file names and URLs.
func checkName(name string, limit int) error {
	if name == "" || len(name) > limit {
		return fmt.Errorf("a name must have 1 to %d characters", limit)
	}
	for i, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
		case r == '-' || r == '_' || r == '.':
			if i == 0 {
				return fmt.Errorf("a name must start with a lower-case letter or a digit")
			}
		default:
			return fmt.Errorf("a name may have only lower-case letters, digits, '-', '_' and '.'")
		}
	}
	return nil
}

// CheckVariant checks a variant's name.
func CheckVariant(name string) error {
	if err := checkName(name, 64); err != nil {
		return fmt.Errorf("variant %s: %w", quote(name), err)
	}
	return nil
}

func printable(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f || r == 0xfffd {
			return false
		}
	}
	return true
}

// quote quotes what may come from a hostile manifest, shortened.
func quote(s string) string {
	const limit = 80
	if len(s) > limit {
		return fmt.Sprintf("%q...", s[:limit])
	}
	return fmt.Sprintf("%q", s)
}
