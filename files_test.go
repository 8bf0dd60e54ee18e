package airlock_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
)

func TestFilesRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	sb := newSandbox(t, airlock.Config{})

	cases := map[string][]byte{
		"/workspace/empty":                        {},
		"/workspace/text.txt":                     []byte("hello\nworld\n"),
		"/workspace/binary.bin":                   binaryData(),
		"/tmp/deep/er/nested/file":                []byte("created parents"),
		"/workspace/name with spaces and ünïcode": []byte("odd name"),
	}
	for p, data := range cases {
		if err := sb.WriteFile(ctx, p, data, 0o644); err != nil {
			t.Fatalf("WriteFile %s: %v", p, err)
		}
		got, err := sb.ReadFile(ctx, p)
		if err != nil {
			t.Fatalf("ReadFile %s: %v", p, err)
		}
		if !bytes.Equal(got, data) {
			t.Errorf("%s: read back %d bytes, wrote %d (differ)", p, len(got), len(data))
		}
	}

	// 10 MiB of random data, checked by the sandbox itself too.
	big := make([]byte, 10<<20)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range big {
		big[i] = byte(r.Uint32())
	}
	if err := sb.WriteFile(ctx, "/workspace/big", big, 0o600); err != nil {
		t.Fatal(err)
	}
	sum := fmt.Sprintf("%x", sha256.Sum256(big))
	if out := mustRun(t, ctx, sb, "sha256sum /workspace/big"); !strings.HasPrefix(out, sum) {
		t.Errorf("sha256 inside = %q, want %s", out, sum)
	}
	got, err := sb.ReadFile(ctx, "/workspace/big")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, big) {
		t.Errorf("10 MiB round trip differs (got %d bytes)", len(got))
	}
	var buf bytes.Buffer
	info, err := sb.ReadFileTo(ctx, "/workspace/big", &buf, 0)
	if err != nil {
		t.Fatal(err)
	}
	if info.Size != int64(len(big)) || !bytes.Equal(buf.Bytes(), big) {
		t.Errorf("ReadFileTo: info size %d, %d bytes", info.Size, buf.Len())
	}
	// A limit below the size is refused.
	if _, err := sb.ReadFileTo(ctx, "/workspace/big", &bytes.Buffer{}, 1<<20); err == nil {
		t.Error("ReadFileTo with a 1 MiB limit read a 10 MiB file")
	}

	// Overwrite replaces the whole content.
	if err := sb.WriteFile(ctx, "/workspace/text.txt", []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, _ := sb.ReadFile(ctx, "/workspace/text.txt"); string(got) != "x" {
		t.Errorf("after overwrite: %q", got)
	}
	// No temporary files are left behind.
	if out := mustRun(t, ctx, sb, "ls -A /workspace"); strings.Contains(out, ".airlock-write") {
		t.Errorf("temporary upload files remain:\n%s", out)
	}
}

func binaryData() []byte {
	b := make([]byte, 0, 512)
	for i := range 256 {
		b = append(b, byte(i))
	}
	for i := range 256 {
		b = append(b, byte(255-i))
	}
	return b
}

