package redteam_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/testbin"
)

// idMap is a uid_map or gid_map: inside, outside, count per line.
type idMap [][3]int

func parseIDMap(t *testing.T, s string) idMap {
	t.Helper()
	var m idMap
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		var e [3]int
		if _, err := fmt.Sscan(l, &e[0], &e[1], &e[2]); err != nil {
			t.Fatalf("map line %q: %v", l, err)
		}
		m = append(m, e)
	}
	return m
}

// host is the host id of id inside, and whether it has one.
func (m idMap) host(id int) (int, bool) {
	for _, e := range m {
		if id >= e[0] && id < e[0]+e[2] {
			return e[1] + id - e[0], true
		}
	}
	return 0, false
}

// statusIDs reads the four ids of a "Uid:" or "Gid:" line of a host
// process's status.
func statusIDs(t *testing.T, pid int, key string) []int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, key+":"); ok {
			var ids []int
			for _, f := range strings.Fields(v) {
				n, err := strconv.Atoi(f)
				if err != nil {
					t.Fatalf("%s line %q", key, l)
				}
				ids = append(ids, n)
			}
			return ids
		}
	}
	t.Fatalf("no %s line in /proc/%d/status", key, pid)
	return nil
}

// TestAttackSetIDProgram makes a set-uid-root program inside and runs it
// as another user: it gets root's rights inside, which reach no id
// outside the sandbox's map and no host privilege. From the host, the
// process runs as the sandbox's root's unprivileged uid, never as host
// root, in the sandbox's own user namespace.
func TestAttackSetIDProgram(t *testing.T) {
	t.Parallel()
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		processIDsOnly(t, lv)
		sb := box(t, lv, airlock.Config{})
		ok(t, sb, "cp /usr/bin/python3 /workspace/p && chmod 4755 /workspace/p && touch /workspace/f")
		uids := parseIDMap(t, ok(t, sb, "cat /proc/self/uid_map"))
		prog := pyLibc + `
def attempt(name, f):
    r = f()
    print(name, r, ctypes.get_errno())
print("ids", os.getuid(), os.geteuid())
attempt("setresuid-unmapped", lambda: libc.setresuid(65537, 65537, 65537))
attempt("chown-unmapped", lambda: libc.chown(b"/workspace/f", 70000, 70000))
attempt("setgroups-unmapped", lambda: libc.setgroups(1, (ctypes.c_uint * 1)(70000)))
attempt("unshare-user", lambda: libc.unshare(0x10000000))
attempt("mount", lambda: libc.mount(b"none", b"/mnt", b"tmpfs", 0, None))
attempt("create-in-usr", lambda: libc.open(b"/usr/bin/airlock-x", os.O_CREAT | os.O_WRONLY, 0o4755))
attempt("chown-usr", lambda: libc.chown(b"/usr/bin/env", 0, 0))
`
		res := run(t, sb, airlock.Command{Argv: []string{"setpriv", "--reuid=1000", "--regid=1000", "--clear-groups", "/workspace/p", "-c", prog}})
		if res.ExitCode != 0 {
			t.Fatalf("the set-uid program: exit %d\n%s%s", res.ExitCode, res.Stdout, res.Stderr)
		}
		got := map[string][]string{}
		sc := bufio.NewScanner(strings.NewReader(string(res.Stdout)))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 3 {
				got[f[0]] = f[1:]
			}
		}
		if ids := got["ids"]; len(ids) != 2 || ids[0] != "1000" || ids[1] != "0" {
			t.Fatalf("the set-uid-root program run by uid 1000 has uid and euid %v, want 1000 0", ids)
		}
		wants := map[string][]syscall.Errno{
			"setresuid-unmapped": {syscall.EINVAL}, "chown-unmapped": {syscall.EINVAL}, "setgroups-unmapped": {syscall.EINVAL},
			"unshare-user": {syscall.EPERM}, "mount": {syscall.EPERM}, "create-in-usr": {syscall.EROFS},
			"chown-usr": {syscall.EROFS, syscall.EPERM},
		}
		if lv == airlock.IsolationGVisor {
			// The Sentry's ids are its own (its first user namespace
			// maps every id): no id is unmapped there, and whatever id
			// a command takes, what reaches the host is the Sentry and
			// its gofer, as the sandbox's block (TestIDsDistinct,
			// TestAttackPrivilege). The host's /usr, whose owner is
			// no id of the block, is refused by permission first.
			delete(wants, "setresuid-unmapped")
			delete(wants, "chown-unmapped")
			delete(wants, "setgroups-unmapped")
			wants["create-in-usr"] = []syscall.Errno{syscall.EROFS, syscall.EACCES, syscall.EPERM}
			wants["chown-usr"] = []syscall.Errno{syscall.EROFS, syscall.EPERM, syscall.EACCES}
		}
		for name, want := range wants {
			v := got[name]
			if len(v) != 2 {
				t.Errorf("%s: no result in %q", name, res.Stdout)
				continue
			}
			r, _ := strconv.ParseInt(v[0], 10, 64)
			e, _ := strconv.Atoi(v[1])
			refused(t, name+" by a set-uid-root program", r, syscall.Errno(e), want...)
		}

		if lv == airlock.IsolationGVisor {
			return // its processes are the Sentry's tasks, not the host's
		}
		// The host's view of such a process.
		marker := sleepMarker(600)
		p, err := sb.Start(context.Background(), airlock.Command{Argv: []string{"setpriv", "--reuid=1000", "--regid=1000", "--clear-groups",
			"/workspace/p", "-c", "import sys, time; time.sleep(600)", marker}})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Kill()
		var pid int
		testbin.WaitFor(30*time.Second, func() bool {
			for hp, cmd := range hostProcs(t) {
				// Not setpriv itself, before it has executed the
				// program (its command line names both too).
				if strings.Contains(cmd, marker) && strings.Contains(cmd, "/workspace/p") && !strings.Contains(cmd, "setpriv") {
					pid = hp
					return true
				}
			}
			return false
		})
		if pid == 0 {
			t.Fatal("the set-uid program is not among the host's processes")
		}
		root, _ := uids.host(0)
		user, _ := uids.host(1000)
		if ids := statusIDs(t, pid, "Uid"); len(ids) != 4 || ids[0] != user || ids[1] != root || ids[2] != root || ids[3] != root {
			t.Errorf("from the host, the set-uid program has uids %v, want real %d and effective, saved and file-system %d (the sandbox's root)", ids, user, root)
		}
		if root == 0 {
			t.Errorf("the sandbox's root is host root")
		}
		hostNS, _ := os.Readlink("/proc/self/ns/user")
		if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/user", pid)); err != nil || ns == hostNS {
			t.Errorf("the set-uid program's user namespace is %q (%v), the host's is %q", ns, err, hostNS)
		}
	})
}

