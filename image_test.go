package airlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/image/store"
	"github.com/airlock-sandbox/airlock/internal/testbin"
)

// busyboxApplets are the commands a test image links to busybox.
var busyboxApplets = []string{"sh", "echo", "cat", "ls", "pwd", "id", "env", "readlink", "stat", "touch", "mkdir", "hostname"}

// putImage makes an image in the cache at dir from a tree holding
// Debian's static busybox, names it name, and lets edit change the tree
// first.
func putImage(t *testing.T, dir, name string, cfg store.Config, edit func(root string)) store.Image {
	t.Helper()
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Skip("no /bin/busybox (Debian's busybox-static)")
	}
	c, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	key := store.Key([]byte(t.Name() + name))
	img, err := c.Make(context.Background(), key, func(_ context.Context, work string) (store.Meta, error) {
		root := filepath.Join(work, "rootfs")
		for _, d := range []string{"bin", "etc"} {
			if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
				return store.Meta{}, err
			}
		}
		if err := os.WriteFile(filepath.Join(root, "bin", "busybox"), bb, 0o755); err != nil {
			return store.Meta{}, err
		}
		for _, a := range busyboxApplets {
			if err := os.Symlink("busybox", filepath.Join(root, "bin", a)); err != nil {
				return store.Meta{}, err
			}
		}
		if edit != nil {
			edit(root)
		}
		return store.Meta{Kind: "oci", Source: "test", Config: cfg}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Tag(name, img.Key); err != nil {
		t.Fatal(err)
	}
	return img
}

// An image in the cache is the sandbox's root: its Env and WorkingDir
// apply to every command, its own accounts stay, and what the sandbox
// says of it is what the image says.
func TestImageFromCache(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	cfg := store.Config{Env: []string{"PATH=/bin", "GREETING=from the image", "OVERRIDDEN=image"}, WorkingDir: "/srv/app", Cmd: []string{"echo", "default"}, User: "0"}
	putImage(t, dir, "example.test/team/tool:1", cfg, func(root string) {
		os.WriteFile(filepath.Join(root, "etc", "passwd"), []byte("root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000:app:/home/app:/bin/sh\n"), 0o644)
	})
	sb := newSandbox(t, airlock.Config{Image: "example.test/team/tool:1", ImageCacheDir: dir, Env: map[string]string{"OVERRIDDEN": "caller"}})
	res, err := sb.Run(ctx, airlock.Command{Shell: `pwd; echo "$GREETING/$OVERRIDDEN/$PATH"; cat /etc/passwd; hostname`})
	if err != nil {
		t.Fatal(err)
	}
	want := "/srv/app\nfrom the image/caller//bin\nroot:x:0:0:root:/root:/bin/sh\napp:x:1000:1000:app:/home/app:/bin/sh\n" + sb.ID() + "\n"
	if string(res.Stdout) != want || res.ExitCode != 0 {
		t.Fatalf("stdout %q, stderr %q, exit %d; want %q", res.Stdout, res.Stderr, res.ExitCode, want)
	}
	info := sb.Image()
	if info.Name != "example.test/team/tool:1" || info.WorkingDir != "/srv/app" || strings.Join(info.DefaultCommand(), " ") != "echo default" || !strings.HasPrefix(info.Key, "sha256:") {
		t.Fatalf("Image(): %+v", info)
	}
	// A command's own directory still wins.
	res, err = sb.Run(ctx, airlock.Command{Argv: []string{"pwd"}, Dir: "/"})
	if err != nil || string(res.Stdout) != "/\n" {
		t.Fatalf("pwd in /: %q %v", res.Stdout, err)
	}
	// PrepareImage finds it cached and says the same.
	got, err := airlock.PrepareImage(ctx, airlock.Config{Image: "example.test/team/tool:1", ImageCacheDir: dir})
	if err != nil || got.Key != info.Key {
		t.Fatalf("PrepareImage: %+v %v", got, err)
	}
}

