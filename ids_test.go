package airlock_test

import (
	"archive/tar"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/agentbin"
	"github.com/airlock-sandbox/airlock/internal/image/owners"
	"github.com/airlock-sandbox/airlock/internal/image/store"
	"github.com/airlock-sandbox/airlock/internal/testbin"
)

// eachIsolation runs f as a subtest for every isolation level that works
// here; a level that does not is skipped with airlock's reason.
func eachIsolation(t *testing.T, f func(t *testing.T, lv airlock.Isolation)) {
	t.Helper()
	for _, lv := range []airlock.Isolation{airlock.IsolationProcess, airlock.IsolationGVisor, airlock.IsolationVM} {
		t.Run(string(lv), func(t *testing.T) {
			ctx := testCtx(t, time.Minute)
			sb, err := airlock.Create(ctx, airlock.Config{Isolation: lv})
			switch {
			case errors.Is(err, airlock.ErrUnavailable):
				t.Skip(err)
			case err != nil:
				t.Fatalf("create a %s sandbox: %v", lv, err)
			}
			sb.Close()
			f(t, lv)
		})
	}
}

// hostID is the host id of id inside, by a uid_map or gid_map.
func hostID(t *testing.T, idMap string, id int) int {
	t.Helper()
	for _, l := range strings.Split(strings.TrimSpace(idMap), "\n") {
		var in, out, n int
		if _, err := fmt.Sscan(l, &in, &out, &n); err != nil {
			t.Fatalf("map line %q: %v", l, err)
		}
		if id >= in && id < in+n {
			return out + id - in
		}
	}
	t.Fatalf("id %d is not in the map %q", id, idMap)
	return 0
}

// TestIDsUsers does inside what images and package managers do with
// users: add one, become it, give it files, gain root back through a
// set-uid program, and add it to groups; the files it owns belong, on
// the host, to the sandbox's own host ids.
func TestIDsUsers(t *testing.T) {
	t.Parallel()
	eachIsolation(t, func(t *testing.T, lv airlock.Isolation) {
		ctx := testCtx(t, 2*time.Minute)
		sb := newSandbox(t, airlock.Config{Isolation: lv})
		if got := mustRun(t, ctx, sb, "useradd -m bob && su bob -c 'id -u; id -un; id -g'"); got != "1000\nbob\n1000\n" {
			t.Errorf("su bob -c id: %q, want bob's uid 1000 and gid 1000", got)
		}
		if got := mustRun(t, ctx, sb, "su bob -c 'touch ~/mine && stat -c %U:%G:%a ~/mine ~'"); got != "bob:bob:644\nbob:bob:755\n" {
			t.Errorf("bob's files: %q", got)
		}
		// Supplementary groups (initgroups in su, setgroups).
		if got := mustRun(t, ctx, sb, "groupadd -g 2000 team && usermod -aG team bob && su bob -c 'id -Gn'"); got != "bob team\n" {
			t.Errorf("su bob -c 'id -Gn' after usermod -aG team bob: %q", got)
		}
		if got := mustRun(t, ctx, sb, "setpriv --reuid=1000 --regid=1000 --groups=100,2000 id -G"); got != "1000 100 2000\n" {
			t.Errorf("setgroups: %q", got)
		}
		if got := mustRun(t, ctx, sb, "touch /workspace/f && chown 1000:2000 /workspace/f && stat -c '%u %g' /workspace/f"); got != "1000 2000\n" {
			t.Errorf("stat after chown 1000:2000: %q", got)
		}
		// A set-uid-root program runs as root inside for bob.
		if got := mustRun(t, ctx, sb, "cp /usr/bin/id /workspace/id && chmod 4755 /workspace/id && su bob -c /workspace/id"); !strings.Contains(got, "uid=1000(bob)") || !strings.Contains(got, "euid=0(root)") {
			t.Errorf("a set-uid-root id run by bob: %q, want uid bob and euid root", got)
		}
		if lv != airlock.IsolationProcess {
			// A VM's ids are its guest kernel's own, and the
			// Sentry's its own user namespace's: all of them exist,
			// and the sandbox's own tree is not the host's. Where
			// the Sentry's files are the host's (mounts, a
			// prepared root), its gofer's ids are a block of the
			// host's (TestGVisorLevel, redteam's TestIDsDistinct).
			return
		}
		// Ids past the map do not exist.
		if out := mustFail(t, ctx, sb, "chown 65537 /workspace/f"); !strings.Contains(out, "Invalid argument") {
			t.Errorf("chown to an id past the map: %q, want EINVAL", out)
		}

		// On the host, bob's file belongs to the host ids that 1000
		// and 2000 map to, which are the sandbox's own.
		uidMap := mustRun(t, ctx, sb, "cat /proc/self/uid_map")
		gidMap := mustRun(t, ctx, sb, "cat /proc/self/gid_map")
		var st syscall.Stat_t
		err := syscall.Stat(fmt.Sprintf("/proc/%d/root/workspace/f", sb.PID()), &st)
		if err != nil {
			if !isRoot() && errors.Is(err, os.ErrPermission) {
				return // the agent's root is not the caller's to look into
			}
			t.Fatal(err)
		}
		wantUID, wantGID := hostID(t, uidMap, 1000), hostID(t, gidMap, 2000)
		if int(st.Uid) != wantUID || int(st.Gid) != wantGID {
			t.Errorf("on the host, the file chowned to 1000:2000 inside belongs to %d:%d, want %d:%d", st.Uid, st.Gid, wantUID, wantGID)
		}
		if isRoot() && (wantUID == 1000 || wantUID == hostID(t, uidMap, 0)) {
			t.Errorf("uid 1000 inside is host uid %d: not a uid of the sandbox's own", wantUID)
		}
	})
}

