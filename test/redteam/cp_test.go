package redteam_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
)

// cliResult is what one run of the airlock CLI printed and returned.
type cliResult struct {
	stdout, stderr []byte
	code           int
}

// airlockCLI runs the airlock CLI with args, bounded in time. With a
// umask (not -1), the CLI runs with that umask.
func airlockCLI(t *testing.T, umask int, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var cmd *exec.Cmd
	if umask >= 0 {
		cmd = exec.CommandContext(ctx, "/bin/sh", append([]string{"-c", fmt.Sprintf(`umask %03o; exec "$0" "$@"`, umask), bins.cli}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, bins.cli, args...)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("airlock %q did not finish in time; stderr: %s", args, errb.Bytes())
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("airlock %q: %v", args, err)
	}
	return cliResult{out.Bytes(), errb.Bytes(), code}
}

// cliSandbox starts a detached sandbox of level lv with the CLI, and
// removes it when the test ends.
func cliSandbox(t *testing.T, lv airlock.Isolation, command ...string) string {
	t.Helper()
	args := []string{"run", "-d", "--isolation", string(lv), "--timeout", "10m"}
	if len(command) > 0 {
		args = append(append(args, "--"), command...)
	}
	r := airlockCLI(t, -1, args...)
	id := strings.TrimSpace(string(r.stdout))
	if r.code != 0 || id == "" {
		t.Fatalf("airlock run -d: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	t.Cleanup(func() { airlockCLI(t, -1, "rm", "-f", id) })
	return id
}

// cliSh runs a shell command line in a CLI sandbox; it must exit 0.
func cliSh(t *testing.T, id, command string) string {
	t.Helper()
	r := airlockCLI(t, -1, "exec", id, "--", "sh", "-c", command)
	if r.code != 0 {
		t.Fatalf("exec %q: exit %d\nstdout: %s\nstderr: %s", command, r.code, r.stdout, r.stderr)
	}
	return string(r.stdout)
}

// hostSecretDir makes a host directory holding a file that no copy may
// read or change, and returns it with a check that it is untouched.
func hostSecretDir(t *testing.T) (string, func()) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "secret"), []byte("host secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, func() {
		t.Helper()
		ents, err := os.ReadDir(dir)
		if err != nil || len(ents) != 1 || ents[0].Name() != "secret" {
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			t.Errorf("the host directory %s changed: %q, %v", dir, names, err)
		}
		if b, _ := os.ReadFile(filepath.Join(dir, "secret")); string(b) != "host secret" {
			t.Errorf("the host file %s/secret changed: %q", dir, b)
		}
	}
}

// noEscapeFrom checks what a copy out wrote under dir: only regular files,
// directories and symlinks (made as links, never followed; never a
// special file), none with a setuid, setgid or sticky bit, and no content
// of the host or of the agent's /proc.
func noEscapeFrom(t *testing.T, dir string) {
	t.Helper()
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		if m := info.Mode(); m&(fs.ModeDevice|fs.ModeNamedPipe|fs.ModeSocket|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != 0 {
			t.Errorf("a copy out made %s with mode %v", p, m)
		}
		if info.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			for _, leak := range []string{"host secret", "PATH=", "Name:\t", "VmRSS"} {
				if bytes.Contains(b, []byte(leak)) {
					t.Errorf("a copy out wrote %s holding %q: it read outside the sandbox's files", p, leak)
				}
			}
		}
		return nil
	})
}

// linkForms plants, under dir in the sandbox, symlinks that would lead
// out of the sandbox's files if followed as the host would: to the
// agent's /proc (plain and magic links), to the host's directory, and
// above the root with relative and absolute "..".
func linkForms(hostDir string) map[string]string {
	return map[string]string{
		"self":     "/proc/self",
		"one":      "/proc/1",
		"rootlink": "/proc/1/root",
		"cwdlink":  "/proc/self/cwd",
		"host":     hostDir,
		"up":       "../../../../../../../.." + hostDir,
		"absup":    "/../../../.." + hostDir,
		"root":     "/",
	}
}