func TestFilesModes(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	sb := newSandbox(t, airlock.Config{})
	for _, mode := range []fs.FileMode{0o755, 0o600, 0o640, 0o444} {
		p := fmt.Sprintf("/workspace/mode-%o", mode)
		if err := sb.WriteFile(ctx, p, []byte("#!/bin/sh\necho ran\n"), mode); err != nil {
			t.Fatal(err)
		}
		fi, err := sb.Stat(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode.Perm() != mode {
			t.Errorf("%s: Stat mode %o, want %o", p, fi.Mode.Perm(), mode)
		}
		if out := mustRun(t, ctx, sb, "stat -c %a "+p); strings.TrimSpace(out) != fmt.Sprintf("%o", mode) {
			t.Errorf("%s: stat(1) says %q, want %o", p, out, mode)
		}
	}
	// An executable written through the API runs.
	if out := mustRun(t, ctx, sb, "/workspace/mode-755"); out != "ran\n" {
		t.Errorf("uploaded script printed %q", out)
	}
	// Mode 0 means the default, a regular readable file.
	if err := sb.WriteFile(ctx, "/workspace/default-mode", []byte("d"), 0); err != nil {
		t.Fatal(err)
	}
	if fi, err := sb.Stat(ctx, "/workspace/default-mode"); err != nil || fi.Mode.Perm() != 0o644 {
		t.Errorf("default mode: %v %v", fi.Mode, err)
	}
	if err := sb.Mkdir(ctx, "/workspace/private", 0o700, false); err != nil {
		t.Fatal(err)
	}
	if fi, err := sb.Stat(ctx, "/workspace/private"); err != nil || !fi.IsDir || fi.Mode.Perm() != 0o700 {
		t.Errorf("Mkdir 0700: %v %v", fi, err)
	}
}

func TestFilesListAndStat(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	sb := newSandbox(t, airlock.Config{})
	mustRun(t, ctx, sb, "mkdir -p /workspace/d/sub && printf 12345 > /workspace/d/five && ln -s five /workspace/d/link && ln -s /nowhere /workspace/d/dangling")

	ents, err := sb.ListFiles(ctx, "/workspace/d")
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]airlock.FileInfo{}
	var names []string
	for _, e := range ents {
		byName[e.Name] = e
		names = append(names, e.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"dangling", "five", "link", "sub"}) {
		t.Fatalf("ListFiles = %q", names)
	}
	if f := byName["five"]; f.Size != 5 || f.IsDir || f.Link != "" || !f.Mode.IsRegular() {
		t.Errorf("five: %+v", f)
	}
	if f := byName["sub"]; !f.IsDir || !f.Mode.IsDir() {
		t.Errorf("sub: %+v", f)
	}
	if f := byName["link"]; f.Link != "five" || f.Mode&fs.ModeSymlink == 0 {
		t.Errorf("link: %+v", f)
	}
	if f := byName["dangling"]; f.Link != "/nowhere" {
		t.Errorf("dangling: %+v", f)
	}
	if f := byName["five"]; time.Since(f.ModTime) > time.Hour || time.Since(f.ModTime) < -time.Hour {
		t.Errorf("five: mod time %v", f.ModTime)
	}

	st, err := sb.Stat(ctx, "/workspace/d/five")
	if err != nil {
		t.Fatal(err)
	}
	if st.Size != 5 || st.IsDir {
		t.Errorf("Stat five: %+v", st)
	}
	st, err = sb.Stat(ctx, "/workspace/d/link")
	if err != nil {
		t.Fatal(err)
	}
	if st.Link != "five" || st.Mode&fs.ModeSymlink == 0 {
		t.Errorf("Stat link (not followed): %+v", st)
	}
	st, err = sb.Stat(ctx, "/workspace/d")
	if err != nil {
		t.Fatal(err)
	}
	if !st.IsDir {
		t.Errorf("Stat dir: %+v", st)
	}
	// An empty directory lists as empty, not as an error.
	if ents, err := sb.ListFiles(ctx, "/workspace/d/sub"); err != nil || len(ents) != 0 {
		t.Errorf("empty dir: %v %v", ents, err)
	}
	// Many entries.
	mustRun(t, ctx, sb, "mkdir /workspace/many && cd /workspace/many && for i in $(seq 1 1500); do : > f$i; done")
	if ents, err := sb.ListFiles(ctx, "/workspace/many"); err != nil || len(ents) != 1500 {
		t.Errorf("1500 entries: got %d, %v", len(ents), err)
	}
	if _, err := sb.ListFiles(ctx, "/workspace/d/five"); err == nil {
		t.Error("ListFiles of a regular file succeeded")
	}
}

