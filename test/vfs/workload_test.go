package vfs_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
)

// workloads are real programs' work on a mount, each a script that
// fails unless its result is right.
var workloads = []struct{ name, script string }{
	{"git", `set -e
cd "$DIR" && mkdir repo && cd repo
git init -q . && git config user.email t@example.com && git config user.name t
for i in $(seq 1 50); do echo "line $i" > "f$i.txt"; done
mkdir -p sub/deep && echo deep > sub/deep/x
git add -A && git commit -qm first
echo changed >> f1.txt && git commit -qam second
test "$(git rev-list --count HEAD)" = 2
git status --porcelain | wc -l | grep -qx 0
git fsck --no-progress 2>&1 | grep -v '^dangling' | (! grep .)
git log --oneline | wc -l`},
	{"venv", `set -e
cd "$DIR"
python3 -m venv --without-pip venv
site=$(venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
printf 'def answer():\n    return 42\n' > "$site/mymod.py"
venv/bin/python -c 'import sys, mymod; assert sys.prefix.endswith("/venv"); print(mymod.answer())'`},
	{"tar", `set -e
cd "$DIR" && mkdir src
python3 - <<'PY'
import os, random
r = random.Random(7)
for i in range(int(os.environ["MANY"])):
    d = "src/d%02d/e%02d" % (i % 50, i % 7)
    os.makedirs(d, exist_ok=True)
    with open("%s/f%04d" % (d, i), "wb") as f:
        f.write(r.randbytes(r.randrange(0, 3000)))
    if i % 500 == 0:
        os.symlink("f%04d" % i, "%s/l%04d" % (d, i))
PY
tar -C src -cf /tmp/in.tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner .
mkdir out && tar -C out -xf /tmp/in.tar
tar -C out -cf /tmp/out.tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner .
cmp /tmp/in.tar /tmp/out.tar
find out -type f | wc -l`},
	{"npm", `set -e
cd "$DIR" && mkdir pkg app
cat > pkg/package.json <<'JSON'
{"name": "airlock-local-pkg", "version": "1.0.0", "main": "index.js"}
JSON
echo 'module.exports = () => "from the tarball";' > pkg/index.js
(cd pkg && npm pack --silent >/dev/null)
cd app && echo '{"name": "app", "version": "1.0.0"}' > package.json
npm install --offline --no-audit --no-fund --silent ../pkg/airlock-local-pkg-1.0.0.tgz
node -e 'console.log(require("airlock-local-pkg")())'`},
}

// workloadWant is what each workload prints, given the number of files
// the tar workload makes.
func workloadWant(name string, many int) string {
	return map[string]string{"git": "2", "venv": "42", "tar": strconv.Itoa(many), "npm": "from the tarball"}[name]
}

// tarFiles is how many files the tar workload archives and extracts: a
// tenth as many in a VM, whose every file operation costs milliseconds
// where no hardware virtualisation helps.
func tarFiles(lv airlock.Isolation) int {
	if lv == airlock.IsolationVM {
		return 500
	}
	return 5000
}

// TestWorkloads runs real programs' work in a memory mount and in an
// overlay mount.
func TestWorkloads(t *testing.T) {
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		for _, p := range providers[:2] {
			t.Run(p.name, func(t *testing.T) {
				t.Parallel()
				var cfg airlock.Config
				cfg.VFS, _ = p.mount(t, t.TempDir())
				sb := box(t, lv, cfg)
				for _, w := range workloads {
					t.Run(w.name, func(t *testing.T) {
						many := tarFiles(lv)
						out := sh(t, sb, 10*time.Minute, "export MANY="+strconv.Itoa(many)+" DIR=/m/"+w.name+" HOME=/tmp/home-"+w.name+"; mkdir -p $DIR $HOME; "+w.script)
						if got, want := strings.TrimSpace(out), workloadWant(w.name, many); got != want {
							t.Errorf("%s: output %q, want %q", w.name, got, want)
						}
					})
				}
			})
		}
	})
}
