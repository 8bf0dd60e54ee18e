package agent

import (
	"slices"
	"strings"
	"testing"
)

const testPasswd = `root:x:0:0:root:/root:/bin/bash
# a comment
daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin
bob:x:1000:1000:Bob,,,:/home/bob:/bin/bash
broken:x:notanumber:1::/:/bin/sh
huge:x:4294967295:0::/:/bin/sh
`

const testGroup = `root:x:0:
adm:x:4:bob,alice
bob:x:1000:
docker:x:999:alice,bob
`

func TestResolveUser(t *testing.T) {
	for _, tc := range []struct {
		spec string
		want Cred
		err  string
	}{
		{spec: "bob", want: Cred{UID: 1000, GID: 1000, Groups: []uint32{1000, 4, 999}, Name: "bob", Home: "/home/bob"}},
		{spec: "1000", want: Cred{UID: 1000, GID: 1000, Groups: []uint32{1000, 4, 999}, Name: "bob", Home: "/home/bob"}},
		{spec: "bob:docker", want: Cred{UID: 1000, GID: 999, Groups: []uint32{999, 4}, Name: "bob", Home: "/home/bob"}},
		{spec: "1000:5", want: Cred{UID: 1000, GID: 5, Groups: []uint32{5, 4, 999}, Name: "bob", Home: "/home/bob"}},
		{spec: "4242", want: Cred{UID: 4242, GID: 0, Groups: []uint32{0}, Home: "/"}},
		{spec: "4242:4243", want: Cred{UID: 4242, GID: 4243, Groups: []uint32{4243}, Home: "/"}},
		{spec: "root", want: Cred{UID: 0, GID: 0, Groups: []uint32{0}, Name: "root", Home: "/root"}},
		{spec: "alice", err: "not in the sandbox's /etc/passwd"},
		{spec: "bob:nogroup", err: "not in the sandbox's /etc/group"},
		{spec: "broken", err: "not in the sandbox's /etc/passwd"},
		{spec: "huge", err: "not in the sandbox's /etc/passwd"},
		{spec: "70000", err: "not in the sandbox's /etc/passwd"},
		{spec: ":1", err: "give USER"},
		{spec: "bob:", err: "give USER"},
	} {
		got, err := resolveUser(tc.spec, strings.NewReader(testPasswd), strings.NewReader(testGroup))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: %v, want an error with %q", tc.spec, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.spec, err)
			continue
		}
		if got.UID != tc.want.UID || got.GID != tc.want.GID || got.Name != tc.want.Name || got.Home != tc.want.Home || !slices.Equal(got.Groups, tc.want.Groups) {
			t.Errorf("%q: %+v, want %+v", tc.spec, got, tc.want)
		}
	}
	// No account files at all: numbers still work.
	if c, err := resolveUser("7:8", nil, nil); err != nil || c.UID != 7 || c.GID != 8 {
		t.Errorf("7:8 without account files: %+v %v", c, err)
	}
}

func FuzzResolveUser(f *testing.F) {
	f.Add("bob:docker", testPasswd, testGroup)
	f.Add("1000", "a:b:c", "::::")
	f.Fuzz(func(t *testing.T, spec, passwd, group string) {
		c, err := resolveUser(spec, strings.NewReader(passwd), strings.NewReader(group))
		if err != nil {
			return
		}
		if c.UID > maxID || c.GID > maxID || len(c.Groups) == 0 || len(c.Groups) > maxGroupsOfUser || c.Groups[0] != c.GID {
			t.Fatalf("%q: %+v", spec, c)
		}
		for _, g := range c.Groups {
			if g > maxID {
				t.Fatalf("%q: group %d out of range", spec, g)
			}
		}
	})
}
