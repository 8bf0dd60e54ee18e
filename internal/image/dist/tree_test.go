package dist_test

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/image/store"
)

func isRoot() bool { return os.Geteuid() == 0 }

// makeTree fills root with what an image's tree may hold: folders and
// files of many modes (setuid, setgid, sticky), other owners (as root),
// symbolic links absolute, relative and dangling, hard links, a FIFO,
// an empty file, a larger one and, as root, a device node, which an
// archive leaves out.
func makeTree(t *testing.T, root string) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	dirs := map[string]fs.FileMode{
		"bin": 0o755, "etc": 0o755, "tmp": 0o777 | fs.ModeSticky, "root": 0o700,
		"srv/shared": 0o775 | fs.ModeSetgid, "usr/lib/deep/er": 0o755, "home/user": 0o750,
	}
	for d := range dirs {
		must(os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	noise := make([]byte, 256<<10)
	rand.NewChaCha8([32]byte{'a', 'i', 'r'}).Read(noise)
	big := bytes.Repeat([]byte("airlock image content, compressible and long. "), 40000)
	files := []struct {
		name string
		mode fs.FileMode
		data []byte
	}{
		{"etc/os-release", 0o644, []byte("NAME=test\n")},
		{"etc/shadow", 0o640, []byte("root:*:1::::::\n")},
		{"bin/tool", 0o755 | fs.ModeSetuid, []byte("#!/bin/sh\necho tool\n")},
		{"bin/group-tool", 0o755 | fs.ModeSetgid, []byte("g")},
		{"usr/lib/deep/er/big.bin", 0o644, big},
		{"usr/lib/empty", 0o600, nil},
		{"usr/lib/noise.bin", 0o644, noise},
		{"home/user/notes", 0o600, []byte("mine\n")},
	}
	for _, f := range files {
		p := filepath.Join(root, f.name)
		must(os.WriteFile(p, f.data, 0o600))
		must(os.Chmod(p, f.mode))
	}
	must(os.Symlink("/bin/tool", filepath.Join(root, "bin/abs-link")))
	must(os.Symlink("../etc/os-release", filepath.Join(root, "bin/rel-link")))
	must(os.Symlink("nowhere/at/all", filepath.Join(root, "bin/dangling")))
	must(os.Link(filepath.Join(root, "usr/lib/deep/er/big.bin"), filepath.Join(root, "usr/lib/big-hardlink")))
	must(unix.Mkfifo(filepath.Join(root, "srv/shared/pipe"), 0o620))
	if isRoot() {
		must(os.Lchown(filepath.Join(root, "home/user"), 1000, 1000))
		must(os.Lchown(filepath.Join(root, "home/user/notes"), 1000, 1000))
		must(os.Lchown(filepath.Join(root, "etc/shadow"), 0, 42))
		must(os.Lchown(filepath.Join(root, "bin/rel-link"), 7, 7))
		must(os.Lchown(filepath.Join(root, "srv/shared"), 0, 50))
		// chown clears setuid and setgid: set the modes again.
		must(os.Chmod(filepath.Join(root, "srv/shared"), 0o775|fs.ModeSetgid))
		must(unix.Mknod(filepath.Join(root, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	}
	old := time.Date(2024, 3, 1, 12, 0, 0, 0, time.UTC)
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type()&fs.ModeSymlink == 0 {
			os.Chtimes(p, old, old)
		}
		return nil
	})
	for d, m := range dirs {
		must(os.Chmod(filepath.Join(root, d), m))
	}
	must(os.Chmod(root, 0o755))
}

// entry is what a tree holds at one path, as compared.
type entry struct {
	Mode     fs.FileMode
	UID, GID uint32
	Target   string
	Data     string // sha of the content, or the content when short
	MTime    int64  // files and folders: links' and FIFOs' are not kept
	LinkTo   string // the first path with the same inode
}

// snapshot describes every entry under root, leaving out device nodes.
func snapshot(t *testing.T, root string, owners bool) map[string]entry {
	t.Helper()
	out := map[string]entry{}
	inodes := map[uint64]string{}
	var names []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		names = append(names, p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(names)
	for _, p := range names {
		rel, _ := filepath.Rel(root, p)
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode()&(fs.ModeDevice|fs.ModeCharDevice) != 0 {
			continue
		}
		st := fi.Sys().(*syscall.Stat_t)
		e := entry{Mode: fi.Mode()}
		if owners {
			e.UID, e.GID = st.Uid, st.Gid
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			e.Target, _ = os.Readlink(p)
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			e.Data = fmt.Sprintf("%d:%x", len(b), b[:min(len(b), 32)])
			e.MTime = fi.ModTime().Unix()
			if st.Nlink > 1 {
				if first, ok := inodes[st.Ino]; ok {
					e.LinkTo = first
				} else {
					inodes[st.Ino] = rel
				}
			}
		case fi.IsDir():
			e.MTime = fi.ModTime().Unix()
		}
		out[rel] = e
	}
	return out
}

// sameTree fails t unless the trees at a and b hold the same entries.
func sameTree(t *testing.T, a, b string) {
	t.Helper()
	sa, sb := snapshot(t, a, isRoot()), snapshot(t, b, isRoot())
	for p, ea := range sa {
		eb, ok := sb[p]
		if !ok {
			t.Errorf("%s is missing from the downloaded tree", p)
			continue
		}
		if ea != eb {
			t.Errorf("%s differs:\n  published  %+v\n  downloaded %+v", p, ea, eb)
		}
	}
	for p := range sb {
		if _, ok := sa[p]; !ok {
			t.Errorf("%s is in the downloaded tree only", p)
		}
	}
	if len(sa) < 15 {
		t.Fatalf("the tree has %d entries: the test compared too little", len(sa))
	}
}

// makeImage makes an image of a tree that fill builds, named name, as
// a build of a variant would.
func makeImage(t *testing.T, c *store.Cache, name string, cfg store.Config, fill func(t *testing.T, root string)) store.Image {
	t.Helper()
	img, err := c.Make(context.Background(), store.Key([]byte("test image "+name+t.Name())), func(ctx context.Context, dir string) (store.Meta, error) {
		root := filepath.Join(dir, "rootfs")
		if err := os.Mkdir(root, 0o755); err != nil {
			return store.Meta{}, err
		}
		fill(t, root)
		return store.Meta{Kind: "variant", Source: "test", Arch: runtime.GOARCH, Config: cfg}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Tag(name, img.Key); err != nil {
		t.Fatal(err)
	}
	return img
}