// An image's links where airlock makes its directories and /etc files
// lead nowhere outside it: the agent assembles the root while it still
// sees the host's tree, so a followed link would write there.
func TestImageLinksStayInside(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	// World-writable, so that the sandbox's uid could write here if any
	// of the image's links were followed on the host.
	// Not under /tmp, where the agent mounts its stage.
	trap, err := os.MkdirTemp("/var/tmp", "airlock-trap-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(trap) })
	if err := os.Chmod(trap, 0o777); err != nil {
		t.Fatal(err)
	}
	putImage(t, dir, "hostile", store.Config{Env: []string{"PATH=/bin"}, WorkingDir: "/work/dir"}, func(root string) {
		os.RemoveAll(filepath.Join(root, "etc"))
		for name, target := range map[string]string{
			"etc": trap, "workspace": trap, "tmp": trap, "proc": trap, "dev": trap, "run": "../../../../.." + trap,
			"work": "/srv", "root": trap, "home": "/", "mnt": "/proc/self/root" + trap,
		} {
			if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
				t.Fatal(err)
			}
		}
		os.MkdirAll(filepath.Join(root, "var"), 0o755)
		os.MkdirAll(filepath.Join(root, "srv"), 0o755)
		os.Symlink(trap, filepath.Join(root, "var", "tmp"))
	})
	sb := newSandbox(t, airlock.Config{Image: "hostile", ImageCacheDir: dir})
	res, err := sb.Run(ctx, airlock.Command{Shell: `pwd; for d in /etc /workspace /tmp /proc /dev /run /root /home /mnt /var/tmp; do [ -d "$d" ] && [ ! -L "$d" ] || echo "$d is not a directory"; done; cat /etc/hostname; touch /tmp/x /workspace/x /etc/x /work/dir/x /srv/dir/y && ls /work/dir && echo wrote`})
	if err != nil {
		t.Fatal(err)
	}
	if want := "/srv/dir\n" + sb.ID() + "\nx\ny\nwrote\n"; string(res.Stdout) != want {
		t.Fatalf("stdout %q, stderr %q; want %q", res.Stdout, res.Stderr, want)
	}
	ents, _ := os.ReadDir(trap)
	if len(ents) != 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("the sandbox's start wrote %v into the host's %s through the image's links", names, trap)
	}
}