// TestAttackCpThroughLinks: airlock cp follows no symlink, in any
// component, out of the sandbox's files: not into the agent's /proc, not
// to a host path, not above the root; and what it copies out makes
// nothing on the host but the files asked for.
func TestAttackCpThroughLinks(t *testing.T) {
	t.Parallel()
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		hostDir, untouched := hostSecretDir(t)
		defer untouched()
		id := cliSandbox(t, lv)
		var plant strings.Builder
		plant.WriteString("set -e; mkdir -p /workspace/d /workspace/tree/sub; echo inside > /workspace/tree/sub/f\n")
		// The host's path exists in the sandbox too, with its own file:
		// a link to it must reach that one.
		fmt.Fprintf(&plant, "mkdir -p %s; echo sandbox copy > %s/secret\n", shQuote(hostDir), shQuote(hostDir))
		for name, target := range linkForms(hostDir) {
			fmt.Fprintf(&plant, "ln -s %s /workspace/d/%s; ln -s %s /workspace/tree/%s\n", shQuote(target), name, shQuote(target), name)
		}
		plant.WriteString("ln -s /proc/self/environ /workspace/tree/environ; ln -s /proc/1/root/etc /workspace/tree/etc\n")
		cliSh(t, id, plant.String())
		dest := t.TempDir()

		// Out, through a link in a middle component or directly: refused,
		// or, for a link itself, a link with the sandbox's target.
		asLinks := map[string]string{"/workspace/d/cwdlink": "/proc/self/cwd", "/workspace/d/self": "/proc/self"}
		for i, src := range []string{
			"/workspace/d/self/environ", "/workspace/d/self/status", "/workspace/d/one/environ",
			"/workspace/d/one/root/etc/hostname", "/workspace/d/rootlink/etc/hostname", "/workspace/d/cwdlink",
			"/workspace/d/self/fd/0", "/workspace/d/root/proc/self/environ",
			"/proc/self/environ", "/proc/1/environ", "/proc/1/root/etc/hostname", "/proc/self/fd",
			"/workspace/d/self", "/proc",
		} {
			out := filepath.Join(dest, fmt.Sprintf("out%d", i))
			r := airlockCLI(t, -1, "cp", id+":"+src, out)
			if want, ok := asLinks[src]; ok {
				if to, err := os.Readlink(out); r.code != 0 || err != nil || to != want {
					t.Errorf("cp of the link %s: exit %d, %q, %v (%s); want a link to %s", src, r.code, to, err, r.stderr, want)
				}
				continue
			}
			if r.code == 0 {
				if _, err := os.Lstat(out); err == nil {
					t.Errorf("cp %s: copied out (%s)", src, r.stderr)
				}
			}
		}
		// Links to the host's path, or above the root, reach the
		// sandbox's own file at that path.
		for i, src := range []string{"/workspace/d/host/secret", "/workspace/d/up/secret", "/workspace/d/absup/secret", "/workspace/d/root" + hostDir + "/secret"} {
			out := filepath.Join(dest, fmt.Sprintf("host%d", i))
			r := airlockCLI(t, -1, "cp", id+":"+src, out)
			if b, _ := os.ReadFile(out); r.code != 0 || string(b) != "sandbox copy\n" {
				t.Errorf("cp %s: exit %d, %q (%s), want the sandbox's own file", src, r.code, b, r.stderr)
			}
		}
		// A link that stays inside the sandbox is followed, as a command
		// in it would: the sandbox's hostname, not the host's.
		r := airlockCLI(t, -1, "cp", id+":/workspace/d/root/etc/hostname", filepath.Join(dest, "hostname"))
		if b, _ := os.ReadFile(filepath.Join(dest, "hostname")); r.code != 0 || strings.TrimSpace(string(b)) != id {
			t.Errorf("cp through a link to / inside the sandbox: exit %d, %q (%s), want the sandbox's hostname %s", r.code, b, r.stderr, id)
		}
		// A tree: its files, and its links as links with the targets the
		// sandbox gave, whatever they point to, none followed.
		r = airlockCLI(t, -1, "cp", id+":/workspace/tree", filepath.Join(dest, "tree"))
		if r.code != 0 {
			t.Fatalf("cp of a tree with links: exit %d: %s", r.code, r.stderr)
		}
		if b, err := os.ReadFile(filepath.Join(dest, "tree", "sub", "f")); err != nil || string(b) != "inside\n" {
			t.Errorf("tree/sub/f: %q, %v", b, err)
		}
		wantLinks := linkForms(hostDir)
		wantLinks["environ"], wantLinks["etc"] = "/proc/self/environ", "/proc/1/root/etc"
		ents, _ := os.ReadDir(filepath.Join(dest, "tree"))
		if len(ents) != len(wantLinks)+1 {
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			t.Errorf("the tree copied out holds %q, want sub and %d links", names, len(wantLinks))
		}
		for name, target := range wantLinks {
			p := filepath.Join(dest, "tree", name)
			fi, err := os.Lstat(p)
			to, _ := os.Readlink(p)
			if err != nil || fi.Mode()&fs.ModeSymlink == 0 || to != target {
				t.Errorf("tree/%s copied out: %v, %q, %v; want a link to %s", name, fi, to, err, target)
			}
		}
		if bytes.Contains(r.stderr, []byte("skipping")) {
			t.Errorf("cp of a tree with links skipped some:\n%s", r.stderr)
		}
		noEscapeFrom(t, dest)

		// In, through the same links: refused, or inside the sandbox.
		src := filepath.Join(t.TempDir(), "payload")
		if err := os.WriteFile(src, []byte("payload"), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, dst := range []string{
			"/workspace/d/self/payload", "/workspace/d/self/attr/current", "/workspace/d/one/oom_score_adj",
			"/workspace/d/rootlink/workspace/payload", "/workspace/d/cwdlink/payload", "/proc/self/payload",
			"/proc/1/oom_score_adj", "/proc/sys/kernel/payload", "/workspace/d/self/fd/0",
		} {
			if r := airlockCLI(t, -1, "cp", src, id+":"+dst); r.code == 0 {
				t.Errorf("cp into %s succeeded", dst)
			}
		}
		// Through a link to the host's path, the copy lands inside the
		// sandbox at that path; never on the host.
		for i, dst := range []string{"/workspace/d/host", "/workspace/d/up", "/workspace/d/absup"} {
			name := fmt.Sprintf("payload%d", i)
			if r := airlockCLI(t, -1, "cp", src, id+":"+dst+"/"+name); r.code != 0 {
				t.Errorf("cp into %s/%s: %s", dst, name, r.stderr)
			}
			if got := cliSh(t, id, "cat "+shQuote(hostDir+"/"+name)); got != "payload" {
				t.Errorf("cp into %s/%s: the sandbox's %s/%s holds %q", dst, name, hostDir, name, got)
			}
		}
	})
}

