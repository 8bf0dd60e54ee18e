//go:build linux

package variant_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/image/store"
	"github.com/airlock-sandbox/airlock/internal/image/variant"
	"github.com/airlock-sandbox/airlock/internal/testbin"
)

// EnvTestCache names the image cache the tests build the variants into.
// It should outlive the checkout (the Makefile points it at
// /var/cache/airlock-test), so that a variant is built once per recipe
// and package list and reused by every later run: its key is its
// content address.
const EnvTestCache = "AIRLOCK_TEST_IMAGE_CACHE"

func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, err := testbin.Dir("airlock-variant-test-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "TestMain:", err)
			return 2
		}
		defer os.RemoveAll(dir)
		bins, err := testbin.Build(dir, "airlock-guest")
		if err != nil {
			fmt.Fprintln(os.Stderr, "TestMain:", err)
			return 2
		}
		os.Setenv("AIRLOCK_AGENT", bins[0])
		os.Setenv("AIRLOCK_HOME", filepath.Join(dir, "home"))
		return m.Run()
	}())
}

// needBuild skips a test that builds images where they cannot be built.
func needBuild(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("building image variants needs root (mmdebstrap gives the image's files their packages' owners)")
	}
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		t.Skip("mmdebstrap is not installed (scripts/deps.sh installs it)")
	}
}

// sharedCache is the cache the variants are built into once.
func sharedCache(t *testing.T) *store.Cache {
	t.Helper()
	dir := os.Getenv(EnvTestCache)
	if dir == "" {
		dir = "/var/cache/airlock-test"
	}
	c, err := store.Open(dir)
	if err != nil {
		t.Fatalf("open the test image cache (set %s): %v", EnvTestCache, err)
	}
	return c
}

// builds makes each variant at most once per test binary, however many
// tests ask for it.
var builds sync.Map // name -> func() (store.Image, error)

func build(t *testing.T, name string) store.Image {
	t.Helper()
	needBuild(t)
	c := sharedCache(t)
	f, _ := builds.LoadOrStore(name, sync.OnceValues(func() (store.Image, error) {
		src, err := variant.SourceFromEnv()
		if err != nil {
			return store.Image{}, err
		}
		b := variant.Builder{Cache: c, Source: src}
		if img, ok, err := b.Cached(name); err == nil && ok {
			t.Logf("%s is cached: %s", name, img.Key)
		}
		start := time.Now()
		var last store.Progress
		b.Progress = func(p store.Progress) { last = p }
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
		defer cancel()
		img, err := b.Build(ctx, name)
		if err == nil {
			t.Logf("%s: %.1f MB in %d files, ready in %s (last report %+v)", name, float64(img.Size)/1e6, img.Files, time.Since(start).Round(time.Millisecond), last)
		}
		return img, err
	}))
	img, err := f.(func() (store.Image, error))()
	if err != nil {
		t.Fatalf("build %s: %v", name, err)
	}
	return img
}

func sandbox(t *testing.T, img store.Image) *airlock.Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sb, err := airlock.Create(ctx, airlock.Config{RootFS: img.RootFS, Resources: airlock.Resources{MemoryMB: 1024}, DiskMB: 512})
	if err != nil {
		t.Fatalf("create a sandbox on %s: %v", img.RootFS, err)
	}
	t.Cleanup(func() {
		if err := sb.Close(); err != nil {
			t.Errorf("close sandbox: %v", err)
		}
	})
	return sb
}

