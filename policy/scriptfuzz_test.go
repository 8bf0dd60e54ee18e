package policy

import (
	"context"
	"errors"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.starlark.net/starlark"
)

// FuzzScriptRewrite checks that the rewrite which charges allocations
// changes no program's meaning: a script compiles once rewritten when it
// compiled before, and its top level ends the same way, with the same
// globals, unless the rewritten one hit a bound.
func FuzzScriptRewrite(f *testing.F) {
	for _, s := range []string{
		"x = [1, 2] + [3]\ny = {'a': 1} | {'b': 2}\nz = 'ab' * 3",
		"l = [1]\nl += [2]\nd = {}\nd['k'] = 1\nd['k'] += 2\n",
		"def f(*a, **kw):\n    return (a, kw)\nx = f(*[1, 2], **{'z': 3})",
		"x = [i * 2 for i in range(5) if i % 2]\ny = {k: v for k, v in enumerate('abc'.elems())}",
		"x = -(1 << 70)\ny = ~5\nz = 7 // 2\nw = 7 % 3\nv = 1.5 / 2",
		"s = 'a,b,c'\nx = s.split(',')\ny = '-'.join(x)\nz = s.replace(',', ';').upper()",
		"x = '%s=%d' % ('a', 1)\ny = '{}{}'.format(1, 'b')\nz = str([1, 'a'])\nw = repr('a')",
		"x = sorted([3, 1, 2], reverse = True)\ny = list(reversed([1, 2]))\nz = tuple(zip([1], [2]))",
		"d = {'a': [1]}\nd['a'] += [2]\nx = d.items()\ny = d.keys()",
		"s = set([1, 2])\ns.add(3)\nx = s.union([4])\ny = s | set([5])",
		"fns = [lambda: i for i in range(3)]\nx = fns[0]()",
		"x = [1, 2, 3][::-1]\ny = 'abc'[1:]\nz = (1, 2)[:1]",
		"x = getattr('a', 'upper')()\ny = hasattr('a', 'upper')",
		"for i in range(3):\n    pass\nx = i",
		"a, b = 1, 2\n[c, d] = [3, 4]\nx = (a, b, c, d)",
		"x = bytes('ab')\ny = b'a' + b'b'\nz = list(x.elems())",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		if len(src) > 2048 {
			return
		}
		_, orig, origErr := starlark.SourceProgramOptions(scriptOptions, scriptFile, src, func(string) bool { return false })
		rw, err := compileScript(src)
		if err != nil {
			var se *ScriptError
			if origErr == nil && !(errors.As(err, &se) && (strings.Contains(se.Msg, "reserved") || strings.Contains(se.Msg, "load("))) {
				t.Fatalf("compiles as written but not once rewritten: %v", err)
			}
			return
		}
		if origErr != nil {
			t.Fatalf("does not compile as written (%v) but does once rewritten", origErr)
		}
		if orig.NumLoads() > 0 {
			return
		}
		const steps = 20_000
		th := &starlark.Thread{Print: func(*starlark.Thread, string) {}}
		th.SetMaxExecutionSteps(steps)
		want, wantErr := orig.Init(th, nil)
		if wantErr != nil && strings.Contains(wantErr.Error(), "too many steps") {
			return
		}
		s := &script{limits: scriptLimits{maxSteps: 10 * steps, timeout: 10 * time.Second, maxAlloc: 64 << 20, calls: NewScriptGate(1), shared: NewScriptGate(1)}}
		var got starlark.StringDict
		gotErr := s.run(t.Context(), "", func(th *starlark.Thread) error {
			var err error
			got, err = rw.prog.Init(th, rw.predeclared)
			return err
		})
		if gotErr != nil {
			var ae *AllocError
			if errors.As(gotErr, &ae) || strings.Contains(gotErr.Error(), "would allocate") || strings.Contains(gotErr.Error(), "steps") || strings.Contains(gotErr.Error(), "int of") || strings.Contains(gotErr.Error(), "nested more than") || strings.Contains(gotErr.Error(), "characters cannot be parsed") {
				return // a bound of the rewritten script
			}
		}
		if (wantErr == nil) != (gotErr == nil) {
			t.Fatalf("as written: %v; rewritten: %v", wantErr, gotErr)
		}
		if wantErr != nil {
			return
		}
		for name, v := range want {
			if g, ok := got[name]; !ok || g.String() != v.String() {
				t.Errorf("global %s: %v as written, %v rewritten", name, v, got[name])
			}
		}
		for name := range got {
			if _, ok := want[name]; !ok && !strings.HasPrefix(name, reservedPrefix) {
				t.Errorf("global %s appeared once rewritten", name)
			}
		}
	})
}