// TestAttackIDMaps tries to change the sandbox's maps from inside: a
// map is written once, and the host's newuidmap and newgidmap, visible
// in /usr, run without their set-uid bit and map nothing.
func TestAttackIDMaps(t *testing.T) {
	t.Parallel()
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		processIDsOnly(t, lv)
		sb := box(t, lv, airlock.Config{})
		before := ok(t, sb, "cat /proc/self/uid_map /proc/self/gid_map")
		for _, f := range []string{"uid_map", "gid_map"} {
			r, e := pyErrno(t, sb, pyLibc+fmt.Sprintf(`fd=os.open("/proc/self/%s", os.O_WRONLY); r=libc.write(fd, b"0 0 4294967295\n", 15); print(r, ctypes.get_errno())`, f))
			refused(t, "writing /proc/self/"+f, r, e, syscall.EPERM)
		}
		for _, helper := range []string{"newuidmap", "newgidmap"} {
			if res := sh(t, sb, "test -e /usr/bin/"+helper); res.ExitCode != 0 {
				continue // not installed on this host
			}
			// Host root's set-uid bit: the file's owner is not one of
			// the sandbox's ids, and /usr is nosuid.
			if out := strings.Fields(ok(t, sb, "stat -c '%u %A' /usr/bin/"+helper)); len(out) != 2 || out[0] != "65534" {
				t.Errorf("/usr/bin/%s inside: owner and mode %v, want the overflow uid 65534", helper, out)
			}
			for _, args := range []string{"1 0 0 1", "$$ 0 0 1", "1 0 0 4294967295", "$$ 1 1 65536"} {
				res := sh(t, sb, "/usr/bin/"+helper+" "+args)
				if res.ExitCode == 0 {
					t.Errorf("%s %s succeeded inside: %s%s", helper, args, res.Stdout, res.Stderr)
				}
				res = sh(t, sb, "setpriv --reuid=1000 --regid=1000 --clear-groups /usr/bin/"+helper+" "+args)
				if res.ExitCode == 0 {
					t.Errorf("%s %s succeeded inside as uid 1000: %s%s", helper, args, res.Stdout, res.Stderr)
				}
			}
		}
		if after := ok(t, sb, "cat /proc/self/uid_map /proc/self/gid_map"); after != before {
			t.Errorf("the maps changed from\n%s to\n%s", before, after)
		}
	})
}

