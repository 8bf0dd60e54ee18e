package cli

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// cpUmask is this process's umask, which the CLI it runs inherits.
func cpUmask() fs.FileMode {
	m := syscall.Umask(0o022)
	syscall.Umask(m)
	return fs.FileMode(m)
}

// TestCpTreeLinksModesTimes: a tree goes in and comes back out whole:
// links as links (whatever they point to, never followed), modes and
// modification times kept, a read-only directory filled before its mode
// is set.
func TestCpTreeLinksModesTimes(t *testing.T) {
	t.Parallel()
	h := newCLIHome(t)
	id := strings.TrimSpace(h.must(nil, "run", "-d", "--timeout", "5m"))
	local := filepath.Join(t.TempDir(), "tree")
	t1 := time.Date(2011, 3, 4, 5, 6, 7, 0, time.UTC)
	t2 := time.Date(2012, 3, 4, 5, 6, 7, 0, time.UTC)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(local, "ro"), 0o755))
	must(os.WriteFile(filepath.Join(local, "f"), []byte("file\n"), 0o604))
	must(os.WriteFile(filepath.Join(local, "ro", "inner"), []byte("inner\n"), 0o640))
	must(os.WriteFile(filepath.Join(local, "exec"), []byte("#!/bin/sh\n"), 0o755))
	links := map[string]string{"rel": "f", "abs": "/etc/hostname", "dangling": "nowhere/at/all", "up": "../../../../etc/passwd", "ro/back": "../f"}
	for name, to := range links {
		must(os.Symlink(to, filepath.Join(local, name)))
	}
	for _, p := range []string{"f", "exec", "ro/inner"} {
		must(os.Chtimes(filepath.Join(local, p), t1, t1))
	}
	must(os.Chmod(filepath.Join(local, "ro"), 0o555))
	must(os.Chtimes(filepath.Join(local, "ro"), t2, t2))
	must(os.Chtimes(local, t2, t2))

	h.must(nil, "cp", local, id+":/workspace/")
	got := h.must(nil, "exec", id, "--", "sh", "-c", "cd /workspace/tree && for p in . f exec ro ro/inner rel abs dangling up ro/back; do stat -c '%n %F %a %Y' $p; done; readlink rel abs dangling up ro/back; cat f rel ro/back")
	want := fmt.Sprintf(`. directory 755 %[2]d
f regular file 604 %[1]d
exec regular file 755 %[1]d
ro directory 555 %[2]d
ro/inner regular file 640 %[1]d
rel symbolic link 777 %%d
abs symbolic link 777 %%d
dangling symbolic link 777 %%d
up symbolic link 777 %%d
ro/back symbolic link 777 %%d
f
/etc/hostname
nowhere/at/all
../../../../etc/passwd
../f
file
file
file
`, t1.Unix(), t2.Unix())
	// Links keep the times they had here.
	var linkTimes []any
	for _, name := range []string{"rel", "abs", "dangling", "up", "ro/back"} {
		fi, err := os.Lstat(filepath.Join(local, name))
		must(err)
		linkTimes = append(linkTimes, fi.ModTime().Unix())
	}
	if want = fmt.Sprintf(want, linkTimes...); got != want {
		t.Errorf("in the sandbox after cp in:\n%s\nwant\n%s", got, want)
	}

	// Back out: the same tree, modes less the umask.
	back := t.TempDir()
	h.must(nil, "cp", id+":/workspace/tree", back)
	um := cpUmask()
	_ = filepath.WalkDir(local, func(p string, d fs.DirEntry, err error) error {
		must(err)
		rel, _ := filepath.Rel(local, p)
		a, _ := os.Lstat(p)
		b, err := os.Lstat(filepath.Join(back, "tree", rel))
		if err != nil {
			t.Errorf("%s not copied out: %v", rel, err)
			return nil
		}
		wantMode := a.Mode()
		if wantMode&fs.ModeSymlink == 0 {
			wantMode &^= um
		}
		if b.Mode() != wantMode || !b.ModTime().Equal(a.ModTime()) {
			t.Errorf("%s copied out: %v %v, want %v %v", rel, b.Mode(), b.ModTime(), wantMode, a.ModTime())
		}
		if a.Mode()&fs.ModeSymlink != 0 {
			ta, _ := os.Readlink(p)
			tb, _ := os.Readlink(filepath.Join(back, "tree", rel))
			if ta != tb {
				t.Errorf("link %s copied out points to %q, want %q", rel, tb, ta)
			}
		} else if a.Mode().IsRegular() {
			ca, _ := os.ReadFile(p)
			cb, _ := os.ReadFile(filepath.Join(back, "tree", rel))
			if !bytes.Equal(ca, cb) {
				t.Errorf("%s copied out holds %q, want %q", rel, cb, ca)
			}
		}
		return nil
	})
	// A link on its own is copied as a link, in and out.
	h.must(nil, "cp", id+":/workspace/tree/abs", filepath.Join(back, "alone"))
	if to, err := os.Readlink(filepath.Join(back, "alone")); err != nil || to != "/etc/hostname" {
		t.Errorf("a link copied out alone: %q, %v", to, err)
	}
	h.must(nil, "cp", filepath.Join(local, "up"), id+":/workspace/alone")
	if out := h.must(nil, "exec", id, "--", "readlink", "/workspace/alone"); out != "../../../../etc/passwd\n" {
		t.Errorf("a link copied in alone: %q", out)
	}
	if r := h.run(nil, "cp", id+":/workspace/tree", filepath.Join(back, "tree")); r.code != 0 || strings.Contains(r.stderr, "skipping") {
		t.Errorf("cp over an earlier copy: exit %d: %s", r.code, r.stderr)
	}
}

