package vfs_test

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/vfs"
)

// populate makes the tree that lower layers and the reference start with.
func populate(t testing.TB, p vfs.Provider) {
	t.Helper()
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	write := func(path string, off int64, data string, mode fs.FileMode) {
		h, err := p.Open(ctx, path, os.O_RDWR|os.O_CREATE, mode)
		must(err)
		_, err = h.WriteAt(ctx, []byte(data), off)
		must(err)
		must(h.Close())
	}
	must(p.Mkdir(ctx, "/a", 0o755))
	must(p.Mkdir(ctx, "/a/c", 0o700))
	write("/a/b", 0, "lower-ab", 0o644)
	write("/a/c/a", 0, "deep", 0o600)
	write("/b", 0, "lower-b", 0o640)
	write("/s", 1<<20, "x", 0o644)
	must(p.Symlink(ctx, "a", "/c"))
}

// snapshot describes a tree: every path with its type, permissions and
// content or target.
func snapshot(t testing.TB, p vfs.Provider) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := make(map[string]string)
	var walk func(dir string)
	walk = func(dir string) {
		list, err := p.Readdir(ctx, dir)
		if err != nil {
			t.Fatalf("readdir %s: %v", dir, err)
		}
		for _, fi := range list {
			path := strings.TrimSuffix(dir, "/") + "/" + fi.Name
			desc := fmt.Sprintf("%v", fi.Mode)
			switch {
			case fi.IsDir():
				walk(path)
			case fi.Mode&fs.ModeSymlink != 0:
				target, err := p.Readlink(ctx, path)
				if err != nil {
					t.Fatalf("readlink %s: %v", path, err)
				}
				desc += " -> " + target
			case fi.Mode.Type() == fs.ModeNamedPipe, fi.Mode.Type() == fs.ModeSocket:
				// No data, and not to be opened.
			default:
				desc += " " + readAll(t, p, path)
			}
			out[path] = desc
		}
	}
	walk("/")
	return out
}

func readAll(t testing.TB, p vfs.Provider, path string) string {
	ctx := context.Background()
	h, err := p.Open(ctx, path, os.O_RDONLY, 0)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer h.Close()
	var sb strings.Builder
	buf := make([]byte, 64<<10)
	for off := int64(0); ; {
		n, err := h.ReadAt(ctx, buf, off)
		sb.Write(buf[:n])
		off += int64(n)
		if err == io.EOF || (err == nil && n == 0) {
			break
		}
		if err != nil {
			t.Fatalf("read %s: %v", path, err)
		}
	}
	s := sb.String()
	if len(s) > 64 {
		return fmt.Sprintf("%d bytes %x", len(s), s[len(s)-16:])
	}
	return fmt.Sprintf("%q", s)
}

var modelPaths = []string{"/", "/a", "/b", "/c", "/s", "/a/b", "/a/c", "/a/c/a", "/d", "/d/e", "/a/x", "/c/x", "/b/x", "/a/c/y", "/p"}

// applyOp runs one operation chosen by the bytes of op and describes its
// outcome, for comparing providers.
func applyOp(p vfs.Provider, op [4]byte) string {
	ctx := context.Background()
	p1 := modelPaths[int(op[1])%len(modelPaths)]
	p2 := modelPaths[int(op[2])%len(modelPaths)]
	arg := int64(op[3])
	res := func(err error) string { return vfs.Errno(err).Error() }
	writeAt := func(flags int, off int64) string {
		h, err := p.Open(ctx, p1, flags, 0o644)
		if err != nil {
			return res(err)
		}
		defer h.Close()
		n, err := h.WriteAt(ctx, []byte(strings.Repeat(string(rune('a'+arg%26)), int(arg%7)+1)), off)
		return fmt.Sprintf("%d %s", n, res(err))
	}
	switch op[0] % 16 {
	case 0:
		return writeAt(os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0)
	case 1:
		return writeAt(os.O_WRONLY, arg*397)
	case 2:
		return writeAt(os.O_WRONLY|os.O_APPEND, 0)
	case 3:
		return res(p.Truncate(ctx, p1, arg*101))
	case 4:
		return res(p.Mkdir(ctx, p1, 0o750))
	case 5:
		return res(p.Remove(ctx, p1))
	case 6:
		return res(p.Rename(ctx, p1, p2))
	case 7:
		return res(p.Symlink(ctx, p2, p1))
	case 8:
		return res(p.Link(ctx, p1, p2))
	case 9:
		return res(p.Chmod(ctx, p1, fs.FileMode(arg)|0o600))
	case 10:
		list, err := p.Readdir(ctx, p1)
		var names []string
		for _, fi := range list {
			names = append(names, fi.Name+":"+fi.Mode.Type().String())
		}
		return fmt.Sprint(names, res(err))
	case 11:
		fi, err := p.Stat(ctx, p1)
		if err != nil {
			return res(err)
		}
		if fi.IsDir() {
			return fi.Mode.String()
		}
		return fmt.Sprint(fi.Mode, fi.Size)
	case 12:
		return writeAt(os.O_WRONLY|os.O_CREATE|os.O_EXCL, arg)
	case 13:
		h, err := p.Open(ctx, p1, os.O_RDONLY, 0)
		if err != nil {
			return res(err)
		}
		defer h.Close()
		buf := make([]byte, 16)
		n, err := h.ReadAt(ctx, buf, arg%10)
		if err == io.EOF {
			err = nil
		}
		return fmt.Sprintf("%q %s", buf[:n], res(err))
	case 15:
		mode := fs.ModeNamedPipe
		if arg%2 == 1 {
			mode = fs.ModeSocket
		}
		return res(p.Mknod(ctx, p1, mode|fs.FileMode(arg)&0o777|0o600))
	default:
		s, err := p.Readlink(ctx, p1)
		return s + " " + res(err)
	}
}

