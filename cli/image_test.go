package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/image/store"
)

// cachedBusybox puts an image made of Debian's static busybox in a new
// cache, named name, and returns the cache's directory.
func cachedBusybox(t *testing.T, name string, cfg store.Config) (string, store.Image) {
	t.Helper()
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Skip("no /bin/busybox (Debian's busybox-static)")
	}
	dir := t.TempDir()
	c, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	img, err := c.Make(context.Background(), store.Key([]byte(name)), func(_ context.Context, work string) (store.Meta, error) {
		bin := filepath.Join(work, "rootfs", "bin")
		if err := os.MkdirAll(bin, 0o755); err != nil {
			return store.Meta{}, err
		}
		if err := os.WriteFile(filepath.Join(bin, "busybox"), bb, 0o755); err != nil {
			return store.Meta{}, err
		}
		for _, a := range []string{"sh", "echo", "cat", "pwd"} {
			if err := os.Symlink("busybox", filepath.Join(bin, a)); err != nil {
				return store.Meta{}, err
			}
		}
		return store.Meta{Kind: "oci", Config: cfg}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Tag(name, img.Key); err != nil {
		t.Fatal(err)
	}
	return dir, img
}

// run --image with no command runs the image's own, in its working
// directory, with its environment; image list, rm and prune manage the
// cache.
func TestRunImageAndImageCommands(t *testing.T) {
	dir, img := cachedBusybox(t, "registry.test/tools/hello:1", store.Config{
		Env: []string{"PATH=/bin", "WHO=image"}, WorkingDir: "/app",
		Entrypoint: []string{"/bin/sh", "-c"}, Cmd: []string{`echo "hello from $WHO in $(pwd)"`},
	})
	t.Setenv("AIRLOCK_CACHE_DIR", dir)
	r := runCLI(t, nil, "run", "--image", "registry.test/tools/hello:1")
	if r.code != 0 || r.stdout != "hello from image in /app\n" {
		t.Fatalf("run --image with no command: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	// As docker runs them: a command's words follow the image's
	// entrypoint (here /bin/sh -c); --entrypoint replaces it and drops
	// the image's command, and "" runs the words alone.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--", "echo $WHO"}, "caller\n"},
		{[]string{"--entrypoint", "", "--", "sh", "-c", "echo $WHO from sh"}, "caller from sh\n"},
		{[]string{"--entrypoint", "/bin/echo", "--", "a", "b"}, "a b\n"},
		{[]string{"--entrypoint", "/bin/echo"}, "\n"},
	} {
		r = runCLI(t, nil, append([]string{"run", "--image", "registry.test/tools/hello:1", "-e", "WHO=caller"}, c.args...)...)
		if r.code != 0 || r.stdout != c.want {
			t.Fatalf("run --image %q: exit %d, stdout %q, stderr %q; want %q", c.args, r.code, r.stdout, r.stderr, c.want)
		}
	}
	// The same in a detached sandbox, whose supervisor puts the command
	// together.
	r = runCLI(t, nil, "run", "-d", "--image", "registry.test/tools/hello:1", "-e", "WHO=detached", "--", "echo $WHO")
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 || id == "" {
		t.Fatalf("run -d --image: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r = runCLI(t, nil, "wait", id); strings.TrimSpace(r.stdout) != "0" {
		t.Fatalf("wait: %q %q", r.stdout, r.stderr)
	}
	if r = runCLI(t, nil, "logs", id); r.stdout != "detached\n" {
		t.Fatalf("logs of run -d --image: %q %q", r.stdout, r.stderr)
	}
	runCLI(t, nil, "rm", id)
	if r = runCLI(t, nil, "run", "--entrypoint", ""); r.code != 125 || !strings.Contains(r.stderr, "nothing to run") {
		t.Fatalf(`run --entrypoint "" alone: exit %d, stderr %q`, r.code, r.stderr)
	}
	// And in sandboxes taken from a pool of the image.
	func() {
		h := newCLIHome(t)
		defer h.run(nil, "pool", "rm", "hello")
		h.must(nil, "pool", "create", "--name", "hello", "--size", "1", "--image", "registry.test/tools/hello:1")
		if r := h.run(nil, "run", "--pool", "hello", "--", "echo $WHO"); r.code != 0 || r.stdout != "image\n" {
			t.Fatalf("run --pool of an image with an entrypoint: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
		h.must(nil, "run", "-d", "--pool", "hello", "--name", "job", "--", "echo $WHO from job; exit 3")
		if out := h.must(nil, "wait", "job"); out != "3\n" {
			t.Fatalf("wait on run -d --pool: %q", out)
		}
		if out := h.must(nil, "logs", "job"); out != "image from job\n" {
			t.Fatalf("logs of run -d --pool: %q", out)
		}
	}()
	r = runCLI(t, nil, "image", "list", "--json")
	var listed []store.Image
	if err := json.Unmarshal([]byte(r.stdout), &listed); err != nil || len(listed) != 1 || listed[0].Key != img.Key || listed[0].Names[0] != "registry.test/tools/hello:1" {
		t.Fatalf("image list --json: %v %q", err, r.stdout)
	}
	r = runCLI(t, nil, "image", "list")
	if !strings.Contains(r.stdout, "registry.test/tools/hello:1") || !strings.Contains(r.stdout, img.Key[7:19]) {
		t.Fatalf("image list: %q", r.stdout)
	}
	// docker's shortcuts: images, rmi.
	r = runCLI(t, nil, "images", "--cache-dir", dir, "-q")
	if r.code != 0 || r.stdout != img.Key+"\n" {
		t.Fatalf("images -q: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, nil, "image", "rm", "nosuch")
	if r.code == 0 || !strings.Contains(r.stderr, "nosuch") {
		t.Fatalf("image rm of an unknown name: exit %d, stderr %q", r.code, r.stderr)
	}
	r = runCLI(t, nil, "rmi", "registry.test/tools/hello:1")
	if r.code != 0 || !strings.Contains(r.stdout, img.Key) {
		t.Fatalf("rmi: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if _, err := os.Stat(img.Dir); !os.IsNotExist(err) {
		t.Fatalf("the image's folder is still there: %v", err)
	}
	r = runCLI(t, nil, "image", "prune", "--json")
	var pr store.PruneReport
	if err := json.Unmarshal([]byte(r.stdout), &pr); err != nil || r.code != 0 {
		t.Fatalf("image prune --json: %v %q", err, r.stdout)
	}
	// An image that names no command, run without one, says so.
	dir2, _ := cachedBusybox(t, "bare", store.Config{})
	t.Setenv("AIRLOCK_CACHE_DIR", dir2)
	r = runCLI(t, nil, "run", "--image", "bare")
	if r.code != 125 || !strings.Contains(r.stderr, "names no command") {
		t.Fatalf("run --image of an image with no command: exit %d, stderr %q", r.code, r.stderr)
	}
}