// TestCpTarStreams: "-" reads a tar archive from stdin into a sandbox
// directory, and writes one to stdout, with links, modes and times; names
// that climb out land inside the destination, and a local directory
// named "-" is never made.
func TestCpTarStreams(t *testing.T) {
	t.Parallel()
	h := newCLIHome(t)
	id := strings.TrimSpace(h.must(nil, "run", "-d", "--timeout", "5m"))
	when := time.Date(2015, 6, 7, 8, 9, 10, 0, time.UTC)
	var in bytes.Buffer
	tw := tar.NewWriter(&in)
	add := func(h *tar.Header, body string) {
		t.Helper()
		h.ModTime, h.Size, h.Format = when, int64(len(body)), tar.FormatPAX
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, body); err != nil {
			t.Fatal(err)
		}
	}
	add(&tar.Header{Typeflag: tar.TypeDir, Name: "./", Mode: 0o755}, "")
	add(&tar.Header{Typeflag: tar.TypeDir, Name: "./d/", Mode: 0o750}, "")
	add(&tar.Header{Typeflag: tar.TypeReg, Name: "./d/f", Mode: 0o640}, "content\n")
	add(&tar.Header{Typeflag: tar.TypeReg, Name: "../../../../escape", Mode: 0o644}, "climbed\n")
	add(&tar.Header{Typeflag: tar.TypeReg, Name: "/abs", Mode: 0o600}, "absolute\n")
	add(&tar.Header{Typeflag: tar.TypeSymlink, Name: "./d/l", Linkname: "/proc/self/root"}, "")
	add(&tar.Header{Typeflag: tar.TypeLink, Name: "./d/hard", Linkname: "./d/f", Mode: 0o640}, "")
	add(&tar.Header{Typeflag: tar.TypeFifo, Name: "./fifo", Mode: 0o644}, "")
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	h.must(nil, "exec", id, "--", "mkdir", "-p", "/workspace/t")
	r := h.run(&in, "cp", "-", id+":/workspace/t")
	if r.code != 0 || !strings.Contains(r.stderr, "skipping fifo") && !strings.Contains(r.stderr, "skipping ./fifo") {
		t.Errorf("cp - : exit %d: %s", r.code, r.stderr)
	}
	got := h.must(nil, "exec", id, "--", "sh", "-c", "cd /workspace/t && stat -c '%n %F %a %Y' d d/f escape abs d/l d/hard && readlink d/l && cat d/f escape abs d/hard; ls /workspace; test -e fifo || echo no fifo")
	w := when.Unix()
	want := fmt.Sprintf("d directory 750 %d\nd/f regular file 640 %d\nescape regular file 644 %d\nabs regular file 600 %d\nd/l symbolic link 777 %d\nd/hard regular file 640 %d\n/proc/self/root\ncontent\nclimbed\nabsolute\ncontent\nt\nno fifo\n", w, w, w, w, w, w)
	if got != want {
		t.Errorf("after cp -:\n%s\nwant\n%s", got, want)
	}

	// Out as a tar archive, under the source's base name.
	dir := t.TempDir()
	cmd := h.cmd(context.Background(), nil, "cp", id+":/workspace/t", "-")
	cmd.Dir = dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("cp ... -: %v: %s", err, errb.String())
	}
	if _, err := os.Lstat(filepath.Join(dir, "-")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("cp ... - made a local %q: %v", "-", err)
	}
	entries := map[string]string{}
	tr := tar.NewReader(&out)
	for {
		hd, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		entries[hd.Name] = fmt.Sprintf("%c %o %d %s %s", hd.Typeflag, hd.Mode, hd.ModTime.Unix(), hd.Linkname, body)
	}
	for name, e := range map[string]string{
		"t/d/":     fmt.Sprintf("%c 750 %d  ", tar.TypeDir, w),
		"t/d/f":    fmt.Sprintf("%c 640 %d  content\n", tar.TypeReg, w),
		"t/d/l":    fmt.Sprintf("%c 777 %d /proc/self/root ", tar.TypeSymlink, w),
		"t/escape": fmt.Sprintf("%c 644 %d  climbed\n", tar.TypeReg, w),
	} {
		if entries[name] != e {
			t.Errorf("tar entry %s: %q, want %q", name, entries[name], e)
		}
	}
	if len(entries) != 8 { // t/, t/d/, t/d/f, t/d/l, t/d/hard, t/escape, t/abs, and nothing else
		if _, ok := entries["t/"]; !ok || len(entries) != 7 {
			t.Errorf("tar entries: %q", entries)
		}
	}
	// Through tar x, as a user would.
	if _, err := exec.LookPath("tar"); err == nil {
		x := exec.Command("sh", "-c", fmt.Sprintf("%q cp %s:/workspace/t - | tar -C %q -x", cliBin, id, dir))
		x.Env = append(os.Environ(), "AIRLOCK_HOME="+h.home)
		if b, err := x.CombinedOutput(); err != nil {
			t.Fatalf("cp ... - | tar x: %v: %s", err, b)
		}
		if to, err := os.Readlink(filepath.Join(dir, "t", "d", "l")); err != nil || to != "/proc/self/root" {
			t.Errorf("tar x of the archive: link %q, %v", to, err)
		}
		if b, _ := os.ReadFile(filepath.Join(dir, "t", "d", "f")); string(b) != "content\n" {
			t.Errorf("tar x of the archive: d/f %q", b)
		}
	}
}

