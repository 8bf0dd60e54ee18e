package policy

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const fileScript = `
def on_file(op, path, size):
    if path.startswith("/ro/"):
        return "EROFS"
    if op == "write" and size > 1 << 20:
        return "ENOSPC"
    if op == "remove" and path.endswith(".keep"):
        return "EPERM"
    if op in ("chmod", "chown") or path == "/secret":
        return False
    return True
`

// wantFileScriptError checks that FileDecision failed as a fault of
// on_file, denying with EACCES.
func wantFileScriptError(t *testing.T, errno syscall.Errno, err error, wants ...string) {
	t.Helper()
	var se *ScriptError
	if !errors.As(err, &se) {
		t.Fatalf("FileDecision = %v, %v; want a *ScriptError", errno, err)
	}
	if se.Func != "on_file" {
		t.Errorf("ScriptError.Func = %q, want on_file", se.Func)
	}
	if errno != syscall.EACCES {
		t.Errorf("errno %v with a script error, want EACCES", errno)
	}
	for _, w := range append(wants, "in on_file") {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
}

func TestScriptOnFile(t *testing.T) {
	p := newPolicy(t, Config{PolicyScript: fileScript}, Options{})
	if !p.HasFileHook() {
		t.Fatal("HasFileHook is false with on_file defined")
	}
	tests := []struct {
		op, path string
		size     int64
		want     syscall.Errno
	}{
		{FileOpCreate, "/workspace/a.txt", 0, 0},
		{FileOpWrite, "/workspace/a.txt", 4096, 0},
		{FileOpWrite, "/workspace/a.txt", 2 << 20, syscall.ENOSPC},
		{FileOpWrite, "/workspace/a.txt", 1 << 40, syscall.ENOSPC},
		{FileOpWrite, "/workspace/a.txt", -1, 0},
		{FileOpTruncate, "/workspace/a.txt", 2 << 20, 0},
		{FileOpOpen, "/ro/etc/passwd", 0, syscall.EROFS},
		{FileOpMkdir, "/ro/dir", 0, syscall.EROFS},
		{FileOpRemove, "/workspace/.keep", 0, syscall.EPERM},
		{FileOpRename, "/workspace/.keep", 0, 0},
		{FileOpChmod, "/workspace/a.txt", 0, syscall.EACCES},
		{FileOpChown, "/workspace/a.txt", 0, syscall.EACCES},
		{FileOpUtimens, "/secret", 0, syscall.EACCES},
		{FileOpLink, "/workspace/b", 0, 0},
		{FileOpSymlink, "/workspace/c", 0, 0},
	}
	for _, tt := range tests {
		got, err := p.FileDecision(context.Background(), tt.op, tt.path, tt.size)
		if err != nil || got != tt.want {
			t.Errorf("FileDecision(%s, %s, %d) = %v (%d), %v; want %v (%d)", tt.op, tt.path, tt.size, got, got, err, tt.want, tt.want)
		}
	}
}

func TestScriptOnFileArguments(t *testing.T) {
	var got []string
	var mu sync.Mutex
	p := newPolicy(t, Config{PolicyScript: "def on_file(op, path, size):\n    print(op, path, size, type(size))\n    return True\n"},
		Options{ScriptPrint: func(msg string) { mu.Lock(); got = append(got, msg); mu.Unlock() }})
	for _, op := range fileOps {
		if errno, err := p.FileDecision(context.Background(), op, "/w/"+op, 1<<62); errno != 0 || err != nil {
			t.Errorf("%s: %v, %v", op, errno, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for i, op := range fileOps {
		if want := fmt.Sprintf("%s /w/%s %d int", op, op, int64(1)<<62); i >= len(got) || got[i] != want {
			t.Errorf("on_file saw %q, want %q", got, want)
			break
		}
	}
}

func TestScriptOnFileErrnoNames(t *testing.T) {
	p := newPolicy(t, Config{PolicyScript: "def on_file(op, path, size):\n    return path\n"}, Options{})
	for name, want := range fileErrnos {
		got, err := p.FileDecision(context.Background(), FileOpWrite, name, 1)
		if err != nil || got != want || got == 0 {
			t.Errorf("on_file returning %q: %v, %v; want %v", name, got, err, want)
		}
	}
	for name, want := range map[string]syscall.Errno{
		"EACCES": syscall.EACCES, "EPERM": syscall.EPERM, "EROFS": syscall.EROFS,
		"ENOSPC": syscall.ENOSPC, "EEXIST": syscall.EEXIST, "ENOENT": syscall.ENOENT,
		"EDQUOT": syscall.EDQUOT, "EIO": syscall.EIO,
	} {
		if fileErrnos[name] != want {
			t.Errorf("%s is %v", name, fileErrnos[name])
		}
	}
	for name, wants := range map[string][]string{
		"EFOO":                    {`returned "EFOO", which is not an errno name`, "one of EACCES, EAGAIN,"},
		"":                        {`returned ""`},
		"eperm":                   {`errno names are upper case ("EPERM")`},
		"EPERM ":                  {`returned "EPERM "`},
		strings.Repeat("E", 1000): {`"EEEE`, `..."`},
	} {
		got, err := p.FileDecision(context.Background(), FileOpWrite, name, 0)
		wantFileScriptError(t, got, err, append(wants, "policy_script:1:1:")...)
		if len(err.Error()) > 600 {
			t.Errorf("error of %d bytes: %.80q...", len(err.Error()), err)
		}
	}
}

// TestScriptOnFileDocumented checks that the package documentation
// lists the errno names on_file accepts, no more and no fewer.
func TestScriptOnFileDocumented(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.NewReplacer("//", " ", "\n", " ").Replace(string(doc))
	_, list, ok := strings.Cut(text, "(one of ")
	if !ok {
		t.Fatal("doc.go lists no errno names")
	}
	list, _, _ = strings.Cut(list, ")")
	var documented []string
	for _, f := range strings.Split(list, ",") {
		documented = append(documented, strings.TrimSpace(f))
	}
	if want := slices.Sorted(maps.Keys(fileErrnos)); !slices.Equal(documented, want) {
		t.Errorf("doc.go lists %q; on_file accepts %q", documented, want)
	}
}

func TestScriptOnFileBadResults(t *testing.T) {
	tests := []struct {
		name, body string
		wants      []string
	}{
		{"int", "return 1", []string{"returned int, want True, False or an errno name such as \"EPERM\""}},
		{"errno number", "return 13", []string{"returned int"}},
		{"none", "pass", []string{"returned None", "want True, False or an errno name"}},
		{"list", "return [\"EPERM\"]", []string{"returned list"}},
		{"bytes", "return b\"EPERM\"", []string{"returned bytes"}},
		{"dict", "return {}", []string{"returned dict"}},
		{"fault", "x = {}\n    return x[path]", []string{"policy_script:4:13:", "key \"/a\" not in dict"}},
		{"fail", "fail(\"no files today\")", []string{"policy_script:3:", "no files today"}},
		{"frozen global", "SEEN.append(path)\n    return True", []string{"policy_script:3:", "frozen"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPolicy(t, Config{PolicyScript: "SEEN = []\ndef on_file(op, path, size):\n    " + tt.body + "\n"}, Options{})
			got, err := p.FileDecision(context.Background(), FileOpCreate, "/a", 0)
			wantFileScriptError(t, got, err, tt.wants...)
		})
	}
}

func TestScriptOnFileBounds(t *testing.T) {
	t.Run("steps", func(t *testing.T) {
		p := newPolicy(t, Config{PolicyScript: "def on_file(op, path, size):\n    while True:\n        size += 1\n    return True\n"},
			Options{ScriptMaxSteps: 100_000, ScriptTimeout: time.Minute})
		start := time.Now()
		got, err := p.FileDecision(context.Background(), FileOpWrite, "/a", 1)
		wantFileScriptError(t, got, err, "more than 100000 steps", "policy_script:3:")
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("stopping took %v", d)
		}
	})
	t.Run("time", func(t *testing.T) {
		p := newPolicy(t, Config{PolicyScript: "def on_file(op, path, size):\n    for i in range(1 << 60):\n        pass\n"},
			Options{ScriptMaxSteps: 1 << 62, ScriptTimeout: 50 * time.Millisecond})
		got, err := p.FileDecision(context.Background(), FileOpWrite, "/a", 1)
		wantFileScriptError(t, got, err, "longer than 50ms")
	})
	t.Run("context", func(t *testing.T) {
		p := newPolicy(t, Config{PolicyScript: "def on_file(op, path, size):\n    while True:\n        pass\n"},
			Options{ScriptMaxSteps: 1 << 62, ScriptTimeout: time.Minute})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
		defer cancel()
		got, err := p.FileDecision(ctx, FileOpWrite, "/a", 1)
		wantFileScriptError(t, got, err, "deadline exceeded")
	})
	t.Run("alloc", func(t *testing.T) {
		p := newPolicy(t, Config{PolicyScript: "def on_file(op, path, size):\n    x = path * (1 << 40)\n    return True\n"},
			Options{ScriptMaxAlloc: 8 << 20, ScriptTimeout: time.Minute})
		got, err := p.FileDecision(context.Background(), FileOpWrite, "/a", 1)
		wantFileScriptError(t, got, err, "would allocate more than 8 MiB")
	})
}

func TestScriptOnFileOnly(t *testing.T) {
	// A script may define on_file alone, and the network hooks are then
	// absent: the allowlist decides alone.
	p, err := New(Config{AllowedHosts: []string{"api.example.com"}, PolicyScript: "def on_file(op, path, size):\n    return op != \"remove\"\n"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !p.HasFileHook() || p.HasRequestHooks() || p.HasResponseHooks() {
		t.Errorf("hooks: file %v, request %v, response %v", p.HasFileHook(), p.HasRequestHooks(), p.HasResponseHooks())
	}
	if !p.HostAllowed("api.example.com") || p.HostAllowed("evil.com") {
		t.Error("the allowlist is not applied as it is")
	}
	if errno, err := p.FileDecision(context.Background(), FileOpRemove, "/a", 0); errno != syscall.EACCES || err != nil {
		t.Errorf("remove: %v, %v", errno, err)
	}
}

func TestFileDecisionWithoutHook(t *testing.T) {
	for name, cfg := range map[string]Config{
		"no script":       {},
		"network hooks":   {AllowedHosts: []string{"*"}, PolicyScript: "def on_request(req):\n    return None\n"},
		"is_host_allowed": {PolicyScript: "def is_host_allowed(h):\n    return False\n"},
	} {
		p := newPolicy(t, cfg, Options{})
		if p.HasFileHook() {
			t.Errorf("%s: HasFileHook", name)
		}
		if errno, err := p.FileDecision(context.Background(), FileOpRemove, "/a", 0); errno != 0 || err != nil {
			t.Errorf("%s: FileDecision = %v, %v; want allowed", name, errno, err)
		}
	}
}

func TestFileDecisionUnknownOp(t *testing.T) {
	for _, src := range []string{"", "def on_file(op, path, size):\n    return True\n"} {
		p := newPolicy(t, Config{PolicyScript: src}, Options{})
		for _, op := range []string{"", "read", "Open", "setxattr"} {
			errno, err := p.FileDecision(context.Background(), op, "/a", 0)
			var se *ScriptError
			if errno != syscall.EACCES || err == nil || errors.As(err, &se) || !strings.Contains(err.Error(), "unknown file operation") {
				t.Errorf("op %q: %v, %v; want EACCES and an error about the op", op, errno, err)
			}
		}
	}
}

func TestScriptOnFileConcurrent(t *testing.T) {
	p := newPolicy(t, Config{AllowedHosts: []string{"*"}, PolicyScript: fileScript + `
def on_request(req):
    req.headers["X-N"] = req.url
    return req
`}, Options{ScriptConcurrency: 8, ScriptTimeout: 10 * time.Second}) // no call waits long for a slot, however loaded the machine
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				path := fmt.Sprintf("/workspace/%d/%d", g, i)
				want := syscall.Errno(0)
				switch i % 4 {
				case 1:
					path = "/ro" + path
					want = syscall.EROFS
				case 2:
					path += ".keep"
					want = syscall.EPERM
				}
				op := FileOpRemove
				if i%4 == 3 {
					op = FileOpChown
					want = syscall.EACCES
				}
				if errno, err := p.FileDecision(context.Background(), op, path, int64(i)); errno != want || err != nil {
					t.Errorf("%s %s: %v, %v; want %v", op, path, errno, err, want)
					return
				}
				r := testRequest()
				if out, err := p.FilterRequest(context.Background(), r); err != nil || out.Header.Get("X-N") != r.URL {
					t.Errorf("%v, %v", out, err)
					return
				}
			}
		})
	}
	wg.Wait()
}