func TestFilesMkdirRemove(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	sb := newSandbox(t, airlock.Config{})

	if err := sb.Mkdir(ctx, "/workspace/a/b/c", 0o755, false); err == nil {
		t.Error("Mkdir without parents created a nested directory")
	}
	if err := sb.Mkdir(ctx, "/workspace/a/b/c", 0o755, true); err != nil {
		t.Fatal(err)
	}
	if err := sb.Mkdir(ctx, "/workspace/a/b/c", 0o755, true); err != nil {
		t.Errorf("Mkdir with parents of an existing directory: %v", err)
	}
	if err := sb.Mkdir(ctx, "/workspace/a/b/c", 0o755, false); !errors.Is(err, fs.ErrExist) {
		t.Errorf("Mkdir of an existing directory: %v, want fs.ErrExist", err)
	}
	mustRun(t, ctx, sb, "test -d /workspace/a/b/c && touch /workspace/a/b/c/f /workspace/a/g")

	if err := sb.Remove(ctx, "/workspace/a", false); err == nil {
		t.Error("non-recursive Remove of a non-empty directory succeeded")
	}
	if err := sb.Remove(ctx, "/workspace/a/g", false); err != nil {
		t.Errorf("Remove file: %v", err)
	}
	if err := sb.Remove(ctx, "/workspace/a", true); err != nil {
		t.Fatal(err)
	}
	if res := run(t, ctx, sb, "test -e /workspace/a"); res.ExitCode == 0 {
		t.Error("/workspace/a exists after a recursive Remove")
	}
	if err := sb.Remove(ctx, "/workspace/a", true); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Remove of a missing path: %v, want fs.ErrNotExist", err)
	}
	if err := sb.Remove(ctx, "/", true); err == nil {
		t.Error("Remove / succeeded")
	}
	mustRun(t, ctx, sb, "test -d /workspace && test -x /bin/sh")
	// Removing a symlink removes the link, not its target.
	mustRun(t, ctx, sb, "mkdir /workspace/keep && touch /workspace/keep/x && ln -s /workspace/keep /workspace/l")
	if err := sb.Remove(ctx, "/workspace/l", true); err != nil {
		t.Fatal(err)
	}
	mustRun(t, ctx, sb, "test -f /workspace/keep/x && ! test -e /workspace/l")
	// Read-only places stay read-only through the API too.
	if err := sb.Remove(ctx, "/usr/bin/env", false); err == nil {
		t.Error("Remove /usr/bin/env succeeded")
	}
	if err := sb.WriteFile(ctx, "/usr/airlock-x", []byte("x"), 0o644); err == nil {
		t.Error("WriteFile into /usr succeeded")
	}
}

func TestFilesErrors(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	sb := newSandbox(t, airlock.Config{})

	if _, err := sb.ReadFile(ctx, "/workspace/missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadFile of a missing file: %v, want fs.ErrNotExist", err)
	}
	_, err := sb.Stat(ctx, "/workspace/missing")
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Stat of a missing file: %v, want fs.ErrNotExist", err)
	} else if strings.Count(err.Error(), "/workspace/missing") != 1 {
		t.Errorf("Stat of a missing file: %q names the path more than once", err)
	}
	if _, err := sb.ListFiles(ctx, "/workspace/missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ListFiles of a missing dir: %v, want fs.ErrNotExist", err)
	}
	if _, err := sb.ReadFile(ctx, "/workspace"); err == nil {
		t.Error("ReadFile of a directory succeeded")
	}
	for _, p := range []string{"relative/path", "workspace/x", "", "./x"} {
		if err := sb.WriteFile(ctx, p, []byte("x"), 0o644); err == nil {
			t.Errorf("WriteFile(%q) succeeded, want an error for a relative path", p)
		}
		if _, err := sb.ReadFile(ctx, p); err == nil {
			t.Errorf("ReadFile(%q) succeeded", p)
		}
		if _, err := sb.Stat(ctx, p); err == nil {
			t.Errorf("Stat(%q) succeeded", p)
		}
		if err := sb.Mkdir(ctx, p, 0o755, true); err == nil {
			t.Errorf("Mkdir(%q) succeeded", p)
		}
		if err := sb.Remove(ctx, p, true); err == nil {
			t.Errorf("Remove(%q) succeeded", p)
		}
	}
	// The sandbox keeps working after errors.
	mustRun(t, ctx, sb, "true")
}

