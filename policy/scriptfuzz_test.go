package policy

import (
	"errors"
	"strings"
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