// fuzzFileScript is the on_file of FuzzFileDecision; fuzzFileWant is
// what it should decide, written out again in Go.
const fuzzFileScript = `
def on_file(op, path, size):
    if path.startswith("/errno/"):
        return path[len("/errno/"):]
    if path.startswith("/value/"):
        return {"int": size, "none": None, "op": op, "list": [op]}.get(path[len("/value/"):], False)
    if path.startswith("/loop/"):
        while True:
            size += 1
    if op == "write" and size > 1 << 20:
        return "EFBIG"
    if op in ("remove", "rename") and path.endswith(".keep"):
        return "EPERM"
    return not path.startswith("/deny")
`

// fuzzFileWant returns the errno that fuzzFileScript decides, or ok
// false when it fails.
func fuzzFileWant(op, path string, size int64) (errno syscall.Errno, ok bool) {
	if name, found := strings.CutPrefix(path, "/errno/"); found {
		errno, ok = fileErrnos[name]
		return errno, ok
	}
	if v, found := strings.CutPrefix(path, "/value/"); found {
		if v == "op" {
			errno, ok = fileErrnos[op]
			return errno, ok
		}
		return syscall.EACCES, !slices.Contains([]string{"int", "none", "list"}, v)
	}
	switch {
	case strings.HasPrefix(path, "/loop/"):
		return 0, false
	case op == FileOpWrite && size > 1<<20:
		return syscall.EFBIG, true
	case (op == FileOpRemove || op == FileOpRename) && strings.HasSuffix(path, ".keep"):
		return syscall.EPERM, true
	case strings.HasPrefix(path, "/deny"):
		return syscall.EACCES, true
	}
	return 0, true
}

// FuzzFileDecision runs on_file on any op, path and size: it decides as
// the script says, fails as a *ScriptError (denying with EACCES) when
// the script does, and refuses an op it does not know.
func FuzzFileDecision(f *testing.F) {
	p, err := New(Config{PolicyScript: fuzzFileScript}, Options{ScriptMaxSteps: 50_000})
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []struct {
		op, path string
		size     int64
	}{
		{"write", "/workspace/a", 4096},
		{"write", "/workspace/a", 2 << 20},
		{"truncate", "/workspace/a", 2 << 20},
		{"remove", "/workspace/.keep", 0},
		{"rename", "/deny/x.keep", 0},
		{"create", "/deny/x", 0},
		{"open", "/errno/EROFS", 0},
		{"mkdir", "/errno/eperm", 0},
		{"chmod", "/errno/E\xffX", 0},
		{"chown", "/value/int", -1},
		{"utimens", "/value/none", 0},
		{"EDQUOT", "/value/op", 0},
		{"link", "/value/op", 0},
		{"symlink", "/value/list", 0},
		{"write", "/loop/", 1 << 62},
		{"read", "/workspace/a", 0},
		{"", "", 0},
	} {
		f.Add(seed.op, seed.path, seed.size)
	}
	f.Fuzz(func(t *testing.T, op, path string, size int64) {
		errno, err := p.FileDecision(context.Background(), op, path, size)
		if !slices.Contains(fileOps, op) {
			var se *ScriptError
			if errno != syscall.EACCES || err == nil || errors.As(err, &se) {
				t.Fatalf("unknown op %q: %v, %v; want EACCES and an error", op, errno, err)
			}
			return
		}
		want, ok := fuzzFileWant(op, path, size)
		if !ok {
			var se *ScriptError
			if !errors.As(err, &se) || se.Func != fnOnFile || errno != syscall.EACCES {
				t.Fatalf("FileDecision(%q, %q, %d) = %v, %v; want EACCES and an on_file ScriptError", op, path, size, errno, err)
			}
			return
		}
		if err != nil || errno != want {
			t.Fatalf("FileDecision(%q, %q, %d) = %v (%d), %v; want %v (%d)", op, path, size, errno, errno, err, want, want)
		}
	})
}