// An image and a rootfs at once is a mistake the config names.
func TestImageAndRootFS(t *testing.T) {
	_, err := airlock.Create(context.Background(), airlock.Config{Image: "standard", RootFS: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "image or rootfs") {
		t.Fatalf("Create with image and rootfs: %v", err)
	}
}

// An OCI image named by a create is pulled into the cache first, with
// progress, and found there by the next.
func TestImagePulledOnCreate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ref, err := testbin.BusyboxLayout(filepath.Join(t.TempDir(), "layout"), "v1", v1.Config{Env: []string{"PATH=/bin", "FROM=layout"}, WorkingDir: "/w", Cmd: []string{"sh"}})
	if err != nil {
		t.Skip(err)
	}
	cache := t.TempDir()
	var mu sync.Mutex
	steps := map[string]bool{}
	cfg := airlock.Config{Image: ref, ImageCacheDir: cache, OnImageProgress: func(p airlock.ImageProgress) {
		mu.Lock()
		steps[p.Step] = true
		mu.Unlock()
	}}
	sb := newSandbox(t, cfg)
	res, err := sb.Run(ctx, airlock.Command{Shell: `echo "$FROM in $(pwd)"`})
	if err != nil || string(res.Stdout) != "layout in /w\n" {
		t.Fatalf("%q %q %v", res.Stdout, res.Stderr, err)
	}
	mu.Lock()
	for _, s := range []string{"unpack", "done"} {
		if !steps[s] {
			t.Errorf("no %q progress while the image was pulled (got %v)", s, steps)
		}
	}
	steps = map[string]bool{}
	mu.Unlock()
	sb2 := newSandbox(t, cfg)
	if sb2.Image().Key != sb.Image().Key {
		t.Fatalf("keys %s and %s", sb2.Image().Key, sb.Image().Key)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(steps) != 0 {
		t.Errorf("a cached image was got again: progress %v", steps)
	}
}

// An image's User is who its commands run as, with the groups and home
// its accounts give; a command's own User wins.
func TestImageUser(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	putImage(t, dir, "users", store.Config{Env: []string{"PATH=/bin"}, User: "app"}, func(root string) {
		os.WriteFile(filepath.Join(root, "etc", "passwd"), []byte("root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000:app:/home/app:/bin/sh\n"), 0o644)
		os.WriteFile(filepath.Join(root, "etc", "group"), []byte("root:x:0:\napp:x:1000:\nstaff:x:50:app\n"), 0o644)
	})
	sb := newSandbox(t, airlock.Config{Image: "users", ImageCacheDir: dir})
	run := func(user, line string) *airlock.ExecResult {
		t.Helper()
		res, err := sb.Run(ctx, airlock.Command{Shell: line, User: user, Dir: "/"})
		if err != nil {
			t.Fatalf("as %q: %v", user, err)
		}
		return res
	}
	if res := run("", `id -u; id -g; id -G; echo "$HOME $USER"`); string(res.Stdout) != "1000\n1000\n1000 50\n/home/app app\n" {
		t.Fatalf("the image's user: %q %q", res.Stdout, res.Stderr)
	}
	if res := run("root", `id -u`); string(res.Stdout) != "0\n" {
		t.Fatalf("as root: %q %q", res.Stdout, res.Stderr)
	}
	if res := run("4242:4343", `id -u; id -g; touch /tmp/f; stat -c %u:%g /tmp/f`); string(res.Stdout) != "4242\n4343\n4242:4343\n" {
		t.Fatalf("as 4242:4343: %q %q", res.Stdout, res.Stderr)
	}
	_, err := sb.Run(ctx, airlock.Command{Argv: []string{"id"}, User: "nobody-here"})
	var se *airlock.StartError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "nobody-here") {
		t.Fatalf("an unknown user: %v", err)
	}
}

// A running sandbox's image is neither removed nor pruned: its overlay
// reads the image's tree. Once the sandbox is closed, it goes. No
// process of the sandbox holds the lock that says so.
func TestImageInUseIsKept(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	img := putImage(t, dir, "kept", store.Config{Env: []string{"PATH=/bin"}}, nil)
	c, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := airlock.Create(ctx, airlock.Config{Image: "kept", ImageCacheDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	for _, what := range []string{"kept", img.Key} {
		if _, err := c.Remove(ctx, what); !errors.Is(err, store.ErrInUse) {
			t.Fatalf("Remove %s while a sandbox runs it: %v", what, err)
		}
	}
	if r, err := c.Prune(ctx); err != nil || len(r.Images) != 0 {
		t.Fatalf("Prune while a sandbox runs it: %+v %v", r, err)
	}
	if res, err := sb.Run(ctx, airlock.Command{Shell: "echo still here"}); err != nil || string(res.Stdout) != "still here\n" {
		t.Fatalf("the sandbox after refused removals: %q %v", res.Stdout, err)
	}
	for _, pid := range descendants(sb.PID()) {
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, fd := range fds {
			if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); strings.Contains(l, filepath.Join(dir, "locks")) {
				t.Errorf("process %d of the sandbox holds %s", pid, l)
			}
		}
	}
	if err := sb.Close(); err != nil {
		t.Fatal(err)
	}
	if removed, err := c.Remove(ctx, "kept"); err != nil || len(removed) != 1 {
		t.Fatalf("Remove after the sandbox closed: %v %v", removed, err)
	}
}

// descendants is pid and every process under it.
func descendants(pid int) []int {
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", out[i]))
		for _, task := range tasks {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", out[i], task.Name()))
			for _, f := range strings.Fields(string(b)) {
				if n, err := strconv.Atoi(f); err == nil {
					out = append(out, n)
				}
			}
		}
	}
	return out
}
