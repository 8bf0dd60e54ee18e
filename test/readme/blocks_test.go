package readme_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/testbin"
)

// blockAfter returns README.md's first code block of kind (sh, json)
// after the heading, as it is.
func blockAfter(t *testing.T, heading, kind string) string {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("README.md has no %q", heading)
	}
	_, block, ok := strings.Cut(section, "\n```"+kind+"\n")
	block, _, closed := strings.Cut(block, "\n```\n")
	if !ok || !closed {
		t.Fatalf("README.md's %q has no %s block", heading, kind)
	}
	return block
}

// commandLines are a block's commands, without comments; a line ending
// in a backslash goes on on the next.
func commandLines(block string) []string {
	var lines []string
	var cont string
	for _, l := range strings.Split(block, "\n") {
		if i := strings.Index(l, "  # "); i >= 0 {
			l = l[:i]
		}
		l = cont + strings.TrimSpace(l)
		if rest, ok := strings.CutSuffix(l, `\`); ok {
			cont = rest
			continue
		}
		cont = ""
		if l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// readmeEnv is what README.md's lines run with: the airlock just built
// first on PATH, a state folder and an image cache of the test's own.
type readmeEnv struct {
	bins, work, home, cache string
	// shared is the test image cache (AIRLOCK_TEST_IMAGE_CACHE), where
	// the standard image is; "" when not given.
	shared string
}

func newReadmeEnv(t *testing.T, prefix string) *readmeEnv {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root, as the README's sandboxes do")
	}
	dir, err := testbin.Dir(prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	e := &readmeEnv{bins: filepath.Join(dir, "bin"), work: filepath.Join(dir, "work"), home: filepath.Join(dir, "home"),
		cache: filepath.Join(dir, "cache"), shared: os.Getenv("AIRLOCK_TEST_IMAGE_CACHE")}
	for _, d := range []string{e.bins, e.work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := testbin.Build(e.bins, "airlock", "airlock-guest"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		kill := exec.Command(filepath.Join(e.bins, "airlock"), "kill", "--all")
		kill.Env = append(os.Environ(), "AIRLOCK_HOME="+e.home)
		kill.Run()
	})
	return e
}

// run runs line as a shell does, in the work folder; a line about the
// standard image uses the shared cache, any other the test's own.
func (e *readmeEnv) run(t *testing.T, line, stdin string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", line)
	cmd.Dir = e.work
	cache := e.cache
	if strings.Contains(line, "standard") || strings.Contains(stdin, `"standard"`) {
		cache = e.shared
	}
	cmd.Env = append(os.Environ(), "PATH="+e.bins+":"+os.Getenv("PATH"), "AIRLOCK_HOME="+e.home, "AIRLOCK_CACHE_DIR="+cache)
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// TestReadmeImages runs README.md's Images block, line by line: a
// docker-save tarball at ./app.tar, and a registry on localhost:5000
// holding team/tool:1, as the lines name them.
func TestReadmeImages(t *testing.T) {
	e := newReadmeEnv(t, "readme-images-")
	img, err := testbin.BusyboxImage(v1.Config{Cmd: []string{"echo", "app ran"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := tarball.WriteToFile(filepath.Join(e.work, "app.tar"), nil, img); err != nil {
		t.Fatal(err)
	}
	testbin.RunRegistry(t, "127.0.0.1:5000", "")
	ref, err := name.ParseReference("127.0.0.1:5000/team/tool:1")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	ran := 0
	for _, line := range commandLines(blockAfter(t, "## Images", "sh")) {
		switch {
		case strings.Contains(line, "python:3.12-slim"):
			t.Logf("not run (needs the internet): %s", line)
			continue
		case strings.Contains(line, "standard") && e.shared == "":
			t.Logf("not run (needs the standard image: set AIRLOCK_TEST_IMAGE_CACHE, as make test does): %s", line)
			continue
		}
		out, err := e.run(t, line, "")
		if err != nil {
			t.Errorf("README.md's line failed: %s\n%v\n%s", line, err, out)
			continue
		}
		if strings.Contains(line, "app.tar") && !strings.Contains(out, "app ran") {
			t.Errorf("%s printed %q, want the image's own command's output", line, out)
		}
		ran++
	}
	if ran < 3 {
		t.Errorf("ran %d of the Images block's lines", ran)
	}
	out, _ := e.run(t, "airlock image list", "")
	if !strings.Contains(out, "localhost:5000/team/tool:1") {
		t.Errorf("image list after the block:\n%s", out)
	}
}

// TestReadmeFiles runs README.md's Files blocks: the CLI line, and the
// JSON-RPC create with its mounts, whose host folders (/etc/app,
// /srv/base, /srv/data) the test makes when they are missing, and removes.
func TestReadmeFiles(t *testing.T) {
	e := newReadmeEnv(t, "readme-files-")
	for name, body := range map[string]string{"main.py": "print(1)\n", "secrets/key": "readme-secret-7c1e\n"} {
		p := filepath.Join(e.work, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	lines := commandLines(blockAfter(t, "## Files", "sh"))
	if len(lines) != 1 {
		t.Fatalf("the Files block has %d commands, want 1: %q", len(lines), lines)
	}
	out, err := e.run(t, lines[0], "")
	// A blocked path shows as an empty directory: nothing in it is read.
	if err != nil || !strings.Contains(out, "main.py") || strings.Contains(out, "key") {
		t.Errorf("README.md's line: %v\n%s\nwant main.py copied and the blocked secrets not", err, out)
	}

	if e.shared == "" {
		t.Skip("the create example needs the standard image: set AIRLOCK_TEST_IMAGE_CACHE, as make test does")
	}
	for _, dir := range []string{"/etc/app", "/srv/base", "/srv/data"} {
		if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
		}
	}
	create := strings.Join(strings.Fields(blockAfter(t, "## Files", "json")), " ")
	out, err = e.run(t, "airlock rpc", create+"\n"+`{"jsonrpc": "2.0", "id": 2, "method": "exec", "params": {"command": "ls -d /workspace /config /output /mnt/data"}}`+"\n")
	if err != nil {
		t.Fatalf("airlock rpc: %v\n%s", err, out)
	}
	answers := map[float64]map[string]json.RawMessage{}
	for l := range strings.Lines(out) {
		var m map[string]json.RawMessage
		var id float64
		if json.Unmarshal([]byte(l), &m) == nil && json.Unmarshal(m["id"], &id) == nil {
			answers[id] = m
		}
	}
	if a := answers[1]; a == nil || a["error"] != nil || !strings.Contains(string(a["result"]), "sandbox_id") {
		t.Errorf("README.md's create: %s", out)
	}
	if a := answers[2]; a == nil || !strings.Contains(string(a["result"]), `"exit_code":0`) {
		t.Errorf("the mounts of README.md's create: %s", out)
	}
}

// TestReadmeVariants runs README.md's Variants block on the test image
// cache, where make test has built every variant: each line finds its
// images cached. sudo is the identity here (the test runs as root);
// --rebuild is not run, as it would replace the image the other tests
// use (internal/image/variant's tests rebuild).
func TestReadmeVariants(t *testing.T) {
	e := newReadmeEnv(t, "readme-variants-")
	if e.shared == "" {
		t.Skip("needs the variants built: set AIRLOCK_TEST_IMAGE_CACHE, as make test does")
	}
	e.cache = e.shared // every line finds its variants there
	sudo := filepath.Join(e.bins, "sudo")
	if err := os.WriteFile(sudo, []byte("#!/bin/sh\nexec \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ran := 0
	for _, line := range commandLines(blockAfter(t, "### Variants", "sh")) {
		if strings.Contains(line, "--rebuild") {
			t.Logf("not run (it would replace the image other tests use): %s", line)
			continue
		}
		out, err := e.run(t, line, "")
		if err != nil {
			t.Errorf("README.md's line failed: %s\n%v\n%s", line, err, out)
			continue
		}
		if strings.Contains(line, "--json") && (!strings.Contains(out, `"cached":true`) || strings.Contains(out, `"cached":false`)) {
			t.Errorf("%s built an image the cache has:\n%s", line, out)
		}
		ran++
	}
	if ran != 3 {
		t.Errorf("ran %d of the Variants block's lines, want 3", ran)
	}
}

// TestReadmeKernel runs README.md's Guest kernel block on the test kernel
// cache, where make test has built this machine's kernel: build finds it
// cached and list shows it.
func TestReadmeKernel(t *testing.T) {
	e := newReadmeEnv(t, "readme-kernel-")
	cache := os.Getenv("AIRLOCK_TEST_KERNEL_CACHE")
	if cache == "" {
		t.Skip("needs the guest kernel built: set AIRLOCK_TEST_KERNEL_CACHE, as make test does")
	}
	e.cache, e.shared = cache, cache
	ran := 0
	for _, line := range commandLines(blockAfter(t, "### Guest kernel", "sh")) {
		out, err := e.run(t, line, "")
		if err != nil {
			t.Errorf("README.md's line failed: %s\n%v\n%s", line, err, out)
			continue
		}
		if !strings.Contains(out, "x86_64") && !strings.Contains(out, "arm64") {
			t.Errorf("%s names no kernel:\n%s", line, out)
		}
		ran++
	}
	if ran != 2 {
		t.Errorf("ran %d of the Guest kernel block's lines, want 2", ran)
	}
}

// TestReadmeVM runs README.md's vm level block: the kernel build finds
// the test kernel cached ($AIRLOCK_KERNEL_CACHE, which make test names),
// uname inside names the guest's kernel, not the host's, and the
// standard image's python runs in a VM.
func TestReadmeVM(t *testing.T) {
	e := newReadmeEnv(t, "readme-vm-")
	if os.Getenv("AIRLOCK_KERNEL_CACHE") == "" {
		t.Skip("needs the guest kernel built: set AIRLOCK_KERNEL_CACHE, as make test does")
	}
	var host unix.Utsname
	if err := unix.Uname(&host); err != nil {
		t.Fatal(err)
	}
	hostRelease := unix.ByteSliceToString(host.Release[:])
	want := []func(string) bool{
		func(out string) bool { return strings.Contains(out, "x86_64") },
		func(out string) bool {
			return strings.TrimSpace(lastLine(out)) != hostRelease && strings.Contains(lastLine(out), ".")
		},
		func(out string) bool { return lastLine(out) == "1" },
	}
	lines := commandLines(blockAfter(t, "### The vm level", "sh"))
	if len(lines) != len(want) {
		t.Fatalf("the vm level block has %d lines, the test knows %d", len(lines), len(want))
	}
	for i, line := range lines {
		out, err := e.run(t, line, "")
		if err != nil {
			t.Errorf("README.md's line failed: %s\n%v\n%s", line, err, out)
			continue
		}
		if !want[i](out) {
			t.Errorf("%s printed:\n%s", line, out)
		}
	}
}

// lastLine is the last line of out, without its newline.
func lastLine(out string) string {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	return lines[len(lines)-1]
}
