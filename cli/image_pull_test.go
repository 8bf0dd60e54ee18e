package cli

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/airlock-sandbox/airlock/internal/image/store"
)

// testImage is a one-layer linux image for this machine holding /hello.
func testImage(t *testing.T) v1.Image {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "hello", Mode: 0o644, Size: 5, Typeflag: tar.TypeReg})
	tw.Write([]byte("world"))
	tw.Close()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		t.Fatal(err)
	}
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config.Cmd = []string{"/hello"}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func TestImagePull(t *testing.T) {
	t.Setenv("AIRLOCK_CACHE_DIR", filepath.Join(t.TempDir(), "cache"))
	img := testImage(t)
	dir := filepath.Join(t.TempDir(), "layout")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "v1"})); err != nil {
		t.Fatal(err)
	}
	digest, _ := img.Digest()

	r := runCLI(t, nil, "image", "pull", "oci:"+dir+":v1")
	if r.code != 0 {
		t.Fatalf("image pull: exit %d: %s", r.code, r.stderr)
	}
	if !strings.Contains(r.stdout, "oci:"+dir+":v1\t"+digest.String()) {
		t.Fatalf("stdout %q, want the name and key", r.stdout)
	}
	for _, want := range []string{"oci:" + dir + ":v1: resolve", ": download " + digestOfLayer(t, img), ": unpack ", ": done"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("progress %q lacks %q", r.stderr, want)
		}
	}

	// --json: the image on stdout.
	tarPath := filepath.Join(t.TempDir(), "saved.tar")
	if err := tarball.WriteToFile(tarPath, nil, img); err != nil {
		t.Fatal(err)
	}
	r = runCLI(t, nil, "image", "pull", "--json", tarPath)
	if r.code != 0 {
		t.Fatalf("image pull --json: exit %d: %s", r.code, r.stderr)
	}
	var got store.Image
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("stdout %q: %v", r.stdout, err)
	}
	if b, err := os.ReadFile(filepath.Join(got.RootFS, "hello")); err != nil || string(b) != "world" || got.Config.Cmd[0] != "/hello" {
		t.Fatalf("pulled image %+v: %q %v", got, b, err)
	}

	r = runCLI(t, nil, "image", "pull", "oci:"+filepath.Join(t.TempDir(), "missing"))
	if r.code != 125 || !strings.Contains(r.stderr, "no oci-layout") {
		t.Fatalf("a missing layout: exit %d: %s", r.code, r.stderr)
	}
}

// digestOfLayer is the short digest of img's only layer, as progress
// shows it.
func digestOfLayer(t *testing.T, img v1.Image) string {
	ls, err := img.Layers()
	if err != nil || len(ls) != 1 {
		t.Fatal(err)
	}
	d, err := ls[0].Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.Hex[:12]
}