// TestAttackCpSwapRace: a command in the sandbox swaps a directory with
// symlinks out of its files while cp copies from and into it, many times:
// no copy ever reads or writes anything but the sandbox's own files.
func TestAttackCpSwapRace(t *testing.T) {
	t.Parallel()
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		hostDir, untouched := hostSecretDir(t)
		defer untouched()
		id := cliSandbox(t, lv)
		// d is a directory whose files have names that /proc/self has too,
		// and, in turns, a symlink out of the sandbox's files.
		cliSh(t, id, "mkdir -p /workspace/r/d/sub && cd /workspace/r/d && for f in f environ status sub/g; do echo inside > $f; done")
		// The swapper runs in the background until the sandbox ends.
		swapper := fmt.Sprintf(`
import os, time
os.chdir("/workspace/r")
targets = ["/proc/self", "/proc/1/root/workspace/r/real", "/proc/self", %q, "/proc/1", "../../../../../.." + %q]
for i, t in enumerate(targets):
    os.symlink(t, "l%%d" %% i)
def step(op, *args):
    try:
        op(*args)
    except OSError:
        pass
while True:
    for i in range(len(targets)):
        time.sleep(0.002)
        step(os.rename, "d", "real")
        step(os.rename, "l%%d" %% i, "d")
        time.sleep(0.002)
        step(os.rename, "d", "l%%d" %% i)
        step(os.rename, "real", "d")
`, hostDir, hostDir)
		r := airlockCLI(t, -1, "exec", id, "--", "sh", "-c", "python3 -c "+shQuote(swapper)+" >/dev/null 2>&1 &")
		if r.code != 0 {
			t.Fatalf("start the swapper: %s", r.stderr)
		}
		dest := t.TempDir()
		in := t.TempDir()
		if err := os.MkdirAll(filepath.Join(in, "tree", "deeper"), 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(in, "tree", "x"), []byte("payload"), 0o644)
		os.WriteFile(filepath.Join(in, "tree", "deeper", "y"), []byte("payload"), 0o644)
		// The copies resolve their paths in the agent, the same code at
		// every level: the other levels race fewer rounds.
		rounds := 25
		if lv != airlock.IsolationProcess {
			rounds = 8
		}
		copied := 0
		for i := range rounds {
			for _, src := range []string{"/workspace/r/d", "/workspace/r/d/environ", "/workspace/r/d/status", "/workspace/r/d/sub/g", "/workspace/r/d/sub"} {
				out := filepath.Join(dest, fmt.Sprintf("%d%s", i, strings.ReplaceAll(src, "/", "_")))
				if airlockCLI(t, -1, "cp", id+":"+src, out).code == 0 {
					copied++
				}
			}
			airlockCLI(t, -1, "cp", filepath.Join(in, "tree"), id+":/workspace/r/d/in")
		}
		t.Logf("%d copies out succeeded during the swaps", copied)
		// Everything copied out is the sandbox's own: f and g hold
		// "inside", and nothing else is there.
		_ = filepath.WalkDir(dest, func(p string, d fs.DirEntry, err error) error {
			// A link copied out (d, caught as one of the sandbox's
			// links) is left unread: it is not followed here either.
			if err != nil || d.IsDir() {
				return nil
			}
			if d.Type()&fs.ModeSymlink != 0 {
				to, _ := os.Readlink(p)
				if !slices.Contains([]string{"/proc/self", "/proc/1/root/workspace/r/real", hostDir, "/proc/1", "../../../../../.." + hostDir}, to) {
					t.Errorf("copied out during the swaps: %s, a link to %q that the sandbox never made", p, to)
				}
				return nil
			}
			if b, _ := os.ReadFile(p); string(b) != "inside\n" && string(b) != "payload" {
				t.Errorf("copied out during the swaps: %s holding %.60q", p, b)
			}
			return nil
		})
		noEscapeFrom(t, dest)
		if out := cliSh(t, id, "echo alive"); out != "alive\n" {
			t.Errorf("the sandbox after the swaps: %q", out)
		}
	})
}

