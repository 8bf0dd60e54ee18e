package airlock_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/boundary/process"
)

// minimalRootFS builds a root holding only /bin/sh and the libraries it
// links, owned by the caller.
func minimalRootFS(t *testing.T) string {
	t.Helper()
	sh, err := filepath.EvalSymlinks("/bin/sh")
	if err != nil {
		t.Skip("no /bin/sh")
	}
	out, err := exec.Command("ldd", sh).Output()
	if err != nil {
		t.Skipf("ldd %s: %v", sh, err)
	}
	root := t.TempDir()
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	files := []string{sh}
	for _, f := range strings.Fields(string(out)) {
		if strings.HasPrefix(f, "/") {
			files = append(files, f)
		}
	}
	for _, f := range files {
		real, err := filepath.EvalSymlinks(f)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(real)
		if err != nil {
			t.Fatal(err)
		}
		// Install under the name the loader and the test ask for.
		dst := filepath.Join(root, f)
		if f == sh {
			dst = filepath.Join(root, "bin", "sh")
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "marker"), []byte("from the image\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

// A prepared root is used read-only with a private writable layer: the
// sandbox sees the image, can change it, and the image stays as it was.
func TestRootFSOverlay(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	root := minimalRootFS(t)
	sb := newSandbox(t, airlock.Config{RootFS: root})
	res, err := sb.Run(ctx, airlock.Command{
		Argv: []string{"/bin/sh", "-c", "read m < /marker; echo \"$m\"; echo changed > /marker; echo new > /newfile; read m < /marker; echo \"$m\"; test -e /usr/bin/python3 && echo host-visible; exit 0"},
		Dir:  "/",
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(res.Stdout), "from the image\nchanged\n"; got != want {
		t.Fatalf("stdout %q (stderr %q), want %q", got, res.Stderr, want)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "marker")); string(b) != "from the image\n" {
		t.Errorf("the image was modified: marker is %q", b)
	}
	if _, err := os.Stat(filepath.Join(root, "newfile")); err == nil {
		t.Error("a file written in the sandbox appeared in the image")
	}
	if notesMention(sb.Notes(), "root on the host") {
		t.Errorf("Notes() = %q, want root inside not to be root on the host", sb.Notes())
	}
	// Root inside is an unprivileged uid outside, under root too (the
	// image, which host root owns, comes through an idmapped mount), and
	// owns the image's files.
	res, err = sb.Run(ctx, airlock.Command{
		Argv: []string{"/bin/sh", "-c", `read inside outside count < /proc/self/uid_map; echo "$inside $outside $count"; test -O /marker && echo owner`},
		Dir:  "/",
	})
	if err != nil {
		t.Fatal(err)
	}
	var inside, outside, count int
	wantCount := 1 // an unprivileged caller: root is the caller alone
	if isRoot() {
		wantCount = process.SandboxIDs // a block of the host's, from root's
	}
	if _, err := fmt.Sscanf(string(res.Stdout), "%d %d %d\nowner\n", &inside, &outside, &count); err != nil || inside != 0 || outside == 0 || count != wantCount {
		t.Errorf("uid map and ownership %q (stderr %q, %v), want root mapped to an unprivileged uid (the first of %d), owning /marker", res.Stdout, res.Stderr, err, wantCount)
	}
}