// expect runs a shell command line in sb and checks its exit and output.
func expect(t *testing.T, sb *airlock.Sandbox, command, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := sb.Run(ctx, airlock.Command{Shell: command, Env: map[string]string{"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}})
	if err != nil {
		t.Fatalf("%s: %v", command, err)
	}
	if res.ExitCode != 0 || strings.TrimSpace(string(res.Stdout)) != want {
		t.Fatalf("%s: exit %d, stdout %q, stderr %q; want exit 0 and %q", command, res.ExitCode, res.Stdout, res.Stderr, want)
	}
}

const helloC = `#include <stdio.h>
int main(void) { printf("hello from C\n"); return 0; }
`

// checkImage checks what every variant's image is: named, stripped, no
// device nodes, no host files lent to the build, packed as erofs.
func checkImage(t *testing.T, name string, img store.Image) {
	t.Helper()
	if img.Kind != variant.Kind || !strings.Contains(strings.Join(img.Names, ","), name) {
		t.Errorf("image %+v: want kind %q named %s", img.Meta, variant.Kind, name)
	}
	ents, err := os.ReadDir(filepath.Join(img.RootFS, "dev"))
	if err != nil || len(ents) != 0 {
		t.Errorf("the image's /dev holds %d entries (%v), want none", len(ents), err)
	}
	for _, p := range []string{"etc/resolv.conf", "etc/hostname", "usr/share/man/man1"} {
		if _, err := os.Lstat(filepath.Join(img.RootFS, p)); err == nil {
			t.Errorf("the image holds /%s", p)
		}
	}
	if m, _ := filepath.Glob(filepath.Join(img.RootFS, "var/lib/apt/lists/*Packages*")); len(m) > 0 {
		t.Errorf("the image keeps apt's lists: %s", m[0])
	}
	if m, _ := filepath.Glob(filepath.Join(img.RootFS, "usr/share/doc/*/changelog*")); len(m) > 0 {
		t.Errorf("the image keeps docs: %s", m[0])
	}
	if m, _ := filepath.Glob(filepath.Join(img.RootFS, "usr/share/doc/*/copyright")); len(m) == 0 {
		t.Error("the image lost its packages' copyright files")
	}
	if m, _ := filepath.Glob(filepath.Join(img.RootFS, "usr/local/bin/airlock*")); len(m) > 0 {
		t.Errorf("the agent is baked into the image: %s", m)
	}
	if fi, err := os.Stat(filepath.Join(img.Dir, "rootfs.erofs")); err != nil || fi.Size() == 0 {
		t.Errorf("no erofs file of the image: %v", err)
	}
}

func TestMinimal(t *testing.T) {
	img := build(t, "minimal")
	checkImage(t, "minimal", img)
	sb := sandbox(t, img)
	expect(t, sb, "python3 -c 'print(1)'", "1")
	expect(t, sb, "curl --version | head -c 4", "curl")
	expect(t, sb, "test -s /etc/ssl/certs/ca-certificates.crt && echo certs", "certs")
	expect(t, sb, "bash -c 'echo $BASH_VERSION' | cut -c1", "5")
	expect(t, sb, "command -v useradd", "/usr/sbin/useradd")
	// What minimal leaves to standard.
	expect(t, sb, "for c in node gcc git python; do command -v $c; done; echo none", "none")
}

// standardChecks run in standard and in full.
func standardChecks(t *testing.T, sb *airlock.Sandbox) {
	expect(t, sb, "python3 -c 'print(1)'", "1")
	expect(t, sb, "python -c 'print(1)'", "1")
	expect(t, sb, "node -e 'console.log(6*7)'", "42")
	expect(t, sb, "npm --version >/dev/null && echo npm", "npm")
	expect(t, sb, "git --version | cut -d' ' -f1-2", "git version")
	expect(t, sb, "cd /tmp && git init -q r && cd r && git -c user.email=a@b -c user.name=a commit -q --allow-empty -m x && git log --format=%s", "x")
	expect(t, sb, "ssh -V 2>&1 | cut -c1-7", "OpenSSH")
	expect(t, sb, "cd /tmp && printf '%s' '"+helloC+"' > hello.c && gcc -o hello hello.c && ./hello", "hello from C")
	expect(t, sb, "cd /tmp && printf 'all:\\n\\techo made\\n' > Makefile && make -s", "made")
	expect(t, sb, "cd /tmp && python3 -m venv v && v/bin/pip --version | cut -d' ' -f1", "pip")
}

func TestStandard(t *testing.T) {
	img := build(t, "standard")
	checkImage(t, "standard", img)
	standardChecks(t, sandbox(t, img))
}

func TestFull(t *testing.T) {
	img := build(t, "full")
	checkImage(t, "full", img)
	sb := sandbox(t, img)
	standardChecks(t, sb)
	expect(t, sb, "python3 -c 'import numpy, pandas; print(int(pandas.Series(numpy.arange(4)).sum()))'", "6")
	expect(t, sb, "ruby -e 'puts [1,2,3].sum'", "6")
	expect(t, sb, "cd /tmp && printf 'package main\\nimport \"fmt\"\\nfunc main() { fmt.Println(\"hello from Go\") }\\n' > h.go && HOME=/tmp GOCACHE=/tmp/gocache go run h.go", "hello from Go")
}

// manyIDs reports whether sb maps a range of 65,536 ids, which users,
// su and apt's _apt user need.
func manyIDs(t *testing.T, sb *airlock.Sandbox) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := sb.Exec(ctx, "cat /proc/self/uid_map")
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(strings.NewReader(string(res.Stdout)))
	var total int64
	for sc.Scan() {
		var in, out, n int64
		if _, err := fmt.Sscan(sc.Text(), &in, &out, &n); err == nil {
			total += n
		}
	}
	return total >= 65536
}

// In standard, root can install a package, make a user and become it.
func TestStandardUsersAndPackages(t *testing.T) {
	img := build(t, "standard")
	sb := sandbox(t, img)
	if !manyIDs(t, sb) {
		t.Skip("the sandbox maps fewer than 65,536 ids (see /proc/self/uid_map inside): apt's _apt user, useradd and su need a range of ids, which this build of the process level does not map yet")
	}
	// A package made here: dpkg-deb on the host, installed by apt from a
	// file inside.
	pkg := t.TempDir()
	if err := os.MkdirAll(filepath.Join(pkg, "DEBIAN"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(pkg, "usr/bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	control := "Package: airlock-hello\nVersion: 1.0\nArchitecture: all\nMaintainer: airlock tests <tests@airlock.invalid>\nDescription: says hello\n"
	if err := os.WriteFile(filepath.Join(pkg, "DEBIAN/control"), []byte(control), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pkg, "usr/bin/airlock-hello"), []byte("#!/bin/sh\necho hello from a package\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	deb := filepath.Join(t.TempDir(), "airlock-hello.deb")
	if out, err := exec.Command("dpkg-deb", "--root-owner-group", "--build", pkg, deb).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb: %v: %s", err, out)
	}
	b, err := os.ReadFile(deb)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := sb.WriteFile(ctx, "/tmp/airlock-hello.deb", b, 0o644); err != nil {
		t.Fatal(err)
	}
	expect(t, sb, "apt-get install -y -q /tmp/airlock-hello.deb >/dev/null 2>&1; airlock-hello", "hello from a package")
	expect(t, sb, "useradd -m alice && su alice -c 'id -un; touch ~/mine; stat -c %U ~/mine' | tr '\\n' ' '", "alice alice")
	expect(t, sb, "su alice -c 'touch /etc/x' 2>/dev/null; echo $?", "1")
}

func TestBuildUnknownVariant(t *testing.T) {
	c, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	_, err = variant.Build(context.Background(), c, "huge", nil)
	if err == nil || !strings.Contains(err.Error(), "minimal, standard, full") {
		t.Fatalf("build huge: %v, want an error listing the variants", err)
	}
	if imgs, _ := c.List(); len(imgs) != 0 {
		t.Fatalf("an unknown variant left %d images", len(imgs))
	}
}

// A build cancelled half-way leaves no image, no work folder, no mount
// and no process behind, and the next build of the same variant
// succeeds.
func TestBuildInterrupted(t *testing.T) {
	needBuild(t)
	dir := t.TempDir()
	c, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	src, err := variant.SourceFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	// Debian's essential set and apt, and nothing more: the smallest
	// image mmdebstrap builds.
	tiny := variant.Variant{Name: "tiny", Packages: []string{"bash"}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	var (
		mu    sync.Mutex
		steps []string
	)
	b := variant.Builder{Cache: c, Source: src, Progress: func(p store.Progress) {
		mu.Lock()
		defer mu.Unlock()
		if len(steps) == 0 || steps[len(steps)-1] != p.Step {
			steps = append(steps, p.Step)
		}
		// Half-way: packages are being unpacked into the tree.
		if p.Step == variant.StepUnpack && p.Done >= 10 {
			cancel()
		}
	}}
	_, err = b.BuildVariant(ctx, tiny)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled build: %v (steps %v), want context.Canceled", err, steps)
	}
	if _, err := c.Get(tiny.Key(src)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the cancelled build left an image: %v", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "tmp")); len(ents) != 0 {
		t.Errorf("the cancelled build left %d work folders", len(ents))
	}
	if mi, err := os.ReadFile("/proc/self/mountinfo"); err != nil || strings.Contains(string(mi), dir) {
		t.Errorf("the cancelled build left mounts under %s (%v)", dir, err)
	}
	procs, err := testbin.HostProcs()
	if err != nil {
		t.Fatal(err)
	}
	for pid, cmd := range procs {
		if strings.Contains(cmd, dir) {
			t.Errorf("process %d of the cancelled build lives on: %q", pid, strings.ReplaceAll(cmd, "\x00", " "))
		}
	}

	ctx2, cancel2 := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel2()
	b.Progress = nil
	img, err := b.BuildVariant(ctx2, tiny)
	if err != nil {
		t.Fatalf("build after a cancelled one: %v", err)
	}
	if got, err := c.Lookup("tiny"); err != nil || got.Key != img.Key {
		t.Fatalf("lookup tiny: %+v, %v", got, err)
	}
	expect(t, sandbox(t, img), "apt-get --version | head -c 3", "apt")
}