// TestAttackCpModes: files and directories copied out get the sandbox's
// permission bits less the caller's umask, and never a setuid, setgid or
// sticky bit.
func TestAttackCpModes(t *testing.T) {
	t.Parallel()
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		id := cliSandbox(t, lv)
		modes := map[string]fs.FileMode{"rw": 0o666, "suid": 0o4755, "sgid": 0o2755, "both": 0o6777, "sticky": 0o1777, "private": 0o600}
		var mk strings.Builder
		mk.WriteString("set -e; mkdir -p /workspace/m/dir /workspace/m/sgdir; echo x > /workspace/m/sgdir/in; chmod 2777 /workspace/m/sgdir; chmod 0777 /workspace/m/dir\n")
		for name, m := range modes {
			fmt.Fprintf(&mk, "echo %s > /workspace/m/%s; chmod %o /workspace/m/%s\n", name, name, m, name)
		}
		mk.WriteString("stat -c '%n %a' /workspace/m/*")
		t.Logf("in the sandbox:\n%s", cliSh(t, id, mk.String()))
		for _, umask := range []int{0o022, 0o027, 0o077} {
			dest := t.TempDir()
			// One file at a time, and the whole tree.
			for name := range modes {
				if r := airlockCLI(t, umask, "cp", id+":/workspace/m/"+name, filepath.Join(dest, name)); r.code != 0 {
					t.Fatalf("cp %s: %s", name, r.stderr)
				}
			}
			if r := airlockCLI(t, umask, "cp", id+":/workspace/m", filepath.Join(dest, "tree")); r.code != 0 {
				t.Fatalf("cp the tree: %s", r.stderr)
			}
			for name, m := range modes {
				want := m.Perm() &^ fs.FileMode(umask)
				for _, p := range []string{filepath.Join(dest, name), filepath.Join(dest, "tree", name)} {
					fi, err := os.Lstat(p)
					if err != nil {
						t.Errorf("%s: %v", p, err)
						continue
					}
					if fi.Mode() != want {
						t.Errorf("umask %03o: a %o file copied out is %v (%o), want %v", umask, m, fi.Mode(), fi.Mode(), want)
					}
				}
			}
			for _, dir := range []string{"dir", "sgdir"} {
				fi, err := os.Lstat(filepath.Join(dest, "tree", dir))
				if err != nil {
					t.Fatal(err)
				}
				if want := (0o777 &^ fs.FileMode(umask)) | fs.ModeDir; fi.Mode() != want {
					t.Errorf("umask %03o: directory %s copied out is %v, want %v", umask, dir, fi.Mode(), want)
				}
			}
			noEscapeFrom(t, dest)
		}
		// Over an existing file, the copy's mode replaces the old one.
		dest := t.TempDir()
		old := filepath.Join(dest, "suid")
		if err := os.WriteFile(old, []byte("old"), 0o600); err != nil {
			t.Fatal(err)
		}
		if r := airlockCLI(t, 0o022, "cp", id+":/workspace/m/suid", old); r.code != 0 {
			t.Fatal(string(r.stderr))
		}
		if fi, _ := os.Lstat(old); fi.Mode() != 0o755 {
			t.Errorf("a setuid file copied over an existing one: %v, want -rwxr-xr-x", fi.Mode())
		}
	})
}

