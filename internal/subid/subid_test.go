package subid

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func files(t *testing.T, subuid, subgid string) (string, string) {
	t.Helper()
	dir := t.TempDir()
	u, g := filepath.Join(dir, "subuid"), filepath.Join(dir, "subgid")
	for p, s := range map[string]string{u: subuid, g: subgid} {
		if s == "-" {
			continue // missing
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return u, g
}

func found(name string) (string, error) { return "/usr/bin/" + name, nil }

func TestLookup(t *testing.T) {
	for _, c := range []struct {
		name           string
		subuid, subgid string
		find           func(string) (string, error)
		want           IDs    // when no error
		why, fix       string // parts of the *Missing
	}{
		{name: "by name", subuid: "other:165536:65536\nalice:100000:65536\n", subgid: "alice:200000:70000\n", find: found,
			want: IDs{User: "alice", UID: Range{100000, 65536}, GID: Range{200000, 65536}, UIDHelper: "/usr/bin/newuidmap", GIDHelper: "/usr/bin/newgidmap"}},
		{name: "by number, comments and junk skipped", subuid: "# x\n1000:300000:10\nbad line\nalice:x:1\n", subgid: "1000:400000:65536\n", find: found,
			want: IDs{User: "alice", UID: Range{300000, 10}, GID: Range{400000, 65536}, UIDHelper: "/usr/bin/newuidmap", GIDHelper: "/usr/bin/newgidmap"}},
		{name: "no range", subuid: "other:100000:65536\n", subgid: "alice:100000:65536\n", find: found,
			why: "grants user alice no subordinate ids", fix: "usermod --add-subuids 165536-231071 --add-subgids 165536-231071 alice"},
		{name: "empty range", subuid: "alice:100000:0\n", subgid: "alice:100000:65536\n", find: found,
			why: "grants user alice no subordinate ids", fix: "usermod --add-subuids 165536-231071"},
		{name: "no files", subuid: "-", subgid: "-", find: found,
			why: "does not exist", fix: "usermod --add-subuids 100000-165535 --add-subgids 100000-165535 alice"},
		{name: "no helpers", subuid: "alice:100000:65536\n", subgid: "alice:100000:65536\n",
			find: func(n string) (string, error) { return "", errors.New(n + " is not installed") },
			why:  "newuidmap is not installed; newgidmap is not installed", fix: "apt-get install uidmap"},
	} {
		t.Run(c.name, func(t *testing.T) {
			u, g := files(t, c.subuid, c.subgid)
			got, err := LookupWith(1000, "alice", u, g, c.find)
			if c.why == "" {
				if err != nil || got != c.want {
					t.Errorf("got %+v, %v; want %+v", got, err, c.want)
				}
				return
			}
			var m *Missing
			if !errors.As(err, &m) || !strings.Contains(m.Why, c.why) || !strings.Contains(m.Fix, c.fix) {
				t.Errorf("got %+v, %v; want a Missing saying %q, fixed by %q", got, err, c.why, c.fix)
			}
		})
	}
}

func TestHelperUsable(t *testing.T) {
	p := filepath.Join(t.TempDir(), "newuidmap")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := HelperUsable(p); err == nil || !strings.Contains(err.Error(), "neither set-uid root") {
		t.Errorf("a plain executable: %v, want refused", err)
	}
	if os.Geteuid() != 0 {
		return
	}
	if err := os.Chmod(p, os.ModeSetuid|0o755); err != nil {
		t.Fatal(err)
	}
	if err := HelperUsable(p); err != nil {
		t.Errorf("a set-uid root executable: %v", err)
	}
}
