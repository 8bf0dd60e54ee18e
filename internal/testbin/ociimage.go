package testbin

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"runtime"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// BusyboxApplets are the commands BusyboxLayout links to busybox.
var BusyboxApplets = []string{"sh", "echo", "cat", "ls", "pwd", "id", "env", "stat", "touch", "mkdir", "hostname", "sleep"}

// LayerFile is an entry of a layer that BusyboxLayout adds.
type LayerFile struct {
	Name, Body, Link string
	Type             byte // tar.TypeReg when 0
	Mode             int64
	UID, GID         int
}

// BusyboxImage is an image for this machine: Debian's static busybox
// (/bin/busybox, from busybox-static) with its applets linked, then a
// layer for each of layers, and cfg as its config. It fails when busybox
// is missing.
func BusyboxImage(cfg v1.Config, layers ...[]LayerFile) (v1.Image, error) {
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return nil, fmt.Errorf("no /bin/busybox (Debian's busybox-static): %w", err)
	}
	base := []LayerFile{{Name: "bin/", Type: tar.TypeDir, Mode: 0o755}, {Name: "bin/busybox", Body: string(bb), Mode: 0o755}}
	for _, a := range BusyboxApplets {
		base = append(base, LayerFile{Name: "bin/" + a, Type: tar.TypeSymlink, Link: "busybox", Mode: 0o777})
	}
	img := empty.Image
	for _, files := range append([][]LayerFile{base}, layers...) {
		l, err := layerOf(files)
		if err != nil {
			return nil, err
		}
		if img, err = mutate.AppendLayers(img, l); err != nil {
			return nil, err
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Config = "linux", runtime.GOARCH, cfg
	return mutate.ConfigFile(img, cf)
}

// BusyboxLayout writes, in the new folder dir, an OCI image layout
// holding one BusyboxImage, tagged tag. It returns the reference that
// names it ("oci:DIR:TAG").
func BusyboxLayout(dir, tag string, cfg v1.Config, layers ...[]LayerFile) (string, error) {
	img, err := BusyboxImage(cfg, layers...)
	if err != nil {
		return "", err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return "", err
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": tag})); err != nil {
		return "", err
	}
	return "oci:" + dir + ":" + tag, nil
}

// layerOf is an uncompressed layer of files.
func layerOf(files []LayerFile) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.Name, Typeflag: f.Type, Mode: f.Mode, Linkname: f.Link, Uid: f.UID, Gid: f.GID, Format: tar.FormatPAX}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(f.Body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write([]byte(f.Body)); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
}