// TestCpLargeFile copies a 2 GiB file (256 MiB with -short) out of a
// sandbox and back in, through the supervisor of a detached sandbox: the
// supervisor's and the CLI's peak memory stay far below the file's size.
// The file is sparse, with marks at its start, middle and end, so that
// the sandbox's disk holds little of it.
func TestCpLargeFile(t *testing.T) {
	t.Parallel()
	size := int64(2 << 30)
	if testing.Short() {
		size = 256 << 20
	}
	h := newCLIHome(t)
	args := []string{"run", "-d", "--timeout", "10m"}
	if os.Getuid() == 0 {
		args = append(args, "--disk", "3g")
	} else if !testing.Short() {
		size = 400 << 20 // a larger disk than half the memory needs root
	}
	id := strings.TrimSpace(h.must(nil, args...))
	var rec struct {
		Supervisor struct {
			PID int `json:"pid"`
		} `json:"supervisor"`
	}
	if err := json.Unmarshal([]byte(h.must(nil, "get", id)), &rec); err != nil || rec.Supervisor.PID <= 0 {
		t.Fatalf("get: %+v, %v", rec, err)
	}
	// VmHWM: the peak RSS of a process's own memory since it executed
	// its program (rusage's maxrss would count the test binary's, which
	// a child shares until its exec).
	hwmOf := func(pid int) (int64, bool) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			return 0, false
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
				var kb int64
				fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb)
				return kb << 10, true
			}
		}
		return 0, false
	}
	hwm := func() int64 {
		v, ok := hwmOf(rec.Supervisor.PID)
		if !ok {
			t.Fatal("no VmHWM of the supervisor")
		}
		return v
	}
	marks := map[int64]string{0: "start", size / 2: "middle", size - 3: "end"}
	var mk strings.Builder
	fmt.Fprintf(&mk, "set -e; truncate -s %d /workspace/big\n", size)
	for off, m := range marks {
		fmt.Fprintf(&mk, "printf %s | dd of=/workspace/big bs=1 seek=%d conv=notrunc status=none\n", m, off)
	}
	h.must(nil, "exec", id, "--", "sh", "-c", mk.String())
	before := hwm()

	run := func(args ...string) int64 {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := h.cmd(ctx, nil, args...)
		var errb bytes.Buffer
		cmd.Stderr = &errb
		start := time.Now()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var peak int64
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		for {
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("airlock %q: %v: %s", args, err, errb.String())
				}
				t.Logf("airlock %q: %v", args, time.Since(start).Round(time.Millisecond))
				return peak
			case <-time.After(20 * time.Millisecond):
				if v, ok := hwmOf(cmd.Process.Pid); ok {
					peak = max(peak, v)
				}
			}
		}
	}
	local := filepath.Join(t.TempDir(), "big")
	cliOut := run("cp", id+":/workspace/big", local)
	f, err := os.Open(local)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if fi, _ := f.Stat(); fi.Size() != size {
		t.Fatalf("copied out %d bytes, want %d", fi.Size(), size)
	}
	for off, m := range marks {
		b := make([]byte, len(m))
		if _, err := f.ReadAt(b, off); err != nil || string(b) != m {
			t.Errorf("copied out: %q at %d, want %q (%v)", b, off, m, err)
		}
	}
	h.must(nil, "exec", id, "--", "rm", "/workspace/big")
	cliIn := run("cp", local, id+":/workspace/back")
	var check strings.Builder
	fmt.Fprintf(&check, "stat -c %%s /workspace/back\n")
	for _, off := range []int64{0, size / 2, size - 3} {
		fmt.Fprintf(&check, "dd if=/workspace/back bs=1 skip=%d count=%d status=none; echo\n", off, len(marks[off]))
	}
	if got, want := h.must(nil, "exec", id, "--", "sh", "-c", check.String()), fmt.Sprintf("%d\nstart\nmiddle\nend\n", size); got != want {
		t.Errorf("copied back in:\n%s\nwant\n%s", got, want)
	}
	after := hwm()
	t.Logf("%d MiB out and in: supervisor peak RSS %d MiB before, %d MiB after; CLI peak RSS %d MiB out, %d MiB in",
		size>>20, before>>20, after>>20, cliOut>>20, cliIn>>20)
	// Far below the file's size: a few chunks in flight and the
	// runtime's slack.
	bound := max(size/8, 192<<20)
	if after-before > bound || cliOut > bound || cliIn > bound {
		t.Errorf("memory grew with the file: supervisor %d -> %d MiB, CLI %d and %d MiB", before>>20, after>>20, cliOut>>20, cliIn>>20)
	}
}