type modelCase struct {
	name  string
	p     vfs.Provider
	lower vfs.Provider // checked unchanged, if not nil
	mem   *vfs.Memory  // checked within quota, if not nil
}

// populateModel makes populate's tree and a FIFO, /p.
func populateModel(t testing.TB, p vfs.Provider) {
	t.Helper()
	populate(t, p)
	if err := p.Mknod(context.Background(), "/p", fs.ModeNamedPipe|0o640); err != nil {
		t.Fatal(err)
	}
}

// modelProviders returns the reference and the providers compared with
// it, all starting with populateModel's tree.
func modelProviders(t testing.TB) (ref vfs.Provider, cases []modelCase) {
	t.Helper()
	ref = vfs.NewMemory(vfs.MemoryOptions{})
	populateModel(t, ref)
	real := newRealFSIn(t, t.TempDir())
	populateModel(t, real)
	memLower := vfs.NewMemory(vfs.MemoryOptions{})
	populateModel(t, memLower)
	realLower := newRealFSIn(t, t.TempDir())
	populateModel(t, realLower)
	memUpper := vfs.NewMemory(vfs.MemoryOptions{MaxBytes: 1 << 30})
	return ref, []modelCase{
		{name: "realfs", p: real},
		{name: "overlay-memory", p: vfs.NewOverlay(memUpper, memLower), lower: memLower, mem: memUpper},
		{name: "overlay-realfs", p: vfs.NewOverlay(vfs.NewMemory(vfs.MemoryOptions{}), realLower), lower: realLower},
	}
}

// runModel applies ops to every provider and checks that they agree with
// the reference, and that lowers stay as they were.
func runModel(t testing.TB, ops []byte) {
	ref, cases := modelProviders(t)
	var lowerSnaps []map[string]string
	for _, c := range cases {
		if c.lower != nil {
			lowerSnaps = append(lowerSnaps, snapshot(t, c.lower))
		} else {
			lowerSnaps = append(lowerSnaps, nil)
		}
	}
	var log []string
	for i := 0; i+4 <= len(ops) && i < 4*maxOps; i += 4 {
		op := [4]byte(ops[i : i+4])
		want := applyOp(ref, op)
		log = append(log, fmt.Sprintf("%v: %s", op, want))
		for _, c := range cases {
			if got := applyOp(c.p, op); got != want {
				t.Fatalf("%s: op %d %v: got %q, reference %q\n%s", c.name, i/4, op, got, want, strings.Join(log, "\n"))
			}
		}
	}
	want := snapshot(t, ref)
	for i, c := range cases {
		if got := snapshot(t, c.p); !mapsEqual(got, want) {
			t.Fatalf("%s: tree differs\n got %v\nwant %v\n%s", c.name, sorted(got), sorted(want), strings.Join(log, "\n"))
		}
		if c.lower != nil {
			if got := snapshot(t, c.lower); !mapsEqual(got, lowerSnaps[i]) {
				t.Fatalf("%s: lower changed\n%v\nwas %v", c.name, sorted(got), sorted(lowerSnaps[i]))
			}
		}
		if c.mem != nil {
			used, inodes := c.mem.Usage()
			st, _ := c.mem.Statfs(context.Background(), "/")
			if used < 0 || inodes < 1 || uint64(used) > st.TotalBytes || uint64(inodes) > st.TotalFiles {
				t.Fatalf("%s: usage %d bytes %d inodes out of bounds", c.name, used, inodes)
			}
		}
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}

func sorted(m map[string]string) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

func TestProvidersAgree(t *testing.T) {
	n := 200
	if testing.Short() {
		n = 20
	}
	for seed := range uint64(n) {
		r := rand.New(rand.NewPCG(seed, 1))
		ops := make([]byte, 4*60)
		for i := range ops {
			ops[i] = byte(r.Uint32())
		}
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runModel(t, ops) })
		if t.Failed() {
			return
		}
	}
}

func FuzzProviders(f *testing.F) {
	f.Add([]byte{0, 1, 0, 5, 6, 1, 3, 0, 11, 3, 0, 0})
	f.Add([]byte{4, 7, 0, 0, 0, 8, 0, 9, 6, 7, 1, 0, 10, 1, 0, 0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		runModel(t, ops)
	})
}

// maxOps bounds the operations of one run of the model.
const maxOps = 64

// newRealFSIn serves dir, closed when the test ends.
func newRealFSIn(t testing.TB, dir string) vfs.Provider {
	t.Helper()
	p, err := vfs.NewRealFS(dir)
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := p.(io.Closer); ok {
		t.Cleanup(func() { c.Close() })
	}
	return p
}
