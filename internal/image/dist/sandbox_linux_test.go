//go:build linux

package dist_test

import (
	"bytes"
	"debug/elf"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/image/dist"
	"github.com/airlock-sandbox/airlock/internal/image/store"
	"github.com/airlock-sandbox/airlock/internal/testbin"
)

// busyboxTree fills root with Debian's static busybox and the links a
// shell needs: a whole userland in one file.
func busyboxTree(t *testing.T, root string) {
	t.Helper()
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Skipf("no /bin/busybox (Debian: apt-get install busybox-static): %v", err)
	}
	if f, err := elf.NewFile(bytes.NewReader(bb)); err != nil || slices.ContainsFunc(f.Progs, func(p *elf.Prog) bool { return p.Type == elf.PT_INTERP }) {
		t.Skipf("/bin/busybox is not a static executable (Debian: apt-get install busybox-static): %v", err)
	}
	for _, d := range []string{"bin", "etc", "tmp", "workspace"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "bin/busybox"), bb, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"sh", "echo", "cat", "ls", "id", "stat", "readlink"} {
		if err := os.Symlink("busybox", filepath.Join(root, "bin", name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "etc/motd"), []byte("downloaded from a mirror\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A tree published, served, downloaded into a fresh cache and run in a
// real process sandbox, as `airlock run --rootfs` runs an image.
func TestDownloadedImageRunsInSandbox(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the agent")
	}
	src := openCache(t, t.TempDir())
	makeImage(t, src, "busybox", store.Config{}, busyboxTree)
	out := t.TempDir()
	if _, err := dist.Publish(testCtx(t), src, out, []string{"busybox"}, dist.PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	m := serve(t, out)
	cache := openCache(t, t.TempDir())
	img, err := (&dist.Client{Manifest: m.URL + "/manifest.json", Fetcher: fastFetcher()}).Download(testCtx(t), cache, "busybox", nil)
	if err != nil {
		t.Fatal(err)
	}

	bin, err := testbin.Dir("airlock-dist-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(bin) })
	agent, err := testbin.Build(bin, "airlock-guest")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("AIRLOCK_AGENT", agent[0])
	t.Setenv("AIRLOCK_HOME", filepath.Join(bin, "home"))

	ctx := testCtx(t)
	sb, err := airlock.Create(ctx, airlock.Config{RootFS: img.RootFS})
	if err != nil {
		t.Fatalf("create a sandbox on the downloaded image: %v", err)
	}
	defer func() {
		if err := sb.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	}()
	res, err := sb.Run(ctx, airlock.Command{
		Argv: []string{"/bin/sh", "-c", "cat /etc/motd; readlink /bin/sh; echo written > /tmp/x && cat /tmp/x; test -e /usr/bin/python3 && echo host-visible; exit 0"},
		Dir:  "/",
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(res.Stdout), "downloaded from a mirror\nbusybox\nwritten\n"; got != want {
		t.Fatalf("stdout %q (stderr %q, exit %d), want %q", got, res.Stderr, res.ExitCode, want)
	}
	if _, err := os.Stat(filepath.Join(img.RootFS, "tmp/x")); err == nil {
		t.Error("a file written in the sandbox appeared in the cached image")
	}
	if !strings.Contains(img.Source, m.URL) {
		t.Errorf("the image's source %q does not name the mirror", img.Source)
	}
}
