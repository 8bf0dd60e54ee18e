package vfs_test

import (
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-sandbox/airlock/vfs"
)

func TestCleanPath(t *testing.T) {
	long := strings.Repeat("a", 255)
	for _, tc := range []struct {
		in   string
		want syscall.Errno
	}{
		{"/", 0},
		{"/a", 0},
		{"/a/b.c/..d", 0},
		{"/" + long, 0},
		{"/" + long + "a", syscall.ENAMETOOLONG},
		{strings.Repeat("/"+long, 17), 0}, // beyond PATH_MAX: deep below a mount
		{strings.Repeat("/"+long, 64), 0},
		{strings.Repeat("/"+long, 64) + "/a", syscall.ENAMETOOLONG},
		{strings.Repeat("/a", 2048), 0},
		{strings.Repeat("/a", 2049), syscall.ENAMETOOLONG},
		{"", syscall.EINVAL},
		{"a", syscall.EINVAL},
		{"a/b", syscall.EINVAL},
		{"/a/", syscall.EINVAL},
		{"//a", syscall.EINVAL},
		{"/a//b", syscall.EINVAL},
		{"/.", syscall.EINVAL},
		{"/a/./b", syscall.EINVAL},
		{"/a/..", syscall.EINVAL},
		{"/../etc", syscall.EINVAL},
		{"/a\x00b", syscall.EINVAL},
	} {
		got, err := vfs.CleanPath(tc.in)
		if vfs.Errno(err) != tc.want {
			t.Errorf("CleanPath(%q): %v, want %v", tc.in, err, tc.want)
		}
		if err == nil && got != tc.in {
			t.Errorf("CleanPath(%q) = %q", tc.in, got)
		}
	}
}

func FuzzCleanPath(f *testing.F) {
	for _, s := range []string{"/", "/a/b", "/a/../b", "//", "/a/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := vfs.CleanPath(s)
		if err != nil {
			return
		}
		if len(p) > vfs.MaxPath || p[0] != '/' || strings.Contains(p, "\x00") || (p != "/" && strings.HasSuffix(p, "/")) {
			t.Fatalf("accepted %q", p)
		}
		if p != "/" && strings.Count(p, "/") > vfs.MaxDepth {
			t.Fatalf("accepted %d names", strings.Count(p, "/"))
		}
		for _, c := range strings.Split(p[1:], "/") {
			if p != "/" && (c == "" || c == "." || c == ".." || len(c) > vfs.MaxName) {
				t.Fatalf("accepted %q", p)
			}
		}
	})
}
