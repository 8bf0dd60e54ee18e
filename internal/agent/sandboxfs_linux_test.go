package agent

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
)

// fsFixture is a sandbox root in a temporary directory, and a directory
// outside it holding a file the sandbox must never reach.
type fsFixture struct {
	fs            *sandboxFS
	root, outside string
}

const outsideSecret = "outside the root"

func newFSFixture(t *testing.T) *fsFixture {
	t.Helper()
	f := &fsFixture{root: t.TempDir(), outside: t.TempDir()}
	if err := os.WriteFile(filepath.Join(f.outside, "secret"), []byte(outsideSecret), 0o644); err != nil {
		t.Fatal(err)
	}
	var err error
	if f.fs, err = openSandboxFS(f.root); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.fs.Close() })
	return f
}

// in makes p (slash-separated, relative to the root) with content, or a
// directory when content is "/", or a symlink when it starts with "->".
func (f *fsFixture) in(t *testing.T, p, content string) {
	t.Helper()
	full := filepath.Join(f.root, p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		t.Fatal(err)
	}
	var err error
	switch {
	case content == "/":
		err = os.Mkdir(full, 0o755)
	case strings.HasPrefix(content, "->"):
		err = os.Symlink(strings.TrimPrefix(content, "->"), full)
	default:
		err = os.WriteFile(full, []byte(content), 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func (f *fsFixture) read(p string) (string, error) {
	file, _, err := f.fs.open(p)
	if err != nil {
		return "", err
	}
	defer file.Close()
	b, err := io.ReadAll(file)
	return string(b), err
}

// TestSandboxFSSymlinksStayInRoot: symlinks in any component, absolute or
// relative, resolve inside the root, for every operation.
func TestSandboxFSSymlinksStayInRoot(t *testing.T) {
	f := newFSFixture(t)
	f.in(t, "etc/secret", "inside")
	f.in(t, "abs", "->"+f.outside)              // a host-like absolute path
	f.in(t, "up", "->../../../../../../..")     // relative, above the root
	f.in(t, "upabs", "->/../../../..")          // absolute with ..
	f.in(t, "w/deep/up", "->../../../../../..") // deeper
	f.in(t, "slash", "->/")                     // to the root itself
	outsideRel := strings.TrimPrefix(f.outside, "/")
	paths := []string{
		"/abs/secret",
		"/up" + f.outside + "/secret",
		"/upabs" + f.outside + "/secret",
		"/w/deep/up" + f.outside + "/secret",
		"/slash/../../" + outsideRel + "/secret",
	}
	for _, p := range paths {
		if got, err := f.read(p); err == nil {
			t.Errorf("read %s: got %q, want an error (it would be outside the root)", p, got)
		}
		if _, err := f.fs.stat(p); err == nil {
			t.Errorf("stat %s succeeded", p)
		}
		if _, err := f.fs.list(filepath.Dir(p)); err == nil {
			t.Errorf("list %s succeeded", filepath.Dir(p))
		}
		if err := f.fs.remove(p, false); err == nil {
			t.Errorf("remove %s succeeded", p)
		}
	}
	// A write lands inside the root, if anywhere; then reads find it there.
	for _, p := range paths {
		if u, err := f.fs.create(p); err == nil {
			u.Write([]byte("x"))
			if err := u.commit(0o644); err != nil {
				t.Errorf("commit %s: %v", p, err)
			}
		}
		_ = f.fs.mkdir(filepath.Dir(p)+"/made", 0o755, true)
		if got, err := f.read(p); err == nil && got != "x" {
			t.Errorf("read %s after a write: %q", p, got)
		}
	}
	// Inside the root, the same links work as they do for commands.
	for _, p := range []string{"/slash/etc/secret", "/up/etc/secret", "/upabs/etc/secret", "/w/deep/up/etc/secret"} {
		if got, err := f.read(p); err != nil || got != "inside" {
			t.Errorf("read %s: %q, %v; want the root's etc/secret", p, got, err)
		}
	}
	// Nothing reached the outside directory.
	ents, _ := os.ReadDir(f.outside)
	if len(ents) != 1 {
		t.Errorf("the outside directory changed: %v", ents)
	}
	if b, _ := os.ReadFile(filepath.Join(f.outside, "secret")); string(b) != outsideSecret {
		t.Errorf("the outside file changed: %q", b)
	}
	// What the writes made is inside the root.
	if _, err := os.Stat(filepath.Join(f.root, outsideRel, "secret")); err != nil {
		t.Errorf("a write through a link to %s did not land inside the root: %v", f.outside, err)
	}
}

// TestSandboxFSProcRefused: the agent's own /proc is not reachable, by
// any path form, including magic links.
func TestSandboxFSProcRefused(t *testing.T) {
	fsys, err := openSandboxFS("/")
	if err != nil {
		t.Fatal(err)
	}
	defer fsys.Close()
	dir := t.TempDir()
	for name, target := range map[string]string{"self": "/proc/self", "proc": "/proc", "rel": "../../../../../../proc/1"} {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	refused := func(op, p string, err error) {
		t.Helper()
		var pe *agentproto.Error
		if err == nil {
			t.Errorf("%s %s succeeded, want it refused", op, p)
		} else if !errors.As(err, &pe) || pe.Code != agentproto.CodePermission || !strings.Contains(pe.Message, "kernel filesystem") {
			t.Errorf("%s %s: %v, want a refusal of a kernel filesystem", op, p, err)
		}
	}
	for _, p := range []string{"/proc/self/environ", "/proc/1/status", dir + "/self/environ", dir + "/proc/self/status", dir + "/rel/cmdline", "/proc/sys/kernel/hostname", "/sys/kernel/uevent_seqnum"} {
		if _, err := os.Stat(p); err != nil {
			continue // not on this machine
		}
		f, _, err := fsys.open(p)
		if f != nil {
			f.Close()
		}
		refused("read", p, err)
		_, err = fsys.stat(p)
		refused("stat", p, err)
		_, err = fsys.list(filepath.Dir(p))
		refused("list", filepath.Dir(p), err)
		u, err := fsys.create(p)
		if u != nil {
			u.abort()
		}
		refused("write", p, err)
		refused("mkdir", p, fsys.mkdir(p+"x", 0o755, false))
		refused("mkdir -p", p, fsys.mkdir(p+"x/y", 0o755, true))
		refused("remove", p, fsys.remove(p, false))
	}
	// Magic links are never followed, even where they would land on an
	// ordinary filesystem.
	for _, p := range []string{"/proc/self/root/etc/hostname", "/proc/self/cwd", "/proc/1/root/etc"} {
		if f, _, err := fsys.open(p); err == nil {
			f.Close()
			t.Errorf("read %s succeeded through a magic link", p)
		}
		if _, err := fsys.list(p); err == nil {
			t.Errorf("list %s succeeded through a magic link", p)
		}
	}
}

// TestSandboxFSSwapRace: a directory swapped with a symlink to outside
// the root while reads, listings, writes and removals run never lets one
// of them reach outside.
func TestSandboxFSSwapRace(t *testing.T) {
	f := newFSFixture(t)
	f.in(t, "d/secret", "inside")
	f.in(t, "link", "->"+f.outside)
	f.in(t, "rellink", "->../../../../../.."+f.outside)
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		d, tmp := filepath.Join(f.root, "d"), filepath.Join(f.root, "d.real")
		links := []string{filepath.Join(f.root, "link"), filepath.Join(f.root, "rellink")}
		for i := 0; !stop.Load(); i++ {
			_ = os.Rename(d, tmp)
			_ = os.Symlink(f.outside, d)
			_ = os.Rename(links[i%2], d) // a prepared link, by rename
			_ = os.Remove(d)
			_ = os.Rename(tmp, d)
		}
	})
	for range 2000 {
		if got, err := f.read("/d/secret"); err == nil && got != "inside" {
			t.Errorf("read /d/secret during swaps: %q", got)
		}
		if ents, err := f.fs.list("/d"); err == nil {
			for _, e := range ents {
				if e.Name != "secret" && !strings.HasPrefix(e.Name, ".airlock-write-") && e.Name != "new" && e.Name != "sub" {
					t.Errorf("list /d during swaps: entry %q", e.Name)
				}
			}
		}
		if u, err := f.fs.create("/d/new"); err == nil {
			u.Write([]byte("x"))
			_ = u.commit(0o600)
		}
		_ = f.fs.mkdir("/d/sub/deeper", 0o755, true)
		_ = f.fs.remove("/d/sub", true)
	}
	stop.Store(true)
	wg.Wait()
	ents, _ := os.ReadDir(f.outside)
	if len(ents) != 1 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("the outside directory changed during the swaps: %q", names)
	}
}

// TestSandboxFSRemoveAll: a recursive removal removes links, not what
// they point to.
func TestSandboxFSRemoveAll(t *testing.T) {
	f := newFSFixture(t)
	f.in(t, "keep/x", "kept")
	f.in(t, "t/a/b/c", "c")
	f.in(t, "t/a/tokeep", "->/keep")
	f.in(t, "t/abs", "->"+f.outside)
	f.in(t, "t/e", "/")
	if err := f.fs.remove("/t", true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(f.root, "t")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("/t remains: %v", err)
	}
	if got, err := f.read("/keep/x"); err != nil || got != "kept" {
		t.Errorf("/keep/x after removing a link to it: %q %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(f.outside, "secret")); err != nil {
		t.Errorf("outside: %v", err)
	}
	if err := f.fs.remove("/t", true); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("remove of a missing tree: %v, want not exist", err)
	}
	if err := f.fs.remove("/", true); err == nil {
		t.Error("remove / succeeded")
	}
	// A final symlink is removed itself, not followed.
	f.in(t, "l", "->/keep")
	if err := f.fs.remove("/l", false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(f.root, "keep", "x")); err != nil {
		t.Errorf("remove /l removed its target: %v", err)
	}
}

// TestSandboxFSModes: stat reports what is there without following a
// final link; writes replace a final symlink rather than following it.
func TestSandboxFSModes(t *testing.T) {
	f := newFSFixture(t)
	f.in(t, "suid", "s")
	if err := os.Chmod(filepath.Join(f.root, "suid"), 0o4755|os.ModeSetuid); err != nil {
		t.Fatal(err)
	}
	info, err := f.fs.stat("/suid")
	if err != nil {
		t.Fatal(err)
	}
	if m := os.FileMode(info.Mode); m&os.ModeSetuid == 0 || m.Perm() != 0o755 || info.Name != "/suid" {
		t.Errorf("stat /suid: %v %q", m, info.Name)
	}
	f.in(t, "out", "->"+f.outside+"/secret")
	info, err = f.fs.stat("/out")
	if err != nil || info.Link != f.outside+"/secret" || os.FileMode(info.Mode)&os.ModeSymlink == 0 {
		t.Errorf("stat /out: %+v %v", info, err)
	}
	u, err := f.fs.create("/out")
	if err != nil {
		t.Fatal(err)
	}
	u.Write([]byte("replaced"))
	if err := u.commit(0o640); err != nil {
		t.Fatal(err)
	}
	if got, err := f.read("/out"); err != nil || got != "replaced" {
		t.Errorf("/out after write: %q %v", got, err)
	}
	if fi, err := os.Lstat(filepath.Join(f.root, "out")); err != nil || fi.Mode() != 0o640 {
		t.Errorf("/out mode after write: %v %v", fi.Mode(), err)
	}
	if b, _ := os.ReadFile(filepath.Join(f.outside, "secret")); string(b) != outsideSecret {
		t.Errorf("a write to a symlink went through it: %q", b)
	}
}