func TestFilesSharedWithCommands(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	sb := newSandbox(t, airlock.Config{})
	if err := sb.WriteFile(ctx, "/workspace/in.txt", []byte("from api\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := mustRun(t, ctx, sb, "cat /workspace/in.txt"); out != "from api\n" {
		t.Errorf("command reads %q", out)
	}
	mustRun(t, ctx, sb, "echo from command > /tmp/out.txt; printf '\\000\\001\\377' > /tmp/bin")
	if got, err := sb.ReadFile(ctx, "/tmp/out.txt"); err != nil || string(got) != "from command\n" {
		t.Errorf("API reads %q, %v", got, err)
	}
	if got, err := sb.ReadFile(ctx, "/tmp/bin"); err != nil || !bytes.Equal(got, []byte{0, 1, 255}) {
		t.Errorf("API reads binary %v, %v", got, err)
	}
	// A python program uploaded and run.
	if err := sb.WriteFile(ctx, "/workspace/prog.py", []byte("import sys\nprint(sum(int(a) for a in sys.argv[1:]))\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := sb.Run(ctx, airlock.Command{Argv: []string{"python3", "prog.py", "1", "2", "39"}})
	if err != nil || string(res.Stdout) != "42\n" {
		t.Errorf("uploaded program: %v %q %q", err, res.Stdout, res.Stderr)
	}
	// The API can read the sandbox's generated /etc but nothing of the host.
	if got, err := sb.ReadFile(ctx, "/etc/hostname"); err != nil || strings.TrimSpace(string(got)) != sb.ID() {
		t.Errorf("/etc/hostname via API: %q %v", got, err)
	}
	if _, err := sb.ReadFile(ctx, "/etc/shadow"); err == nil {
		t.Error("ReadFile /etc/shadow succeeded")
	}
	if ents, err := sb.ListFiles(ctx, "/root"); err != nil || len(ents) != 0 {
		t.Errorf("ListFiles /root: %d entries, %v", len(ents), err)
	}
}

// TestFilesWriteFullDisk checks that an upload that does not fit fails
// promptly with the agent's error, instead of stalling the stream.
func TestFilesWriteFullDisk(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	sb := newSandbox(t, airlock.Config{DiskMB: 16})
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	start := time.Now()
	err := sb.WriteFile(wctx, "/workspace/big", make([]byte, 32<<20), 0o644)
	if err == nil {
		t.Fatal("WriteFile of 32 MiB into a 16 MiB disk succeeded")
	}
	if wctx.Err() != nil {
		t.Errorf("WriteFile into a full disk returned only when its context ended (%v): %v", time.Since(start).Round(time.Second), err)
	}
	if !errors.Is(err, syscall.ENOSPC) && !strings.Contains(err.Error(), "no space left") {
		t.Errorf("WriteFile into a full disk: %v, want ENOSPC", err)
	}
	// Nothing half-written is left, and the sandbox still works.
	if out := mustRun(t, ctx, sb, "ls -A /workspace; df -k / | tail -1"); strings.Contains(out, "big") || strings.Contains(out, ".airlock-write") {
		t.Errorf("a partial upload remains:\n%s", out)
	}
	if err := sb.WriteFile(ctx, "/workspace/small", []byte("fits"), 0o644); err != nil {
		t.Errorf("a small WriteFile after the failed one: %v", err)
	}
}

// TestFilesSpecialFiles checks that reading what is not a regular file
// neither hangs the caller past its context nor breaks the sandbox.
func TestFilesSpecialFiles(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	sb := newSandbox(t, airlock.Config{})
	// An endless file is cut at the limit.
	var n countWriter
	if _, err := sb.ReadFileTo(ctx, "/dev/zero", &n, 1<<20); err == nil {
		t.Error("ReadFileTo /dev/zero with a 1 MiB limit succeeded")
	}
	if n.n > 1<<20 {
		t.Errorf("ReadFileTo /dev/zero wrote %d bytes past a 1 MiB limit", n.n)
	}
	if got := mustRun(t, ctx, sb, "echo ok"); got != "ok\n" {
		t.Errorf("afterwards: %q", got)
	}

	// A FIFO nobody writes to: the read can only end by its context.
	mustRun(t, ctx, sb, "mkfifo /tmp/fifo")
	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	type result struct{ err error }
	done := make(chan result, 1)
	go func() {
		_, err := sb.ReadFile(rctx, "/tmp/fifo")
		done <- result{err}
	}()
	select {
	case r := <-done:
		if r.err == nil {
			t.Error("ReadFile of a FIFO without a writer succeeded")
		}
	case <-time.After(15 * time.Second):
		t.Error("ReadFile of a FIFO ignored its 3 s context: still blocked after 15 s")
		// Closing the sandbox must release it.
		sb.Close()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Fatal("ReadFile still blocked after Close")
		}
		return
	}
	if got := mustRun(t, ctx, sb, "echo ok"); got != "ok\n" {
		t.Errorf("after the FIFO read: %q", got)
	}
	if err := sb.WriteFile(ctx, "/tmp/after", []byte("x"), 0o644); err != nil {
		t.Errorf("WriteFile after the FIFO read: %v", err)
	}
}

// TestFilesOffsetLength: ReadFileAt reads parts of a file from an offset,
// WriteFileAt writes into one in place (holes past the end, truncation
// only when asked), and a final symlink is refused by a write in place.
func TestFilesOffsetLength(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	sb := newSandbox(t, airlock.Config{})
	data := binaryData()
	if err := sb.WriteFile(ctx, "/workspace/f", data, 0o640); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ off, length int64 }{
		{0, 0}, {0, 10}, {5, 100}, {int64(len(data)) - 3, 10}, {int64(len(data)), 5}, {int64(len(data)) + 100, 0}, {70000, 0}, {1, 200000},
	} {
		var b bytes.Buffer
		info, n, err := sb.ReadFileAt(ctx, "/workspace/f", &b, c.off, c.length)
		if err != nil {
			t.Fatalf("ReadFileAt(%d, %d): %v", c.off, c.length, err)
		}
		lo := min(c.off, int64(len(data)))
		hi := int64(len(data))
		if c.length > 0 {
			hi = min(hi, c.off+c.length)
		}
		hi = max(hi, lo)
		if want := data[lo:hi]; n != int64(len(want)) || !bytes.Equal(b.Bytes(), want) || info.Size != int64(len(data)) {
			t.Errorf("ReadFileAt(%d, %d): %d bytes (size %d), want %d", c.off, c.length, n, info.Size, len(want))
		}
	}
	if _, _, err := sb.ReadFileAt(ctx, "/workspace/f", io.Discard, -1, 0); err == nil {
		t.Error("ReadFileAt at a negative offset succeeded")
	}

	// In place: the middle changes, the rest stays, the mode stays.
	if _, err := sb.WriteFileAt(ctx, "/workspace/f", strings.NewReader("XYZ"), 10, 0o600, false); err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(data)
	copy(want[10:], "XYZ")
	if got, _ := sb.ReadFile(ctx, "/workspace/f"); !bytes.Equal(got, want) {
		t.Error("a write in place at 10 changed more than 3 bytes")
	}
	if fi, _ := sb.Stat(ctx, "/workspace/f"); fi.Mode.Perm() != 0o640 {
		t.Errorf("a write in place changed the mode to %v", fi.Mode)
	}
	// Truncate cuts where the write ends.
	if n, err := sb.WriteFileAt(ctx, "/workspace/f", strings.NewReader("end"), 4, 0, true); err != nil || n != 3 {
		t.Fatalf("WriteFileAt with truncate: %d, %v", n, err)
	}
	if got, _ := sb.ReadFile(ctx, "/workspace/f"); !bytes.Equal(got, append(slices.Clone(want[:4]), "end"...)) {
		t.Errorf("after a truncating write: %q", got)
	}
	// A new file, with a hole before the data, and its parents.
	if _, err := sb.WriteFileAt(ctx, "/workspace/new/sparse", strings.NewReader("tail"), 5<<30, 0o604, false); err != nil {
		t.Fatal(err)
	}
	if out := mustRun(t, ctx, sb, "stat -c '%s %a' /workspace/new/sparse; tail -c 4 /workspace/new/sparse"); out != fmt.Sprintf("%d 604\ntail", 5<<30+4) {
		t.Errorf("a write past 5 GiB in a new file: %q", out)
	}
	var b bytes.Buffer
	if _, n, err := sb.ReadFileAt(ctx, "/workspace/new/sparse", &b, 5<<30-2, 0); err != nil || n != 6 || b.String() != "\x00\x00tail" {
		t.Errorf("ReadFileAt past 5 GiB: %d, %q, %v", n, b.String(), err)
	}
	// A final symlink is refused, its target untouched; so are
	// directories and FIFOs.
	mustRun(t, ctx, sb, "echo target > /workspace/target; ln -s target /workspace/link; mkfifo /workspace/fifo")
	for _, p := range []string{"/workspace/link", "/workspace/new", "/workspace/fifo", "/proc/self/environ"} {
		if _, err := sb.WriteFileAt(ctx, p, strings.NewReader("x"), 0, 0, false); err == nil {
			t.Errorf("WriteFileAt %s succeeded", p)
		}
	}
	if out := mustRun(t, ctx, sb, "cat /workspace/target"); out != "target\n" {
		t.Errorf("a write in place through a link changed its target: %q", out)
	}
}

// TestFilesSymlinkSetAttr: Symlink makes links that are stored as given
// and replace files and links (not directories); SetAttr sets modes and
// times without following a final link.
func TestFilesSymlinkSetAttr(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	sb := newSandbox(t, airlock.Config{})
	mustRun(t, ctx, sb, "mkdir -p /workspace/d && echo keep > /workspace/keep && echo old > /workspace/old")
	// In this order: the last goes through the link the second made.
	for _, c := range []struct{ p, target string }{
		{"/workspace/l1", "../../../../etc/passwd"},
		{"/workspace/l2", "/proc/self/root"},
		{"/workspace/sub/l3", "dangling"},
		{"/workspace/old", "keep"},
		{"/workspace/l2/x/../y", "z"},
	} {
		p, target := c.p, c.target
		err := sb.Symlink(ctx, target, p)
		if strings.Contains(p, "/l2/") {
			if err == nil {
				t.Errorf("Symlink through a magic link %s succeeded", p)
			}
			continue
		}
		if err != nil {
			t.Fatalf("Symlink %s: %v", p, err)
		}
		if fi, err := sb.Stat(ctx, p); err != nil || fi.Link != target || fi.Mode&fs.ModeSymlink == 0 {
			t.Errorf("Stat %s: %+v, %v; want a link to %s", p, fi, err, target)
		}
	}
	if err := sb.Symlink(ctx, "x", "/workspace/d"); err == nil {
		t.Error("Symlink over a directory succeeded")
	}
	if err := sb.Symlink(ctx, "", "/workspace/empty"); err == nil {
		t.Error("Symlink to an empty target succeeded")
	}

	when := time.Date(2001, 2, 3, 4, 5, 6, 7000, time.UTC)
	if err := sb.SetAttr(ctx, "/workspace/keep", airlock.FileAttr{SetMode: true, Mode: 0o751, ModTime: when}); err != nil {
		t.Fatal(err)
	}
	if err := sb.SetAttr(ctx, "/workspace/d", airlock.FileAttr{SetMode: true, Mode: 0o500, ModTime: when}); err != nil {
		t.Fatal(err)
	}
	// A link gets its time; its mode is left, and its target untouched.
	if err := sb.SetAttr(ctx, "/workspace/old", airlock.FileAttr{SetMode: true, Mode: 0o600, ModTime: when.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	out := mustRun(t, ctx, sb, "stat -c '%n %a %y' /workspace/keep /workspace/d; stat -c '%n %Y' /workspace/old")
	wantOut := fmt.Sprintf("/workspace/keep 751 2001-02-03 04:05:06.000007000 +0000\n/workspace/d 500 2001-02-03 04:05:06.000007000 +0000\n/workspace/old %d\n", when.Add(time.Hour).Unix())
	if out != wantOut {
		t.Errorf("after SetAttr:\n%s\nwant\n%s", out, wantOut)
	}
	for _, p := range []string{"/proc/self/environ", "/workspace/l2/environ", "/workspace/missing"} {
		if err := sb.SetAttr(ctx, p, airlock.FileAttr{SetMode: true, Mode: 0o777}); err == nil {
			t.Errorf("SetAttr %s succeeded", p)
		}
	}
}
