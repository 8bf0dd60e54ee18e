package oci

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// Where an image comes from.
const (
	kindRegistry = "registry"
	kindLayout   = "oci-layout"
	kindArchive  = "docker-archive"
)

// Prefixes that name a local image explicitly, as skopeo's transports do.
const (
	layoutPrefix  = "oci:"
	archivePrefix = "docker-archive:"
)

// parsedRef is a reference taken apart.
type parsedRef struct {
	kind string
	// reg is a registry reference (kindRegistry).
	reg name.Reference
	// path is a local layout folder or archive, absolute; sel its
	// ":tag" or "@digest" (without the ':'), or "".
	path, sel string
}

// name is the canonical name of the reference, as the cache keeps it:
// docker.io/library/python:3.12-slim, host:5000/repo@sha256:...,
// oci:/abs/dir:tag, docker-archive:/abs/file.tar.
func (p parsedRef) name() string {
	switch p.kind {
	case kindRegistry:
		return canonical(p.reg)
	case kindLayout:
		return layoutPrefix + p.path + selSuffix(p.sel)
	default:
		return archivePrefix + p.path + selSuffix(p.sel)
	}
}

func selSuffix(sel string) string {
	switch {
	case sel == "":
		return ""
	case strings.HasPrefix(sel, "sha256:"):
		return "@" + sel
	default:
		return ":" + sel
	}
}

// canonical spells a registry reference as docker shows it: Docker Hub
// as docker.io, its official images under library/.
func canonical(ref name.Reference) string {
	repo := ref.Context()
	reg := repo.RegistryStr()
	if reg == name.DefaultRegistry {
		reg = "docker.io"
	}
	s := reg + "/" + repo.RepositoryStr()
	switch r := ref.(type) {
	case name.Tag:
		return s + ":" + r.TagStr()
	case name.Digest:
		return s + "@" + r.DigestStr()
	}
	return s
}

// repoName is the canonical name of a registry reference's repository.
func repoName(ref name.Reference) string {
	repo := ref.Context()
	reg := repo.RegistryStr()
	if reg == name.DefaultRegistry {
		reg = "docker.io"
	}
	return reg + "/" + repo.RepositoryStr()
}

// CanonicalName returns the name the image cache keeps the image that
// ref names under, without reaching a registry: look it up with
// store.Cache.Lookup to use a pulled image offline. A local layout or
// archive can change under the same name: Pull it again (that is cheap;
// it makes nothing when its manifest is unchanged).
func CanonicalName(ref string) (string, error) {
	p, err := parseRef(ref, false)
	if err != nil {
		return "", err
	}
	return p.name(), nil
}

// parseRef tells a local image from a registry reference:
//
//   - "oci:PATH[:TAG|@DIGEST]" is an OCI image layout folder, and
//     "docker-archive:PATH[:TAG]" a `docker save` tarball, explicitly;
//   - otherwise a PATH (with an optional :TAG or @DIGEST after it) that
//     exists is local: a folder holding an oci-layout file is a layout,
//     a regular file spelled as a path (with a "/", or ending in .tar)
//     a `docker save` tarball;
//   - anything else is a registry reference, completed as docker
//     completes it: python:3.12-slim is docker.io/library/python:3.12-slim,
//     no tag is :latest.
func parseRef(ref string, insecure bool) (parsedRef, error) {
	if ref == "" {
		return parsedRef{}, errors.New("an empty image reference")
	}
	if rest, ok := strings.CutPrefix(ref, layoutPrefix); ok {
		return localRef(kindLayout, rest, true)
	}
	if rest, ok := strings.CutPrefix(ref, archivePrefix); ok {
		return localRef(kindArchive, rest, true)
	}
	if p, err := localRef("", ref, false); err == nil {
		return p, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return parsedRef{}, err
	}
	var opts []name.Option
	if insecure {
		opts = append(opts, name.Insecure)
	}
	r, err := name.ParseReference(ref, opts...)
	if err != nil {
		return parsedRef{}, fmt.Errorf("%q is not an image reference (NAME[:TAG|@sha256:DIGEST], a local oci-layout folder or a docker save tarball): %w", ref, err)
	}
	return parsedRef{kind: kindRegistry, reg: r}, nil
}

// localRef finds the local path that ref starts with: all of it, or the
// longest part before a ":" or "@" that exists; what follows is the tag
// or digest.
// kind, when set, is what the path must be; explicit says the user
// named a local image, so a missing one is an error of its own.
func localRef(kind, ref string, explicit bool) (parsedRef, error) {
	type cand struct{ path, sel string }
	cands := []cand{{ref, ""}}
	for i := len(ref) - 1; i > 0; i-- {
		if ref[i] == ':' || ref[i] == '@' {
			cands = append(cands, cand{ref[:i], ref[i+1:]})
		}
	}
	for _, c := range cands {
		if c.path == "" {
			continue
		}
		fi, err := os.Stat(c.path)
		if err != nil {
			continue
		}
		abs, err := filepath.Abs(c.path)
		if err != nil {
			return parsedRef{}, err
		}
		k := ""
		switch {
		case fi.IsDir():
			if _, err := os.Stat(filepath.Join(c.path, "oci-layout")); err == nil {
				k = kindLayout
			} else if explicit {
				return parsedRef{}, fmt.Errorf("%s is not an OCI image layout: it has no oci-layout file", abs)
			}
		case fi.Mode().IsRegular() && (explicit || looksLikePath(c.path)):
			k = kindArchive
		}
		if k == "" {
			continue
		}
		if kind != "" && k != kind {
			return parsedRef{}, fmt.Errorf("%s is not a %s", abs, kind)
		}
		if k == kindArchive && strings.HasPrefix(c.sel, "sha256:") {
			return parsedRef{}, fmt.Errorf("a docker save tarball's image is chosen by its tag (%s:NAME:TAG), not a digest", abs)
		}
		return parsedRef{kind: k, path: abs, sel: c.sel}, nil
	}
	if explicit {
		return parsedRef{}, fmt.Errorf("no %s at %q: %w", kind, ref, fs.ErrNotExist)
	}
	return parsedRef{}, fs.ErrNotExist
}

// looksLikePath reports whether p is spelled as a file, so that a file
// that happens to be called "python" in the current folder does not
// shadow the registry's python.
func looksLikePath(p string) bool {
	return strings.ContainsRune(p, filepath.Separator) || strings.HasPrefix(p, ".") || strings.HasSuffix(p, ".tar")
}
