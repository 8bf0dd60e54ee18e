package oci_test

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/airlock-sandbox/airlock/internal/testbin"
)

// registry is Debian's docker-registry (the CNCF distribution registry),
// run by the test on a loopback port with its storage in a temporary
// folder, behind a reverse proxy that counts the blob downloads.
type registry struct {
	// Host is the proxy's host:port, which pulls go through; Direct the
	// registry's own, which pushes go to.
	Host, Direct string
	user, pass   string

	mu    sync.Mutex
	blobs map[string]int // GETs of each blob digest through Host
}

type registryOptions struct {
	// auth protects the registry with htpasswd, user "tester".
	auth bool
}

func freePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func startRegistry(t testing.TB, o registryOptions) *registry {
	t.Helper()
	addr := freePort(t)
	r := &registry{Direct: addr, blobs: map[string]int{}}
	htpasswd := ""
	if o.auth {
		hp, err := exec.LookPath("htpasswd")
		if err != nil {
			t.Fatal("htpasswd is not installed: run scripts/deps.sh (Debian: apt-get install apache2-utils)")
		}
		r.user, r.pass = "tester", "s3cret-pass"
		out, err := exec.Command(hp, "-Bbn", r.user, r.pass).Output()
		if err != nil {
			t.Fatal(err)
		}
		htpasswd = string(out)
	}
	testbin.RunRegistry(t, addr, htpasswd)

	target, _ := url.Parse("http://" + addr)
	proxy := httputil.NewSingleHostReverseProxy(target)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.Host = l.Addr().String()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if i := strings.Index(req.URL.Path, "/blobs/sha256:"); i >= 0 && req.Method == http.MethodGet {
			r.mu.Lock()
			r.blobs[req.URL.Path[i+len("/blobs/"):]]++
			r.mu.Unlock()
		}
		proxy.ServeHTTP(w, req)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return r
}

// BlobGets returns how many times each blob was downloaded.
func (r *registry) BlobGets(digest string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.blobs[digest]
}

func (r *registry) pushOptions() []remote.Option {
	if r.user == "" {
		return nil
	}
	return []remote.Option{remote.WithAuth(&authn.Basic{Username: r.user, Password: r.pass})}
}

// Push pushes img to the registry as repo:tag and returns its manifest
// digest.
func (r *registry) Push(t testing.TB, repoTag string, img v1.Image) string {
	t.Helper()
	ref, err := name.ParseReference(r.Direct + "/" + repoTag)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, r.pushOptions()...); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

// PushIndex pushes a multi-platform index.
func (r *registry) PushIndex(t testing.TB, repoTag string, idx v1.ImageIndex) {
	t.Helper()
	ref, err := name.ParseReference(r.Direct + "/" + repoTag)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(ref, idx, r.pushOptions()...); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
}

// file is one entry of a test layer.
type file struct {
	name, body, link string
	typ              byte
	mode             int64
	uid              int
	size             int64 // a body of this many pseudo-random bytes
}

// tarOf builds an uncompressed layer.
func tarOf(t testing.TB, files ...file) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Linkname: f.link, Typeflag: f.typ, Mode: f.mode, Uid: f.uid, ModTime: time.Unix(1700000000, 0)}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
			if h.Typeflag == tar.TypeDir {
				h.Mode = 0o755
			}
		}
		body := []byte(f.body)
		if f.size > 0 {
			body = pseudoRandom(f.name, f.size)
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write(body)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// pseudoRandom is n incompressible bytes that depend on seed.
func pseudoRandom(seed string, n int64) []byte {
	b := make([]byte, n)
	x := uint64(14695981039346656037)
	for _, c := range []byte(seed) {
		x = (x ^ uint64(c)) * 1099511628211
	}
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x)
	}
	return b
}

// layerOf makes a gzip layer of files.
func layerOf(t testing.TB, files ...file) v1.Layer {
	t.Helper()
	b := tarOf(t, files...)
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// imageOf makes a linux image for this machine from layers, with cfg.
func imageOf(t testing.TB, cfg v1.Config, layers ...v1.Layer) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config = cfg
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// dockerConfig writes a docker config.json with the registry's
// credentials into a new folder and points DOCKER_CONFIG at it.
func (r *registry) dockerConfig(t *testing.T) {
	dir := t.TempDir()
	auth := fmt.Sprintf(`{"auths":{%q:{"username":%q,"password":%q}}}`, r.Host, r.user, r.pass)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(auth), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DOCKER_CONFIG", dir)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}
