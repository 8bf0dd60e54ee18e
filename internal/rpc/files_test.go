package rpc

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
)

// TestFileRanges: read_file reads parts (offset, length) and says the
// file's whole size; write_file with offset writes in place, truncating
// only when asked; bad values are refused as params.
func TestFileRanges(t *testing.T) {
	needAgent(t)
	c := newClient(t, Options{AllowCreate: true}, ServeOptions{})
	c.create("c", nil)
	c.result("w", api.MethodWriteFile, map[string]any{"path": "/workspace/f", "content": b64("0123456789"), "mode": 0o640}, nil)
	for i, tc := range []struct {
		params map[string]any
		want   string
	}{
		{map[string]any{"offset": 3, "length": 4}, "3456"},
		{map[string]any{"offset": 8}, "89"},
		{map[string]any{"length": 2}, "01"},
		{map[string]any{"offset": 20, "length": 5}, ""},
		{map[string]any{"offset": 5, "length": 100, "max_bytes": 10}, "56789"},
	} {
		tc.params["path"] = "/workspace/f"
		var r api.ReadFileResult
		c.result(i, api.MethodReadFile, tc.params, &r)
		if got := unb64(t, r.Content); got != tc.want || r.Size != int64(len(tc.want)) || r.FileSize != 10 || r.Mode != 0o640 {
			t.Errorf("read_file %v: %q, size %d, file_size %d, mode %o; want %q", tc.params, got, r.Size, r.FileSize, r.Mode, tc.want)
		}
	}
	// A part larger than max_bytes is refused as too large.
	e := wantError(t, c.call("big", api.MethodReadFile, map[string]any{"path": "/workspace/f", "offset": 1, "max_bytes": 3}), api.CodeFileError)
	if d, _ := e.Data.(map[string]any); d["kind"] != "too_large" {
		t.Errorf("a part over max_bytes: %+v", e)
	}
	for i, p := range []map[string]any{
		{"path": "/workspace/f", "offset": -1},
		{"path": "/workspace/f", "length": -1},
		{"path": "/workspace/f", "length": int64(1) << 40},
	} {
		m := c.call("bad"+string(rune('a'+i)), api.MethodReadFile, p)
		if e := errorOf(t, m); e.Code != api.CodeInvalidParams && e.Code != api.CodeLimitExceeded {
			t.Errorf("read_file %v: %+v", p, e)
		}
	}

	c.result("w2", api.MethodWriteFile, map[string]any{"path": "/workspace/f", "content": b64("ab"), "offset": 2}, nil)
	c.result("w3", api.MethodWriteFile, map[string]any{"path": "/workspace/f", "content": b64("Z"), "offset": 12}, nil)
	var r api.ReadFileResult
	c.result("r", api.MethodReadFile, map[string]any{"path": "/workspace/f"}, &r)
	if got := unb64(t, r.Content); got != "01ab456789\x00\x00Z" || r.Mode != 0o640 {
		t.Errorf("after writes in place: %q, mode %o", got, r.Mode)
	}
	c.result("w4", api.MethodWriteFile, map[string]any{"path": "/workspace/f", "content": b64("x"), "offset": 1, "truncate": true}, nil)
	c.result("r2", api.MethodReadFile, map[string]any{"path": "/workspace/f"}, &r)
	if got := unb64(t, r.Content); got != "0x" {
		t.Errorf("after a truncating write: %q", got)
	}
	wantError(t, c.call("neg", api.MethodWriteFile, map[string]any{"path": "/workspace/f", "content": b64("x"), "offset": -1}), api.CodeInvalidParams)
	wantError(t, c.call("trunc", api.MethodWriteFile, map[string]any{"path": "/workspace/f", "content": b64("x"), "truncate": true}), api.CodeInvalidParams)
}

// TestSymlinkSetAttr: symlink makes links stored as given; set_attr sets
// modes and times, refusing modes beyond 0777.
func TestSymlinkSetAttr(t *testing.T) {
	needAgent(t)
	c := newClient(t, Options{AllowCreate: true}, ServeOptions{})
	c.create("c", nil)
	c.result("l", api.MethodSymlink, map[string]any{"path": "/workspace/l", "target": "/proc/self/root"}, nil)
	var fi api.FileInfo
	c.result("s", api.MethodStat, map[string]any{"path": "/workspace/l"}, &fi)
	if fi.Link != "/proc/self/root" {
		t.Errorf("stat of the link: %+v", fi)
	}
	wantError(t, c.call("nt", api.MethodSymlink, map[string]any{"path": "/workspace/l2"}), api.CodeInvalidParams)
	c.result("d", api.MethodMkdir, map[string]any{"path": "/workspace/d"}, nil)
	when := time.Date(2010, 1, 2, 3, 4, 5, 0, time.UTC)
	c.result("a", api.MethodSetAttr, map[string]any{"path": "/workspace/d", "mode": 0o700, "mod_time": when}, nil)
	c.result("a2", api.MethodSetAttr, map[string]any{"path": "/workspace/l", "mod_time": when}, nil)
	out := c.exec("x", map[string]any{"command": "stat -c '%a %Y' /workspace/d; stat -c %Y /workspace/l"})
	if got := unb64(t, out.Stdout); got != "700 1262401445\n1262401445\n" {
		t.Errorf("after set_attr: %q", got)
	}
	e := wantError(t, c.call("suid", api.MethodSetAttr, map[string]any{"path": "/workspace/d", "mode": 0o4755}), api.CodeInvalidParams)
	if !strings.Contains(e.Message, "0777") {
		t.Errorf("a set-id mode: %q", e.Message)
	}
}