// TestIDsRootFS gives a sandbox a prepared root whose files have owners
// and a set-uid-root program: the owners are kept inside (host uid 1000
// is 1000 inside), and the program runs as root inside for another
// user.
func TestIDsRootFS(t *testing.T) {
	t.Parallel()
	root := toolRootFS(t, "sh", "id", "stat", "setpriv", "cat")
	owner := os.Getuid() // owns the tree: root inside
	if err := os.WriteFile(filepath.Join(root, "owned"), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if isRoot() {
		if err := os.Chown(filepath.Join(root, "owned"), 1000, 1000); err != nil {
			t.Fatal(err)
		}
	}
	suid := filepath.Join(root, "bin", "suid-id")
	if err := os.Link(filepath.Join(root, "bin", "id"), suid); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(suid, os.ModeSetuid|0o755); err != nil {
		t.Fatal(err)
	}
	eachIsolation(t, func(t *testing.T, lv airlock.Isolation) {
		ctx := testCtx(t, time.Minute)
		sb := newSandbox(t, airlock.Config{Isolation: lv, RootFS: root})
		want := "0 0\n"
		if isRoot() {
			want = "1000 1000\n"
		}
		if got := mustRun(t, ctx, sb, "stat -c '%u %g' /owned"); got != want {
			t.Errorf("a file of host uid %d in the prepared root: owner %q inside, want %q", map[bool]int{true: 1000, false: owner}[isRoot()], got, want)
		}
		if got := mustRun(t, ctx, sb, "stat -c '%u %a' /bin/suid-id && setpriv --reuid=1000 --regid=1000 --clear-groups /bin/suid-id"); !strings.HasPrefix(got, "0 4755\n") || !strings.Contains(got, "euid=0") {
			t.Errorf("the prepared root's set-uid-root id run by uid 1000: %q, want euid 0", got)
		}
	})
}

// toolRootFS builds a prepared root with the host's programs named (from
// PATH) and the libraries they link, owned by the caller.
func toolRootFS(t *testing.T, tools ...string) string {
	t.Helper()
	root := t.TempDir()
	if err := testbin.ToolRoot(root, tools...); errors.Is(err, testbin.ErrToolMissing) {
		t.Skip(err)
	} else if err != nil {
		t.Fatal(err)
	}
	return root
}

// TestIDsPulledImageOwners pulls images whose files belong to a user and
// a set-uid program, and runs them: the files keep their owners inside,
// and the image's user may write its own home. As root the cache keeps
// the layers' ids; without root, a caller with subordinate ids gets the
// same through a worker mapped like its sandboxes, and its trees can
// still be linked into the next pull's, packed as erofs, and removed.
func TestIDsPulledImageOwners(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 3*time.Minute)
	users := []testbin.LayerFile{
		{Name: "etc/", Type: tar.TypeDir, Mode: 0o755},
		{Name: "etc/passwd", Body: "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000:app:/home/app:/bin/sh\n"},
		{Name: "etc/group", Body: "root:x:0:\napp:x:1000:\n"},
		{Name: "home/", Type: tar.TypeDir, Mode: 0o755},
		{Name: "home/app/", Type: tar.TypeDir, Mode: 0o700, UID: 1000, GID: 1000},
		{Name: "home/app/notes", Body: "mine\n", Mode: 0o600, UID: 1000, GID: 1000},
		{Name: "bin/su-ish", Type: tar.TypeLink, Link: "bin/busybox"},
		{Name: "srv/", Type: tar.TypeDir, Mode: 0o755, UID: 33, GID: 33},
		{Name: "srv/x", Body: "x", Mode: 0o4750, UID: 0, GID: 33},
	}
	cfg := v1.Config{Env: []string{"PATH=/bin"}, User: "app"}
	first, err := testbin.BusyboxLayout(filepath.Join(t.TempDir(), "one"), "v1", cfg, users)
	if err != nil {
		t.Skip(err)
	}
	// The second begins with the first's layers: its pull starts from
	// a copy of the first's tree.
	second, err := testbin.BusyboxLayout(filepath.Join(t.TempDir(), "two"), "v1", cfg, users,
		[]testbin.LayerFile{{Name: "home/app/more", Body: "more\n", UID: 1000, GID: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	cacheDir := filepath.Join(t.TempDir(), "cache")
	for _, ref := range []string{first, second} {
		sb := newSandbox(t, airlock.Config{Image: ref, ImageCacheDir: cacheDir})
		if mapped := mappedIDs(t, mustRun(t, ctx, sb, "cat /proc/self/uid_map")); mapped < 65536 {
			t.Skipf("the sandbox maps %d ids: an image's owners show only in a sandbox that maps 65,536", mapped)
		}
		want := "1000:1000 700\n1000:1000 600\n33:33 755\n0:33 4750\nwrote\n"
		if ref == second {
			want = "1000:1000 700\n1000:1000 600\n33:33 755\n0:33 4750\nwrote\nmore\n"
		}
		line := "stat -c '%u:%g %a' /home/app /home/app/notes /srv /srv/x; echo new > /home/app/new && echo wrote"
		if ref == second {
			line += "; cat /home/app/more"
		}
		res, err := sb.Run(ctx, airlock.Command{Shell: line, Dir: "/"})
		if err != nil {
			t.Fatal(err)
		}
		if string(res.Stdout) != want {
			t.Errorf("%s as its user app: %q (stderr %q), want %q", ref, res.Stdout, res.Stderr, want)
		}
		sb.Close()
	}

	// What the sandboxes ran on can be packed, and removed whole.
	agent, err := agentbin.Find(agentPath)
	if err != nil {
		t.Fatal(err)
	}
	o, err := owners.Detect(agent)
	if err != nil {
		t.Fatalf("owners are kept in the sandbox but not by the cache: %v", err)
	}
	c, err := store.OpenWith(cacheDir, o)
	if err != nil {
		t.Fatal(err)
	}
	imgs, err := c.List()
	if err != nil || len(imgs) != 2 {
		t.Fatalf("the cache lists %d images (%v), want 2", len(imgs), err)
	}
	for _, img := range imgs {
		if img.Owners != o.ID() {
			t.Errorf("image %s made by %q, want %q", img.Key, img.Owners, o.ID())
		}
	}
	if _, err := exec.LookPath("mkfs.erofs"); err == nil {
		if _, err := c.EROFS(ctx, imgs[0]); err != nil {
			t.Errorf("pack as erofs: %v", err)
		}
	}
	for _, img := range imgs {
		if _, err := c.Remove(ctx, img.Key); err != nil {
			t.Errorf("remove %s: %v; holders of the cache's locks: %s", img.Key, err, lockHolders(filepath.Join(cacheDir, "locks")))
		}
	}
	if _, err := c.Prune(ctx); err != nil {
		t.Errorf("prune: %v", err)
	}
	for _, sub := range []string{"images", "chains", "tmp"} {
		if ents, err := os.ReadDir(filepath.Join(cacheDir, sub)); err != nil || len(ents) != 0 {
			t.Errorf("the cache's %s after removing every image: %d entries (%v)", sub, len(ents), err)
		}
	}
}

// mappedIDs sums the counts of a uid_map.
func mappedIDs(t *testing.T, uidMap string) int {
	t.Helper()
	n := 0
	for _, l := range strings.Split(strings.TrimSpace(uidMap), "\n") {
		var in, out, size int
		if _, err := fmt.Sscan(l, &in, &out, &size); err != nil {
			t.Fatalf("map line %q: %v", l, err)
		}
		n += size
	}
	return n
}

// lockHolders names the processes with a file under dir open, with
// their state and command line.
func lockHolders(dir string) string {
	procs, _ := os.ReadDir("/proc")
	var out []string
	for _, p := range procs {
		fds, _ := os.ReadDir(filepath.Join("/proc", p.Name(), "fd"))
		for _, fd := range fds {
			l, _ := os.Readlink(filepath.Join("/proc", p.Name(), "fd", fd.Name()))
			if !strings.HasPrefix(l, dir) {
				continue
			}
			stat, _ := os.ReadFile(filepath.Join("/proc", p.Name(), "stat"))
			cmd, _ := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
			out = append(out, fmt.Sprintf("pid %s fd %s %s: %q %q", p.Name(), fd.Name(), l, stat, cmd))
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, "; ")
}
