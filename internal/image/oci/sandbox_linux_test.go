package oci_test

import (
	"archive/tar"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/image/oci"
	"github.com/airlock-sandbox/airlock/internal/testbin"
)

// A pulled image's root tree runs in a real process sandbox: busybox
// from Debian's busybox-static, in layers with a whiteout, pulled from
// the local registry.
func TestRunPulledImage(t *testing.T) {
	busybox, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatal("no /bin/busybox: run scripts/deps.sh (Debian: apt-get install busybox-static)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bins, err := testbin.Dir("oci-test-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(bins) })
	built, err := testbin.Build(bins, "airlock-guest")
	if err != nil {
		t.Fatal(err)
	}
	home, err := testbin.Dir("oci-test-home-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	t.Setenv("AIRLOCK_HOME", home)

	reg := startRegistry(t, registryOptions{})
	base := layerOf(t,
		file{name: "bin/", typ: tar.TypeDir},
		file{name: "bin/busybox", body: string(busybox), mode: 0o755},
		file{name: "bin/sh", typ: tar.TypeSymlink, link: "busybox"},
		file{name: "etc/passwd", body: "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000::/home/app:/bin/sh\n"},
		file{name: "etc/old", body: "stale"},
		file{name: "home/app/", typ: tar.TypeDir, mode: 0o700, uid: 1000},
		file{name: "home/app/notes", body: "mine", uid: 1000},
	)
	app := layerOf(t, file{name: "etc/.wh.old"}, file{name: "etc/motd", body: "hello from a pulled image\n"})
	reg.Push(t, "busybox-app:1", imageOf(t, v1.Config{Cmd: []string{"/bin/sh"}}, base, app))
	img, err := oci.Pull(ctx, openCache(t), reg.Host+"/busybox-app:1", oci.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}

	sb, err := airlock.Create(ctx, airlock.Config{RootFS: img.RootFS, AgentPath: built[0]})
	if err != nil {
		t.Fatalf("create a sandbox on the pulled image: %v", err)
	}
	defer sb.Close()
	res, err := sb.Run(ctx, airlock.Command{Argv: []string{"/bin/sh", "-c", "cat /etc/motd; test -e /etc/old || echo old-gone; busybox echo ran"}, Dir: "/"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(res.Stdout), "hello from a pulled image\nold-gone\nran\n"; got != want || res.ExitCode != 0 {
		t.Fatalf("stdout %q stderr %q exit %d, want %q", got, res.Stderr, res.ExitCode, want)
	}

	// The image's owners show inside when the sandbox maps their ids.
	t.Run("owners", func(t *testing.T) {
		res, err := sb.Run(ctx, airlock.Command{Argv: []string{"/bin/sh", "-c", "cat /proc/self/uid_map; echo --; busybox stat -c '%u:%g %a' /home/app/notes /home/app"}, Dir: "/"})
		if err != nil {
			t.Fatal(err)
		}
		maps, owners, _ := strings.Cut(string(res.Stdout), "--\n")
		if mapped := mappedIDs(maps); mapped < 1001 {
			t.Skipf("the sandbox maps %d id(s) (uid_map %q): owners beyond root show only once a sandbox maps 65,536", mapped, strings.TrimSpace(maps))
		}
		if want := "1000:0 644\n1000:0 700\n"; owners != want {
			t.Fatalf("owners inside: %q, want %q", owners, want)
		}
	})
}

// mappedIDs sums the counts of a uid_map.
func mappedIDs(uidMap string) int {
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(uidMap), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 {
			c, _ := strconv.Atoi(f[2])
			n += c
		}
	}
	return n
}
