// Package variant builds airlock's own images, minimal, standard and
// full, from Debian packages with mmdebstrap, into the image cache
// (package store), keyed by what defines them: the package list, the
// Debian suite, the architecture and the version of the build recipe.
//
// An image holds no part of airlock: the agent is handed to a sandbox
// when it starts, so one image serves every version of airlock.
package variant

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/image/store"
)

// recipeVersion is the version of how an image is built from its
// packages (mmdebstrap's options, what is stripped, the hooks). It is
// part of every key, so a change to the recipe makes new images rather
// than reusing ones built the old way: bump it with any such change.
const recipeVersion = 2

// Variant is an image built from Debian packages.
type Variant struct {
	// Name is what users ask for: "minimal", "standard", "full".
	Name string `json:"name"`
	// About says what it is for, in a few words.
	About string `json:"about"`
	// Packages are the Debian packages installed on top of Debian's
	// essential set and apt (their dependencies come too).
	Packages []string `json:"packages"`
}

// Known returns the variants, smallest first.
//
// Every variant holds, besides Debian's essential set (which brings dash
// as /bin/sh, util-linux's su, login, base-passwd's /etc/passwd with
// root, dpkg) and apt:
//   - bash, coreutils: a shell and the usual tools (both essential, named
//     to say so);
//   - passwd: useradd and groupadd, so that code can make users of its
//     own and su to them;
//   - ca-certificates, curl: TLS that works, and a way to fetch;
//   - python3.
//
// Left out on purpose: tzdata (UTC works without it; pandas brings it to
// full), locales (glibc's C.UTF-8 is built in), an init system
// (airlock's agent is init), man pages and docs.
func Known() []Variant {
	base := []string{"bash", "coreutils", "passwd", "ca-certificates", "curl", "python3"}
	// python-is-python3 makes `python` run python3, as the seed's
	// examples call it; libc6-dev lets gcc link a program.
	std := slices.Concat(base, []string{
		"python3-pip", "python3-venv", "python-is-python3",
		"nodejs", "npm",
		"git", "openssh-client",
		"gcc", "libc6-dev", "make",
	})
	full := slices.Concat(std, []string{"python3-numpy", "python3-pandas", "ruby", "golang-go"})
	return []Variant{
		{Name: "minimal", About: "a shell, coreutils, curl, Python 3", Packages: base},
		{Name: "standard", About: "minimal + pip, venv, python, Node.js, npm, git, ssh, gcc, make", Packages: std},
		{Name: "full", About: "standard + numpy, pandas, Ruby, Go", Packages: full},
	}
}

// Names returns the variants' names, smallest first.
func Names() []string {
	var out []string
	for _, v := range Known() {
		out = append(out, v.Name)
	}
	return out
}

// IsVariant reports whether name is a variant's name.
func IsVariant(name string) bool {
	return slices.Contains(Names(), name)
}

// Get returns the variant called name, or an error that lists the known
// ones.
func Get(name string) (Variant, error) {
	for _, v := range Known() {
		if v.Name == name {
			return v, nil
		}
	}
	return Variant{}, fmt.Errorf("unknown image variant %q: the variants are %s", name, strings.Join(Names(), ", "))
}

// Environment variables that choose where packages come from.
const (
	EnvMirror         = "AIRLOCK_DEBIAN_MIRROR"
	EnvSecurityMirror = "AIRLOCK_DEBIAN_SECURITY_MIRROR"
	EnvSuite          = "AIRLOCK_DEBIAN_SUITE"
)

// Defaults of Source.
const (
	DefaultMirror         = "http://deb.debian.org/debian"
	DefaultSecurityMirror = "http://deb.debian.org/debian-security"
	DefaultSuite          = "bookworm"
)

