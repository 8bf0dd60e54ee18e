package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/image/store"
)

// runDistCLI runs the built airlock with env added, and returns its stdout,
// stderr and exit code.
func runDistCLI(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cliBin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("airlock %q: %v", args, err)
	}
	return out.String(), errb.String(), code
}

// `airlock image publish` writes a mirror that a static server serves,
// and `airlock prefetch` gets an image from it into another cache.
func TestPublishAndPrefetch(t *testing.T) {
	srcDir := t.TempDir()
	src, err := store.Open(srcDir)
	if err != nil {
		t.Fatal(err)
	}
	img, err := src.Make(context.Background(), store.Key([]byte(t.Name())), func(ctx context.Context, dir string) (store.Meta, error) {
		root := filepath.Join(dir, "rootfs")
		os.MkdirAll(filepath.Join(root, "etc"), 0o755)
		os.WriteFile(filepath.Join(root, "etc/hello"), []byte("from the mirror\n"), 0o644)
		os.Symlink("hello", filepath.Join(root, "etc/link"))
		return store.Meta{Kind: "variant", Arch: runtime.GOARCH, Config: store.Config{Cmd: []string{"/bin/sh"}}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Tag("tiny", img.Key); err != nil {
		t.Fatal(err)
	}
	mirror := t.TempDir()
	out, stderr, code := runDistCLI(t, []string{"AIRLOCK_CACHE_DIR=" + srcDir}, "image", "publish", mirror, "--no-erofs", "--json")
	if code != 0 {
		t.Fatalf("image publish: exit %d: %s", code, stderr)
	}
	var pub struct {
		Written  []string `json:"written"`
		Manifest string   `json:"manifest"`
	}
	if err := json.Unmarshal([]byte(out), &pub); err != nil || len(pub.Written) != 1 || pub.Manifest != filepath.Join(mirror, "manifest.json") {
		t.Fatalf("image publish printed %q (%v)", out, err)
	}
	srv := httptest.NewServer(http.FileServer(http.Dir(mirror)))
	defer srv.Close()

	dstDir := t.TempDir()
	env := []string{"AIRLOCK_CACHE_DIR=" + dstDir, "AIRLOCK_IMAGE_MANIFEST=" + srv.URL + "/manifest.json", "XDG_CONFIG_HOME=" + t.TempDir()}
	out, stderr, code = runDistCLI(t, env, "prefetch", "--variant", "tiny", "--json")
	if code != 0 {
		t.Fatalf("prefetch: exit %d: %s", code, stderr)
	}
	var got struct {
		Manifest string        `json:"manifest"`
		Images   []store.Image `json:"images"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got.Images) != 1 {
		t.Fatalf("prefetch printed %q (%v)", out, err)
	}
	if b, err := os.ReadFile(filepath.Join(got.Images[0].RootFS, "etc/link")); err != nil || string(b) != "from the mirror\n" {
		t.Fatalf("the prefetched tree: %q, %v", b, err)
	}
	if got.Images[0].Config.Cmd[0] != "/bin/sh" || !strings.HasPrefix(got.Images[0].RootFS, dstDir) {
		t.Errorf("prefetched image %+v", got.Images[0])
	}
	if !strings.Contains(stderr, "tiny: download") || !strings.Contains(stderr, "tiny: done") {
		t.Errorf("prefetch showed no progress: %q", stderr)
	}

	// The default variant is standard, which this mirror lacks: the
	// error lists what it has.
	_, stderr, code = runDistCLI(t, env, "prefetch")
	if code != 125 || !strings.Contains(stderr, `no variant "standard"; it has tiny`) {
		t.Errorf("prefetch of a missing default: exit %d, %q", code, stderr)
	}
	// --all takes every variant the mirror has.
	if out, stderr, code = runDistCLI(t, env, "prefetch", "--all"); code != 0 || !strings.HasPrefix(out, "tiny\t") {
		t.Errorf("prefetch --all: exit %d, %q, %q", code, out, stderr)
	}
}

// Without a manifest configured, prefetch says how to configure one.
func TestPrefetchNoManifest(t *testing.T) {
	env := []string{"AIRLOCK_CACHE_DIR=" + t.TempDir(), "AIRLOCK_IMAGE_MANIFEST=", "XDG_CONFIG_HOME=" + t.TempDir()}
	out, _, code := runDistCLI(t, env, "prefetch", "--json")
	var e struct{ Error string }
	if code != 125 || json.Unmarshal([]byte(out), &e) != nil || !strings.Contains(e.Error, "AIRLOCK_IMAGE_MANIFEST") {
		t.Fatalf("prefetch with no manifest: exit %d, %q", code, out)
	}
}