// TestReadFileToHost: read_file with host_path writes the content to
// that host file, past the message limit, in parts as asked; it opens
// only an existing regular file, never through a symbolic link.
func TestReadFileToHost(t *testing.T) {
	needAgent(t)
	c := newClient(t, Options{AllowCreate: true, MaxMessage: 1 << 20}, ServeOptions{})
	c.create("c", nil)
	c.result("mk", api.MethodExec, map[string]any{"command": "head -c 3000000 /dev/urandom > /workspace/big; printf 0123456789 > /workspace/f; : > /workspace/empty"}, nil)
	dir := t.TempDir()
	host := filepath.Join(dir, "out")
	if err := os.WriteFile(host, []byte("old content, longer than some reads"), 0o600); err != nil {
		t.Fatal(err)
	}
	var r api.ReadFileResult
	c.result("big", api.MethodReadFile, map[string]any{"path": "/workspace/big", "host_path": host}, &r)
	b, err := os.ReadFile(host)
	if err != nil {
		t.Fatal(err)
	}
	if r.Size != 3000000 || r.FileSize != 3000000 || len(b) != 3000000 || r.Content != "" {
		t.Errorf("a 3 MB read past the 1 MiB message limit: size %d, file_size %d, %d bytes on the host, content %d", r.Size, r.FileSize, len(b), len(r.Content))
	}
	var sum api.ExecResult
	c.result("sum2", api.MethodExec, map[string]any{"command": "sha256sum < /workspace/big"}, &sum)
	if got := fmt.Sprintf("%x  -\n", sha256.Sum256(b)); got != unb64(t, sum.Stdout) {
		t.Errorf("the host file's sha256 %q, the sandbox's %q", got, sum.Stdout)
	}
	for i, tc := range []struct {
		params map[string]any
		want   string
	}{
		{map[string]any{"offset": 3, "length": 4}, "3456"},
		{map[string]any{"offset": 8}, "89"},
		{map[string]any{"offset": 20}, ""},
		{map[string]any{"max_bytes": 10}, "0123456789"},
	} {
		tc.params["path"], tc.params["host_path"] = "/workspace/f", host
		c.result(i, api.MethodReadFile, tc.params, &r)
		if b, _ := os.ReadFile(host); string(b) != tc.want || r.Size != int64(len(tc.want)) || r.FileSize != 10 {
			t.Errorf("read_file %v: host file %q, size %d, file_size %d; want %q", tc.params, b, r.Size, r.FileSize, tc.want)
		}
	}
	c.result("empty", api.MethodReadFile, map[string]any{"path": "/workspace/empty", "host_path": host}, &r)
	if b, _ := os.ReadFile(host); len(b) != 0 || r.Size != 0 {
		t.Errorf("an empty file: %q, size %d", b, r.Size)
	}
	e := wantError(t, c.call("toolarge", api.MethodReadFile, map[string]any{"path": "/workspace/f", "host_path": host, "max_bytes": 4}), api.CodeFileError)
	if d, _ := e.Data.(map[string]any); d["kind"] != "too_large" {
		t.Errorf("a file over max_bytes: %+v", e)
	}
	// Only an existing regular file, by an absolute path, not through
	// a symbolic link.
	link := filepath.Join(dir, "link")
	if err := os.Symlink(host, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for i, hp := range []string{filepath.Join(dir, "missing"), link, dir, fifo, "relative"} {
		wantError(t, c.call("bad"+string(rune('a'+i)), api.MethodReadFile, map[string]any{"path": "/workspace/f", "host_path": hp}), api.CodeInvalidParams)
	}
	if _, err := os.Lstat(filepath.Join(dir, "missing")); err == nil {
		t.Error("read_file made the missing host_path")
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link after a read through it: %v %v", fi, err)
	}
}