// TestAttackUnmappedOwners gives a sandbox a prepared root holding
// files of host ids outside its map: they are nobody's inside, and
// root's capabilities inside reach none of them (read, write, chown,
// chmod), while the files of host ids 0-65535 are the sandbox's ids of
// the same number.
func TestAttackUnmappedOwners(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("files of other host uids in a prepared root need root to make")
	}
	t.Parallel()
	dir := toolRoot(t, "sh", "cat", "stat", "chown", "chmod", "setpriv", "id")
	for _, f := range []struct {
		name     string
		uid, gid int
	}{{"root-file", 0, 0}, {"user-file", 1000, 1000}, {"far-file", 70000, 70000}, {"top-file", 65535, 65535}} {
		p := filepath.Join(dir, f.name)
		if err := os.WriteFile(p, []byte("secret of "+f.name+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, f.uid, f.gid); err != nil {
			t.Fatal(err)
		}
	}
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		processIDsOnly(t, lv)
		sb := box(t, lv, airlock.Config{RootFS: dir})
		for name, want := range map[string]string{"root-file": "0 0", "user-file": "1000 1000", "top-file": "65535 65535", "far-file": "65534 65534"} {
			if got := strings.TrimSpace(ok(t, sb, "stat -c '%u %g' /"+name)); got != want {
				t.Errorf("/%s inside: owner %q, want %q", name, got, want)
			}
		}
		// Root's capabilities work on the sandbox's own files...
		if got := ok(t, sb, "cat /user-file"); got != "secret of user-file\n" {
			t.Errorf("root inside reading uid 1000's file: %q", got)
		}
		// ... and on none of another id's.
		for _, cmd := range []string{"cat /far-file", "chown 0:0 /far-file", "chmod 0644 /far-file", "sh -c 'echo x >> /far-file'"} {
			res := sh(t, sb, cmd)
			if res.ExitCode == 0 || strings.Contains(string(res.Stdout), "secret") {
				t.Errorf("%s by root inside on a file of host uid 70000: exit %d %q %q", cmd, res.ExitCode, res.Stdout, res.Stderr)
			}
		}
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(dir, "far-file"), &st); err != nil || st.Uid != 70000 || st.Mode&0o7777 != 0o600 {
			t.Errorf("the host's file of uid 70000 changed: %+v, %v", st, err)
		}
	})
}

// toolRoot builds a prepared root with the host's programs named (from
// PATH) and the libraries they link, owned by root.
func toolRoot(t *testing.T, tools ...string) string {
	t.Helper()
	root := t.TempDir()
	if err := testbin.ToolRoot(root, tools...); errors.Is(err, testbin.ErrToolMissing) {
		t.Skip(err)
	} else if err != nil {
		t.Fatal(err)
	}
	return root
}