// Source is where an image's packages come from.
type Source struct {
	// Mirror is the Debian archive, for Suite and Suite-updates.
	Mirror string `json:"mirror"`
	// SecurityMirror serves Suite-security; empty leaves security
	// updates out (and makes a different image).
	SecurityMirror string `json:"security_mirror,omitempty"`
	// Suite is the Debian release: "bookworm".
	Suite string `json:"suite"`
	// Arch is Debian's name of the architecture: "amd64", "arm64".
	Arch string `json:"arch"`
}

// SourceFromEnv is the default Source, with what $AIRLOCK_DEBIAN_MIRROR,
// $AIRLOCK_DEBIAN_SECURITY_MIRROR ("none" for no security updates) and
// $AIRLOCK_DEBIAN_SUITE say instead, for the architecture airlock runs
// on.
func SourceFromEnv() (Source, error) {
	arch, err := DebianArch(runtime.GOARCH)
	if err != nil {
		return Source{}, err
	}
	s := Source{Mirror: DefaultMirror, SecurityMirror: DefaultSecurityMirror, Suite: DefaultSuite, Arch: arch}
	if v := os.Getenv(EnvMirror); v != "" {
		s.Mirror = v
	}
	switch v := os.Getenv(EnvSecurityMirror); v {
	case "":
	case "none":
		s.SecurityMirror = ""
	default:
		s.SecurityMirror = v
	}
	if v := os.Getenv(EnvSuite); v != "" {
		s.Suite = v
	}
	return s, s.check()
}

// check refuses what could not be a mirror or a suite, before it
// reaches mmdebstrap's command line or an apt sources line.
func (s Source) check() error {
	for _, m := range []struct{ env, url string }{{EnvMirror, s.Mirror}, {EnvSecurityMirror, s.SecurityMirror}} {
		if m.url == "" && m.env == EnvSecurityMirror {
			continue
		}
		if !(strings.HasPrefix(m.url, "http://") || strings.HasPrefix(m.url, "https://") || strings.HasPrefix(m.url, "file:/")) ||
			strings.ContainsAny(m.url, " \t\r\n[]") {
			return fmt.Errorf("%s=%q is not a Debian mirror URL (http://, https:// or file:/, without spaces), such as %s", m.env, m.url, DefaultMirror)
		}
	}
	if s.Suite == "" || strings.ContainsFunc(s.Suite, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '.')
	}) {
		return fmt.Errorf("%s=%q is not a Debian suite name, such as %s", EnvSuite, s.Suite, DefaultSuite)
	}
	if s.Arch == "" {
		return fmt.Errorf("no architecture to build for")
	}
	return nil
}

// DebianArch returns Debian's name of a Go architecture.
func DebianArch(goarch string) (string, error) {
	switch goarch {
	case "amd64", "arm64", "riscv64", "s390x", "loong64":
		return goarch, nil
	case "386":
		return "i386", nil
	case "arm":
		return "armhf", nil
	case "ppc64le":
		return "ppc64el", nil
	case "mips64le":
		return "mips64el", nil
	}
	return "", fmt.Errorf("debian has no port for the %s architecture to build an image from", goarch)
}

// definition is what a variant's key is the hash of.
type definition struct {
	Recipe   int      `json:"recipe"`
	Suite    string   `json:"suite"`
	Security bool     `json:"security"`
	Arch     string   `json:"arch"`
	Packages []string `json:"packages"`
}

// Key is the variant's content address in the image cache from src: the
// hash of its sorted package list, the suite (with or without security
// updates), the architecture and the recipe's version. The mirror is
// not part of it: any mirror of a suite serves the same packages.
func (v Variant) Key(src Source) string {
	pkgs := slices.Clone(v.Packages)
	slices.Sort(pkgs)
	pkgs = slices.Compact(pkgs)
	b, err := json.Marshal(definition{Recipe: recipeVersion, Suite: src.Suite, Security: src.SecurityMirror != "", Arch: src.Arch, Packages: pkgs})
	if err != nil {
		// A struct of strings always marshals.
		panic(err)
	}
	return store.Key(b)
}