// TestAttackFileAPIPaths: every file operation of the Go API refuses the
// agent's /proc and magic links, and resolves every other link inside the
// sandbox's root, whatever the form of the path.
func TestAttackFileAPIPaths(t *testing.T) {
	t.Parallel()
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		hostDir, untouched := hostSecretDir(t)
		defer untouched()
		sb := box(t, lv, airlock.Config{})
		var plant strings.Builder
		plant.WriteString("set -e; mkdir -p /workspace/d\n")
		fmt.Fprintf(&plant, "mkdir -p %s\n", shQuote(hostDir))
		for name, target := range linkForms(hostDir) {
			fmt.Fprintf(&plant, "ln -s %s /workspace/d/%s\n", shQuote(target), name)
		}
		ok(t, sb, plant.String())
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		// The agent's /proc, by every path form: refused as permission.
		for _, p := range []string{
			"/proc/self/environ", "/proc/1/status", "/proc/1/cmdline", "/workspace/d/self/environ",
			"/workspace/d/one/status", "/workspace/d/root/proc/self/status", "/proc/sys/kernel/hostname",
		} {
			if b, err := sb.ReadFile(ctx, p); !errors.Is(err, fs.ErrPermission) {
				t.Errorf("ReadFile %s: %.40q, %v; want a permission error", p, b, err)
			}
			if _, err := sb.Stat(ctx, p); !errors.Is(err, fs.ErrPermission) {
				t.Errorf("Stat %s: %v; want a permission error", p, err)
			}
			if _, err := sb.ListFiles(ctx, filepath.Dir(p)); !errors.Is(err, fs.ErrPermission) {
				t.Errorf("ListFiles %s: %v; want a permission error", filepath.Dir(p), err)
			}
			if err := sb.WriteFile(ctx, p+"x", []byte("x"), 0o644); !errors.Is(err, fs.ErrPermission) {
				t.Errorf("WriteFile %sx: %v; want a permission error", p, err)
			}
			if err := sb.Mkdir(ctx, p+"x", 0o755, true); !errors.Is(err, fs.ErrPermission) {
				t.Errorf("Mkdir %sx: %v; want a permission error", p, err)
			}
			if err := sb.Remove(ctx, p, true); !errors.Is(err, fs.ErrPermission) {
				t.Errorf("Remove %s: %v; want a permission error", p, err)
			}
		}
		// Magic links are never followed.
		for _, p := range []string{"/workspace/d/rootlink/etc/hostname", "/workspace/d/cwdlink/x", "/proc/1/root/etc/hostname", "/proc/self/fd/0", "/proc/self/cwd/d"} {
			if b, err := sb.ReadFile(ctx, p); err == nil {
				t.Errorf("ReadFile %s through a magic link: %.40q", p, b)
			}
			if err := sb.WriteFile(ctx, p, []byte("x"), 0o644); err == nil {
				t.Errorf("WriteFile %s through a magic link succeeded", p)
			}
		}
		// Links to the host's path or above the root resolve inside it.
		for _, p := range []string{"/workspace/d/host/secret", "/workspace/d/up/secret", "/workspace/d/absup/secret"} {
			if b, err := sb.ReadFile(ctx, p); err == nil {
				t.Errorf("ReadFile %s: %q", p, b)
			}
			if err := sb.WriteFile(ctx, p, []byte("from the API"), 0o644); err != nil {
				t.Errorf("WriteFile %s: %v", p, err)
			}
			if got := ok(t, sb, "cat "+shQuote(hostDir)+"/secret"); got != "from the API" {
				t.Errorf("WriteFile %s landed elsewhere than the sandbox's %s/secret: %q", p, hostDir, got)
			}
			ok(t, sb, "rm "+shQuote(hostDir)+"/secret")
		}
		if b, err := sb.ReadFile(ctx, "/workspace/d/root/etc/hostname"); err != nil || strings.TrimSpace(string(b)) != sb.ID() {
			t.Errorf("ReadFile through a link to / inside the sandbox: %q, %v", b, err)
		}
		// Remove never follows a link: the link goes, not its target.
		if err := sb.Remove(ctx, "/workspace/d", true); err != nil {
			t.Fatalf("Remove of a tree of links: %v", err)
		}
		if ok(t, sb, "test -e /etc/hostname && ls -d /proc/1 && echo yes") == "" {
			t.Error("removing links removed what they pointed to")
		}
		// The root itself, and /proc, stay.
		if err := sb.Remove(ctx, "/", true); err == nil {
			t.Error("Remove / succeeded")
		}
		if err := sb.Remove(ctx, "/proc", true); !errors.Is(err, fs.ErrPermission) && !errors.Is(err, syscall.EBUSY) {
			t.Logf("Remove /proc: %v", err)
		}
		if _, err := sb.ListFiles(ctx, "/proc"); !errors.Is(err, fs.ErrPermission) {
			t.Errorf("ListFiles /proc: %v; want a permission error", err)
		}
	})
}
